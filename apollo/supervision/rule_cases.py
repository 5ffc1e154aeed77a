"""The rule regression cases: scenarios of actions with the label each rule is specified to give.

:mod:`apollo.supervision.labelgen` runs them in a real workspace (and the noisy scripted agent's
episodes in :data:`SCRIPTED` through the one episode loop) and writes ``tests/fixtures/rule_cases*.jsonl``.
A scenario is a list of actions (:class:`A`: thought, tool call, label ``K`` keep or ``D(…)`` drop,
``expect``: what the observation must show) and guidance messages (:class:`G`). Steps several
scenarios share are named once below (``EVAL``, ``FINISH``, the loss-design training steps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Label:
    keep: bool
    categories: tuple[str, ...] = ()
    rule: str | None = None
    note: str = ""


K = Label(True)


def D(*categories: str, rule: str | None = None, note: str = "") -> Label:
    return Label(False, tuple(categories), rule, note)


@dataclass
class A:
    """One action: thought + tool call (or a raw response), its label, and what the run must show."""

    thought: str
    tool: str | None
    arguments: dict[str, Any]
    label: Label
    expect: str | None = None  # a substring the observation must contain
    raw: str | None = None  # a raw assistant response instead of a formatted tool call


def R(raw: str, label: Label) -> A:
    return A("", None, {}, label, raw=raw)


@dataclass
class G:
    """Guidance delivered before the next action."""

    text: str


@dataclass
class Scenario:
    id: str
    task: str
    items: list[A | G]
    workspace: dict[str, Any] = field(default_factory=dict)  # Workspace kwargs (e.g. command_timeout_s)


@dataclass
class Scripted:
    """An episode of the noisy scripted agent, run by the real ReAct loop (the rollout stage's code
    path with ``engine: scripted``) while the simulated annotator watches. Labels are given for the
    steps to drop (every other step is labeled keep); ``tools`` asserts the run took the labeled path.
    """

    id: str
    task: str
    seed: int
    tools: list[str | None]
    drops: dict[int, Label]
    noise: float = 0.4


# --- the scenarios ---------------------------------------------------------------------------------
FILTER = "python scripts/filter.py --input data/corpus.jsonl --output output/filtered.jsonl --min-quality 0.45"
LD_TRAIN = "python scripts/train.py --config config.json"
RD_TRAIN = "python scripts/train_agent.py --config config.json"
SCAFFOLD = "python scripts/run_scaffold.py --config scaffold.json --questions data/dev.jsonl"
AUGMENT = ("python scripts/augment.py --input data/churn_train.jsonl --output output/augmented.jsonl "
           "--method random --ratio 1.0 --noise 0.3")
HUBER = '  "loss": "huber",\n  "delta": 0.5,'
REWARD = ("GOAL_REWARD = 1.0\nTRAP_REWARD = -1.0\nSTEP_REWARD = -0.02\n"
          "SHAPING_WEIGHT = 0.3  # times the decrease of the Manhattan distance to the goal")
ROUTES = ('  "routes": {\n    "compute": "calc",\n    "backwards": "reverse",\n    "sort the letters": "sort",\n'
          '    "express": "units"\n  },\n  "fallback": "guess",\n  "verify": true,\n  "max_retries": 4')
GEN = "python scripts/generate.py --model models/teacher --prompts data/prompts.jsonl --output output/sft.jsonl"
HF_CODE = '''from transformers import AutoModelForCausalLM, AutoTokenizer
import json

tok = AutoTokenizer.from_pretrained("models/teacher")
model = AutoModelForCausalLM.from_pretrained("models/teacher")
with open("output/extra.jsonl", "w") as out:
    for line in open("data/prompts.jsonl"):
        p = json.loads(line)
        ids = tok(p["prompt"], return_tensors="pt").input_ids
        answer = tok.decode(model.generate(ids, max_new_tokens=256)[0])
        out.write(json.dumps({"id": p["id"], "answer": answer}) + "\\n")
'''

# steps several scenarios share (the same action, the same label)
FINISH = A("The task is done.", "finish", {}, K)
EVAL = A("Evaluate the result.", "eval", {}, K, expect="overall_score")
WAIT_TRAIN = A("Wait for training to finish.", "sleep", {"seconds": 7}, K)
CHECK_TRAIN = A("Check whether training finished.", "check_session_idle", {"session_id": "train"}, K, expect="is idle")
READ_CONFIG = A("Read the training config.", "open_file", {"path": "config.json"}, K)
READ_LD_TRAIN = A("Read the training script and its losses.", "open_file", {"path": "scripts/train.py"}, K)
LIST_FILES = A("List the workspace files.", "list_files", {"path": "."}, K)
START_LD_TRAIN = A("Start training in the background.", "run_command",
    {"command": LD_TRAIN, "session_id": "train", "wait_for_completion": False}, K)
HUBER_EDIT = A("Outliers hurt mse; switch to huber with delta 0.5.", "edit_file",
    {"path": "config.json", "start_line": 3, "end_line": 4, "content": HUBER}, K)


SCENARIOS: list[Scenario] = [
    Scenario("df-ignore-script", "df-train-01", [
        LIST_FILES,
        A("Keep the first 300 records as a quick filter.", "run_command",
          {"command": "mkdir -p output && head -n 300 data/corpus.jsonl > output/filtered.jsonl"},
          D("ignore_script", note="hand-made output; scripts/filter.py exists"), expect="[finished, exit code 0]"),
        G("Open scripts/filter.py and use it with --min-quality 0.45 instead of writing your own filter."),
        A("Read the provided filter script.", "open_file", {"path": "scripts/filter.py"}, K),
        A("Filter with the provided script at quality 0.45.", "run_command", {"command": FILTER}, K, expect="kept "),
        A("Check validation accuracy on the filtered data.", "run_command",
          {"command": "python scripts/train.py --data output/filtered.jsonl"}, K, expect="valid_accuracy"),
        EVAL,
        A("Evaluate again to be sure.", "eval", {}, D("improper_eval", note="nothing changed since the last eval")),
        FINISH,
    ]),
    Scenario("ld-blind-edit-early-eval", "ld-train-01", [
        READ_LD_TRAIN,
        A("Outliers hurt mse; switch to huber with delta 0.5.", "edit_file",
          {"path": "config.json", "start_line": 3, "end_line": 4, "content": HUBER},
          D("blind_edit", note="config.json never opened"), expect="Edited config.json"),
        G("Open config.json and read it before editing it. Then set \"loss\" to \"huber\" and \"delta\" to 0.5 "
          "in config.json; mse is hurt by the outliers."),
        A("Read config.json as advised.", "open_file", {"path": "config.json"}, K),
        A("Start training in the background.", "run_command",
          {"command": LD_TRAIN, "session_id": "train", "wait_for_completion": False}, K, expect="Started in background"),
        A("Check the score now.", "eval", {}, D("improper_eval", note="training still running"), expect="overall_score"),
        WAIT_TRAIN,
        CHECK_TRAIN,
        A("Read the training log.", "get_session_output", {"session_id": "train"}, K, expect="training finished"),
        EVAL,
        FINISH,
    ]),
    Scenario("rd-invalid-actions", "rd-train-01", [
        A("Read the reward function.", "read_file", {"path": "reward.py"},
          D("invalid_action", rule="invalid_tool_call"), expect="unknown tool"),
        A("Read the reward function.", "open_file", {"path": "reward.py"}, K),
        A("Read the training script.", "open_file", {},
          D("invalid_action", rule="invalid_tool_call"), expect="needs argument 'path'"),
        G("Use a listed tool with all its arguments, e.g. open_file(path, line_start=1, line_end=None)."),
        A("Read the training script.", "open_file", {"path": "scripts/train_agent.py"}, K),
        R("Sparse reward learns little; add trap penalty, step cost, shaping.\n<tool_call>\n"
          '{"name": "edit_file", "arguments": {"path": "reward.py", "start_line": 7, "end_line": 10, '
          '"content": "GOAL_REWARD = 1.0\nTRAP_REWARD = -1.0"}}\n</tool_call>',
          D("invalid_action", rule="malformed_tool_call", note="raw newline inside a JSON string")),
        A("Sparse reward learns little; add trap penalty, step cost, shaping.", "edit_file",
          {"path": "reward.py", "start_line": 7, "end_line": 10, "content": REWARD}, K, expect="Edited reward.py"),
        A("Start training in the background.", "run_command",
          {"command": RD_TRAIN, "session_id": "train", "wait_for_completion": False}, K),
        WAIT_TRAIN,
        CHECK_TRAIN,
        EVAL,
        R("", D("invalid_action", rule="invalid_action", note="empty response")),
        FINISH,
    ]),
    Scenario("sc-symbolic-failures", "sc-train-01", [
        A("Read the solver tools.", "open_file", {"path": "scripts/solver.py"}, K),
        A("Check that the scaffold config parses.", "run_command",
          {"command": "python -c \"import json; print(json.load(open('scaffold.json'))\""},
          D("compile_error", rule="compile_error"), expect="SyntaxError"),  # (Python's compile step: round 18)
        A("Build a small C helper for the solver.", "run_command",
          {"command": "printf 'int count(const char *s {\\n  return 0;\\n}\\n' > count.c && gcc -c count.c -o count.o"},
          D("compile_error", rule="compile_error"), expect="error: expected"),
        A("Run the scaffold on the dev questions.", "run_command",
          {"command": "python scripts/run_scaffold.py --config scaffold.json --questions data/dev.json"},
          D("runtime_error", rule="runtime_error"), expect="Traceback"),
        A("Look at the dev questions.", "run_command", {"command": "head -n 3 data/dev.json"},
          D("explicit_failure", rule="explicit_failure"), expect="No such file or directory"),
        A("Use the flag names I remember.", "run_command", {"command": "python scripts/run_scaffold.py --cfg scaffold.json"},
          D("runtime_error", rule="nonzero_exit_error"), expect="unrecognized arguments"),
        A("Stop any stale scaffold run.", "run_command", {"command": "pkill -f run_scaffold"},
          D("refused_action", rule="refused_tool_call"), expect="Refused"),
        A("Check the OS version.", "open_file", {"path": "/etc/os-release"},
          D("refused_action", rule="refused_tool_call"), expect="Refused"),
        A("Look at the dev questions.", "open_file", {"path": "data/dev.jsonl", "line_start": 1, "line_end": 12}, K),
        A("Read the current scaffold config.", "open_file", {"path": "scaffold.json"}, K),
        R('Open the config again.\n<tool_call>\n{"name": "open_file", "arguments": {"path" "scaffold.json"}}\n</tool_call>',
          D("invalid_action", rule="malformed_tool_call", note="the call's JSON does not parse")),
        A("Route arithmetic to the calculator.", "edit_file",
          {"path": "scaffold.json", "start_line": 2, "end_line": 2, "content": '  "routes": {"calculate": "calc" "count": "count"},'},
          D("compile_error", rule="broken_json_edit", note="missing comma: scaffold.json no longer parses"),
          expect="Now:\n1: {"),
        A("Route each kind to its tool; verify and retry flaky tools.", "edit_file",
          {"path": "scaffold.json", "start_line": 2, "end_line": 5, "content": ROUTES}, K),
        A("Check dev accuracy of the new scaffold.", "run_command", {"command": SCAFFOLD}, K, expect="accuracy="),
        EVAL,
        FINISH,
    ]),
    Scenario("da-regression-budget", "da-train-01", [
        LIST_FILES,
        A("Read the augmentation script.", "open_file", {"path": "scripts/augment.py"}, K),
        A("Check how imbalanced the raw data is.", "run_command",
          {"command": "python scripts/train.py --data data/churn_train.jsonl"}, K),
        A("Oversample the rare class with random.", "run_command", {"command": AUGMENT}, K, expect="synthetic"),
        A("Check validation balanced accuracy.", "run_command",
          {"command": "python scripts/train.py --data output/augmented.jsonl"}, K),
        EVAL,
        A("More synthetic records with stronger noise should help further.", "run_command",
          {"command": AUGMENT.replace("--method random --ratio 1.0 --noise 0.3", "--method random --ratio 6.0 --noise 3.0")},
          D("performance_regression", note="the next eval scores lower"), expect="synthetic"),
        A("Check validation balanced accuracy.", "run_command",
          {"command": "python scripts/train.py --data output/augmented.jsonl"}, K),
        EVAL,
        A("The stronger noise hurt; go back to ratio 1.0 and noise 0.3.", "run_command", {"command": AUGMENT}, K),
        EVAL,
        A("Evaluate once more.", "eval", {}, D("refused_action", rule="refused_tool_call",
                                                note="budget exhausted: the environment refused it (issue 33's taxonomy)"), expect="budget exhausted"),
        FINISH,
    ]),
    Scenario("ld-resource-waste", "ld-train-01", [
        READ_CONFIG,
        READ_LD_TRAIN,
        HUBER_EDIT,
        START_LD_TRAIN,
        WAIT_TRAIN,
        CHECK_TRAIN,
        A("Wait a bit more to be safe.", "sleep", {"seconds": 5}, K),  # waiting is not compute use
        A("Read the training log.", "get_session_output", {"session_id": "train"}, K, expect="exit code 0"),
        A("Train again to confirm the numbers.", "run_command",
          {"command": LD_TRAIN, "session_id": "train", "wait_for_completion": False},
          D("resource_waste", note="identical finished run, nothing changed")),
        WAIT_TRAIN,
        CHECK_TRAIN,
        EVAL,
        FINISH,
    ]),
    Scenario("rd-foreground-polling", "rd-train-01", [
        A("Read the reward function.", "open_file", {"path": "reward.py"}, K),
        READ_CONFIG,
        A("Sparse reward learns little; add trap penalty, step cost, shaping.", "edit_file",
          {"path": "reward.py", "start_line": 7, "end_line": 10, "content": REWARD}, K),
        A("Train the agent.", "run_command", {"command": RD_TRAIN}, K, expect="still running in background session"),
        A("Check whether training finished.", "check_session_idle", {"session_id": "default"}, K, expect="is busy"),
        A("Check again.", "check_session_idle", {"session_id": "default"},
          D("resource_waste", note="busy polling without waiting"), expect="is busy"),
        A("Print the policy stats meanwhile.", "run_command", {"command": "ls -l output"},
          D("explicit_failure", rule="tool_error", note="session busy"), expect="is busy with"),
        A("Wait for training to finish.", "sleep", {"seconds": 5}, K),
        A("Check whether training finished.", "check_session_idle", {"session_id": "default"}, K, expect="is idle"),
        EVAL,
        FINISH,
    ], workspace={"wait_s": 3.0}),
    Scenario("dc-early-eval-ignore-script", "dc-train-01", [
        LIST_FILES,
        A("Read the dataset builder.", "open_file", {"path": "scripts/build_dataset.py"}, K),
        A("Check the score now.", "eval", {}, D("improper_eval", note="before any change: baseline"), expect="overall_score"),
        A("Use the literal pairs as the training set.", "run_command",
          {"command": "mkdir -p output && cp data/raw/pairs.jsonl output/train.jsonl"}, D("ignore_script")),
        G("Run scripts/build_dataset.py with --expand-templates --per-template 30; the literal pairs alone miss "
          "most lexicon words."),
        A("Read the templates.", "open_file", {"path": "data/raw/templates.jsonl"}, K),
        A("Build with expanded templates as advised.", "run_command",
          {"command": "python scripts/build_dataset.py --raw data/raw --output output/train.jsonl "
                      "--expand-templates --per-template 30"}, K, expect="wrote "),
        A("Check validation accuracy.", "run_command", {"command": "python scripts/train.py --data output/train.jsonl"},
          K, expect="valid_accuracy"),
        A("Check validation accuracy again.", "run_command",
          {"command": "python scripts/train.py --data output/train.jsonl"},
          D("resource_waste", note="same finished command, nothing changed")),
        A("Count the built records.", "run_command", {"command": "wc -l output/train.jsonl"}, K),
        EVAL,
        FINISH,
    ]),
    Scenario("llm-gen-vllm-available", "dc-llm-01", [
        LIST_FILES,
        A("Read the generation script.", "open_file", {"path": "scripts/generate.py"}, K),
        A("Generate the answers with transformers.", "run_command", {"command": GEN + " --backend hf"},
          D("inefficient_inference"), expect="backend=hf"),
        A("Check that the vLLM package is importable.", "run_command", {"command": "pip list 2>/dev/null | grep -i vllm"},
          K),
        A("Try one prompt with a transformers pipeline.", "run_command",
          {"command": "python -c \"from transformers import pipeline; g = pipeline('text-generation', "
                      "model='models/teacher'); print(g('Explain concept 0.')[0])\""},
          D("inefficient_inference", "runtime_error", rule="runtime_error",
            note="HF pipeline while vLLM is installed (and transformers is missing in the sandbox)"),
          expect="Traceback"),
        G("Use --backend vllm; it batches the prompts and is much faster than transformers generate."),
        A("Generate with vLLM as advised.", "run_command", {"command": GEN + " --backend vllm"}, K, expect="backend=vllm"),
        A("Write my own script for extra answers.", "create_file", {"path": "gen_extra.py", "content": HF_CODE},
          D("inefficient_inference", note="a transformers generate loop, one sample at a time, while vLLM is installed "
                                          "(issue 33: the file is judged; its creation carries the fault, a clean run "
                                          "of it is kept)"), expect="Created"),
        A("Generate the extra answers.", "run_command", {"command": "python gen_extra.py"},
          D("runtime_error", rule="runtime_error",
            note="runs the HF generate loop written at 6, which carries that fault; the run fails (transformers is "
                 "missing in the sandbox)"),
          expect="Traceback"),
        A("Count the generated answers.", "run_command", {"command": "wc -l output/sft.jsonl"}, K),
        A("Look at the first answers.", "open_file", {"path": "output/sft.jsonl", "line_start": 1, "line_end": 3}, K),
        FINISH,
    ]),
    Scenario("llm-gen-cpu-only", "dc-llm-02", [
        A("Read the generation script.", "open_file", {"path": "scripts/generate.py"}, K),
        A("Generate the answers with transformers (the only backend here).", "run_command",
          {"command": GEN + " --backend hf"}, K, expect="backend=hf"),
        A("Write a script for a second sample per prompt.", "create_file", {"path": "gen_extra.py", "content": HF_CODE}, K),
        A("Count the generated answers.", "run_command", {"command": "wc -l output/sft.jsonl"}, K),
        FINISH,
    ]),
    Scenario("ld-violate-guidance", "ld-train-01", [
        READ_CONFIG,
        READ_LD_TRAIN,
        A("Try the l1 loss first.", "edit_file", {"path": "config.json", "start_line": 3, "end_line": 3,
                                                   "content": '  "loss": "l1",'}, K),
        G("Do not change scripts/train.py, only config.json. Use huber with delta 0.5 and train in session train "
          "in the background."),
        A("Skip the pause between epochs to train faster.", "edit_file",
          {"path": "scripts/train.py", "start_line": 58, "end_line": 58, "content": "        pass  # no pause"},
          D("violate_instruction", note="guidance: do not change scripts/train.py"), expect="Edited scripts/train.py"),
        A("Switch to huber with delta 0.5 as advised.", "edit_file",
          {"path": "config.json", "start_line": 3, "end_line": 4, "content": HUBER}, K),
        A("Train now.", "run_command", {"command": LD_TRAIN},
          D("violate_instruction", note="guidance: background, session train"), expect="training finished"),
        EVAL,
        FINISH,
    ]),
    Scenario("df-empty-output-violate-eval", "df-train-01", [
        A("Read the provided filter script.", "open_file", {"path": "scripts/filter.py"}, K),
        A("Filter at quality 45 percent.", "run_command", {"command": FILTER.replace("0.45", "45")},
          D("explicit_failure", rule="empty_output"), expect="kept 0 of"),
        A("Filter with the provided script at quality 0.45.", "run_command", {"command": FILTER}, K),
        A("Check validation accuracy on the filtered data.", "run_command",
          {"command": "python scripts/train.py --data output/filtered.jsonl"}, K),
        EVAL,
        A("Note the result.", "create_file", {"path": "notes.md", "content": "min-quality 0.45 works.\n"}, K,
          expect="Created notes.md"),
        G("Stop evaluating: nothing will change the score now. Call finish when you are done."),
        A("Evaluate again to be sure.", "eval", {},
          D("improper_eval", "violate_instruction", note="nothing changed; guidance said finish")),
        FINISH,
    ]),
    Scenario("ld-regression", "ld-train-02", [
        READ_CONFIG,
        READ_LD_TRAIN,
        A("Outliers hurt mse; switch to huber with delta 1.5.", "edit_file",
          {"path": "config.json", "start_line": 3, "end_line": 4, "content": HUBER.replace("0.5", "1.5")}, K),
        START_LD_TRAIN,
        WAIT_TRAIN,
        CHECK_TRAIN,
        A("Evaluate the result.", "eval", {}, K, expect="overall_score=80"),
        A("A larger delta may fit the clean points better.", "edit_file",
          {"path": "config.json", "start_line": 4, "end_line": 4, "content": '  "delta": 40.0,'},
          D("performance_regression", note="next eval lower")),
        A("Start training in the background.", "run_command",
          {"command": LD_TRAIN, "session_id": "train", "wait_for_completion": False},
          K),  # the retrain carries the edit out: the edit is the regression (issue 33)
        WAIT_TRAIN,
        CHECK_TRAIN,
        EVAL,
        A("The larger delta is worse; go back to 1.5.", "edit_file",
          {"path": "config.json", "start_line": 4, "end_line": 4, "content": '  "delta": 1.5,'}, K),
        START_LD_TRAIN,
        WAIT_TRAIN,
        CHECK_TRAIN,
        FINISH,
    ]),
    Scenario("ld-background-crash", "ld-train-01", [
        READ_CONFIG,
        READ_LD_TRAIN,
        HUBER_EDIT,
        A("Start training in the background.", "run_command",
          {"command": "python scripts/train.py --config configs/huber.json", "session_id": "train",
           "wait_for_completion": False},
          D("runtime_error", rule="runtime_error", note="the job crashes: no configs/huber.json"),
          expect="Started in background"),
        A("Wait for training to finish.", "sleep", {"seconds": 3}, K),
        A("Read the training log.", "get_session_output", {"session_id": "train"}, K, expect="Traceback"),
        A("The config is config.json; start training again.", "run_command",
          {"command": LD_TRAIN, "session_id": "train", "wait_for_completion": False}, K),
        WAIT_TRAIN,
        CHECK_TRAIN,
        EVAL,
        FINISH,
    ]),
    Scenario("sc-script-failed", "sc-train-01", [  # (round 21) a script that stops with its own message, no error word
        A("Write a quick check of the routes.", "create_file",
          {"path": "scripts/count_routes.py", "content": "import json, sys\nroutes = json.load(open('scaffold.json'))"
           ".get('routes', {})\nprint(f'{len(routes)} routes set, 5 wanted')\nsys.exit(0 if len(routes) >= 5 else 1)\n"}, K),
        A("Count the routes.", "run_command", {"command": "python scripts/count_routes.py"},
          D("runtime_error", rule="script_failed"), expect="5 wanted"),
    ]),
    Scenario("ld-sed-overwrite-timeout", "ld-train-01", [
        A("Switch the loss to huber in place.", "run_command",
          {"command": "sed -i 's/\"mse\"/\"huber\"/' config.json"}, D("blind_edit", note="sed -i on an unseen file")),
        READ_CONFIG,
        A("Use a smaller delta for huber.", "run_command",
          {"command": "sed -i 's/\"delta\": 1.0/\"delta\": 0.5/' config.json"}, K),
        A("Train the model.", "run_command", {"command": LD_TRAIN, "wait_for_completion": True},
          D("explicit_failure", rule="command_timeout", note="killed at the 4 s limit"), expect="killed after"),
        A("Replace the training script with a faster one.", "create_file",
          {"path": "scripts/train.py", "content": "print('training finished; wrote output/model.json')\n"},
          D("blind_edit", note="overwrote scripts/train.py without reading it"), expect="Overwrote"),
        A("Write down what changed.", "create_file", {"path": "notes.md", "content": "huber, delta 0.5, 60 epochs\n"},
          K, expect="Created"),
        FINISH,
    ], workspace={"command_timeout_s": 4.0}),
]


# Noisy scripted-agent episodes (labels written after reading each episode; see `apollo mask explain`).
_EV, _FIN = "eval", "finish"
SCRIPTED: list[Scripted] = [
    Scripted("scripted-df-02-s1", "df-train-02", 1,
             ["ls", "list_files", "open_file", "run_command", "run_command", _EV, _EV, _FIN],
             {0: D("invalid_action", rule="invalid_tool_call"), 6: D("improper_eval", note="eval twice")}),
    Scripted("scripted-dc-02-s3", "dc-train-02", 3,
             ["ls", "list_files", "open_file", "open_file", "run_command", "run_command", "run_command", _EV, _FIN],
             {0: D("invalid_action", rule="invalid_tool_call"), 4: D("ignore_script", note="cp instead of the builder")}),
    Scripted("scripted-sc-02-s4", "sc-train-02", 4,
             ["read_file", "open_file", "open_file", "edit_file", "open_file", "run_command", _EV, _FIN],
             {0: D("invalid_action", rule="invalid_tool_call"), 3: D("blind_edit", note="scaffold.json not opened")}),
    Scripted("scripted-ld-02-s7", "ld-train-02", 7,
             ["open_file", "open_file", "run_command", "edit_file", "open_file", "run_command", "sleep",
              "check_session_idle", "get_session_output", _EV, _EV, _FIN],
             {0: D("invalid_action", rule="invalid_tool_call"),
              3: D("blind_edit", note="config.json not opened"), 10: D("improper_eval", note="eval twice")}),
    Scripted("scripted-rd-02-s8", "rd-train-02", 8,
             ["open_file", _EV, "edit_file", "open_file", "run_command", "sleep", "check_session_idle", "read_output",
              "get_session_output", _EV, _EV, _FIN],
             {1: D("improper_eval", note="before any change"), 2: D("blind_edit", note="reward.py not opened"),
              7: D("invalid_action", rule="invalid_tool_call"), 10: D("improper_eval", note="eval twice")}),
    Scripted("scripted-rd-03-s9", "rd-train-03", 9,
             ["open_file", "open_file", "open_file", "edit_file", "run_command", _EV, "sleep", "check_session_idle",
              "get_session_output", _EV, _EV, _FIN],
             {1: D("invalid_action", rule="invalid_tool_call"), 5: D("improper_eval", note="training still running"),
              10: D("improper_eval", note="eval twice")}),
    Scripted("scripted-ld-01-s10", "ld-train-01", 10,
             ["open_file", "open_file", "edit_file", "bash", "run_command", _EV, "sleep", "check_session_idle",
              "get_session_output", _EV, _EV, _FIN],
             {3: D("invalid_action", rule="invalid_tool_call"), 5: D("improper_eval", note="training still running"),
              10: D("improper_eval", note="eval twice")}),
    Scripted("scripted-df-03-s5", "df-train-03", 5,
             ["list_files", "open_file", "run_command", "run_command", _EV, _FIN], {}),
]
