"""Issue 33: the detectors on research tasks as InnovatorBench poses them (GPU pools, provided scripts
with usage lines, human directives). One hand-made case per behaviour; each would fail with the
detectors before issue 33 (measured on tests/fixtures/blind_research: docs/results.md#blind-research)."""

from __future__ import annotations

from pathlib import Path

from apollo.schema import EvalRecord, Machine, TaskFacts
from apollo.supervision.instructions import extract
from apollo.supervision.masker import Masker, MaskConfig
from tests.test_detectors_task import bg, drops, ev, run, st, traj

DESC = """# Build an SFT set and train
## Task
Build the training set, train `Qwen2.5-7B` with `scripts/train.sh`, and leave the checkpoint at
`outputs/ckpt/final/`.
## Evaluation
The evaluation scores `outputs/ckpt/final/` on a hidden test set. At most 3 eval calls.
## Environment
Compute pool: one GPU server with 8 x H100 and a CPU server. vLLM 0.6.3 is installed.
"""
SCRIPTS = {
    "scripts/verify_answers.py": "- `scripts/verify_answers.py --input IN --output OUT`: CPU; keeps samples whose final "
                                 "number matches.",
    "scripts/rewrite.py": "- `scripts/rewrite.py --input IN --output OUT --model PATH [--tensor_parallel_size 1]`: "
                          "rewrites answers with vLLM (batched).",
    "scripts/train.sh": "- `scripts/train.sh DATA OUTPUT_DIR [EPOCHS]`: full fine-tuning with `torchrun "
                        "--nproc_per_node 8` (ZeRO-3).",
    "scripts/bench.py": "- `scripts/bench.py --model PATH [--tp 1]`: dev accuracy with vLLM (greedy).",
    "scripts/serve.sh": "- `scripts/serve.sh MODEL_DIR [PORT]`: starts a long-lived vLLM server; it runs until stopped.",
}
FACTS = TaskFacts(compute_pool=[Machine(kind="gpu", gpus=8), Machine(kind="localhost_cpu", cpus=64)], scripts=SCRIPTS,
                  max_evals=3)


def t(*steps, evals=()):
    return traj(*steps, evals=evals, desc=DESC, facts=FACTS)


def created(path, content):
    return st("create_file", {"path": path, "content": content}, f"Created {path} ({len(content)} characters).")


def idle(sid):
    return st("check_session_idle", {"session_id": sid}, f"Session '{sid}' is idle (last command finished, exit code 0).")


def at(step, hhmm):
    """``step`` at clock time ``hhmm`` (UTC, 2026-12-06), its guidance delivered then."""
    from datetime import UTC, datetime

    when = datetime(2026, 12, 6, tzinfo=UTC).timestamp() + 3600 * int(hhmm[:2]) + 60 * int(hhmm[3:])
    return step.model_copy(update={"started_at": when,
                                   "guidance": [g.model_copy(update={"delivered_at": when}) for g in step.guidance]})


# ------------------------------------------------------------------------------- taxonomy
def test_a_refused_call_is_a_refused_action_and_bad_json_an_invalid_action():
    refused = run("sudo apt-get install -y pigz", "Refused: 'sudo' is not allowed in the sandbox.")
    refused = refused.model_copy(update={"observation": refused.observation.model_copy(update={"refused": True})})
    bad = st("list_files", {"path": "."}).model_copy(update={"assistant_text": "<tool_call>\n{'name': 'finish'}\n</tool_call>"})
    from apollo.agent.actions import parse_action

    bad = bad.model_copy(update={"action": parse_action(bad.assistant_text)})
    masker = Masker(MaskConfig())
    steps, _ = masker.mask([t(refused, bad)])
    assert [(s.mask.keep, s.mask.category) for s in steps[0].steps] == [(False, "refused_action"), (False, "invalid_action")]
    # the mask stage's GX checkpoint checks every drop's category against this list
    from apollo.quality import check_masks

    assert {"refused_action", "invalid_action"} <= set(masker.categories)
    assert check_masks(steps, known_categories=masker.categories).success


# -------------------------------------------------------------------------- resource waste
def test_cpu_tools_by_their_usage_line_are_no_gpu_jobs_and_launcher_scripts_use_what_they_say():
    cpu = run("python scripts/verify_answers.py --input outputs/rewritten.jsonl --output outputs/sft_verified.jsonl")
    train = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train")
    bench = bg("python scripts/bench.py --model outputs/ckpt/final --tp 1", "b")  # a short dev check
    assert drops(t(cpu, train, bench), "resource_waste") == {}
    narrow = bg("python scripts/rewrite.py --input a --output outputs/r.jsonl --model m --tensor_parallel_size 2", "gen")
    assert "on 2 GPU(s) while 8" in drops(t(narrow), "resource_waste")[0]
    default_tp = bg("python scripts/rewrite.py --input a --output outputs/r.jsonl --model m", "gen")  # [--tp 1]
    assert "on 1 GPU(s)" in drops(t(default_tp), "resource_waste")[0]


def test_a_duplicate_of_a_running_job_and_a_long_sleep_after_it_finished_are_waste():
    first = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train")
    second = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train2")
    d = drops(t(first, second), "resource_waste")
    assert list(d) == [1] and "second scripts/train.sh while the one of step 0" in d[1]
    settle = t(first, idle("train"), st("sleep", {"seconds": 1800}, "Slept 1800 s."))
    assert "slept 1800 s with no job left to wait for" in drops(settle, "resource_waste")[2]
    waiting = t(first, st("sleep", {"seconds": 1800}, "Slept 1800 s."))
    assert drops(waiting, "resource_waste") == {}


# ---------------------------------------------------------------------- inefficient inference
HF_LOOP = """from transformers import AutoModelForCausalLM, AutoTokenizer
import json, sys
m = AutoModelForCausalLM.from_pretrained("models/Qwen2.5-7B").cuda()
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        ids = tok(json.loads(line)["q"], return_tensors="pt").to("cuda")
        out.write(tok.decode(m.generate(**ids)[0]))
"""
VLLM_LOOP = """from vllm import LLM, SamplingParams
llm = LLM(model="models/m", tensor_parallel_size=1)
with open("outputs/refs.jsonl", "w") as out:
    for r in rows:
        o = llm.generate(r["instruction"], SamplingParams(max_tokens=64))
"""
VLLM_BATCH = """from vllm import LLM, SamplingParams
llm = LLM(model="models/m", tensor_parallel_size=8)
outs = llm.generate([r["instruction"] for r in rows], SamplingParams(max_tokens=64))
"""
CLIENT_LOOP = """from openai import OpenAI
client = OpenAI(base_url="http://localhost:8000/v1", api_key="none")
for line in open("data/test.jsonl"):
    r = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": line}])
"""
HF_BATCHED = """from transformers import AutoModelForCausalLM
for i in range(0, len(prompts), 32):
    out = m.generate(**tok(prompts[i:i + 32], return_tensors="pt", padding=True))
"""


def test_a_written_script_that_generates_one_sample_at_a_time_and_each_run_of_it():
    d = drops(t(created("scripts/tag.py", HF_LOOP), bg("python scripts/tag.py outputs/a.jsonl outputs/b.jsonl", "tag")),
              "inefficient_inference")
    assert sorted(d) == [0, 1] and "once per sample" in d[0] and "runs scripts/tag.py" in d[1]
    for code in (VLLM_LOOP, CLIENT_LOOP):
        assert list(drops(t(created("scripts/x.py", code)), "inefficient_inference")) == [0]
    for code in (VLLM_BATCH, HF_BATCHED):  # one batched call, or batches of 32: not one at a time
        assert drops(t(created("scripts/x.py", code)), "inefficient_inference") == {}


# ---------------------------------------------------------------------------- ignore script
def test_an_own_version_of_a_provided_script_and_its_runs_but_not_a_wrapper_or_another_method():
    own = created("scripts/check_answers.py", "import json, re, sys\nfor line in open(sys.argv[1]): pass\n")
    d = drops(t(own, run("python scripts/check_answers.py outputs/rewritten.jsonl outputs/sft.jsonl")), "ignore_script")
    assert sorted(d) == [0, 1] and "own version of the provided scripts/verify_answers.py" in d[0]
    wrapper = created("run_verify.sh", "python scripts/verify_answers.py --input a --output outputs/v.jsonl\n")
    assert drops(t(wrapper, run("bash run_verify.sh")), "ignore_script") == {}
    judge = created("scripts/self_verify.py", VLLM_BATCH)  # an LLM check is not the CPU checker done again
    assert drops(t(judge), "ignore_script") == {}


# ------------------------------------------------------------------------------- blind edit
def test_an_edit_of_lines_never_shown_is_blind_even_when_other_lines_were():
    opened = st("open_file", {"path": "src/loss.py", "line_start": 55, "line_end": 62},
                "[src/loss.py: lines 55-62 of 118]\n55: x\n")
    inside = st("edit_file", {"path": "src/loss.py", "start_line": 58, "end_line": 60, "content": "y"},
                "Edited src/loss.py lines 58-60. Now:\n57: a\n58: y\n")
    outside = st("edit_file", {"path": "src/loss.py", "start_line": 37, "end_line": 38, "content": "z"}, "Edited")
    d = drops(t(opened, inside, outside), "blind_edit")
    assert list(d) == [2] and "lines 37-38 of src/loss.py after seeing only lines 55-62" in d[2]


# ---------------------------------------------------------------------------- improper eval
def test_an_eval_waits_only_for_jobs_that_write_what_is_evaluated():
    train = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train")
    assert list(drops(t(train, ev()), "improper_eval")) == [1]  # OUTPUT_DIR outputs/ckpt holds the checkpoint
    side = created("scripts/refs.py", VLLM_BATCH.replace("outs = ", "open('outputs/refs.jsonl', 'w').write(str(") + "))\n")
    unrelated = bg("python scripts/refs.py", "refs")
    server = bg("bash scripts/serve.sh outputs/ckpt/final", "srv")
    assert drops(t(train, idle("train"), side, unrelated, server, ev()), "improper_eval") == {}


# ---------------------------------------------------------------------- performance regression
def test_the_edit_is_the_regression_not_the_retrain_that_carries_it_out():
    train = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train")
    edit = st("edit_file", {"path": "configs/train.yaml", "start_line": 3, "end_line": 3, "content": "lr: 1e-3"}, "Edited")
    steps = [train, idle("train"), ev(), edit, train, idle("train"), ev()]
    d = drops(t(*steps, evals=[EvalRecord(step=2, score=38.2), EvalRecord(step=6, score=31.5)]),
              "performance_regression")
    assert list(d) == [3] and "best so far 38.2" in d[3]  # from 38.2 (below the old 50 floor) to 31.5
    # (sixth research set) a retrain on another GPU count, and a compound command whose parts all ran before, carry
    # the edit out; a compound command with a new part (another data mix) is a change of its own
    t4 = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt 4", "train")
    t8 = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt 8", "train")
    mix = run("cat data/a.jsonl outputs/b.jsonl > outputs/sft.jsonl")
    again = bg("python scripts/check.py --in outputs/b.jsonl && cat data/a.jsonl outputs/b.jsonl > outputs/sft.jsonl && "
               "bash scripts/train.sh outputs/sft.jsonl outputs/ckpt 8", "train")
    other = bg("python scripts/check.py --in outputs/b.jsonl && cat data/a.jsonl outputs/b.jsonl outputs/c.jsonl > "
               "outputs/sft.jsonl && bash scripts/train.sh outputs/sft.jsonl outputs/ckpt 8", "train")
    check = run("python scripts/check.py --in outputs/b.jsonl")
    for retrain, want in ((t8, [3]), (again, [3]), (other, [3, 4])):
        steps = [check, mix, t4, idle("train"), ev(), edit, retrain, idle("train"), ev()]
        d = drops(t(*steps, evals=[EvalRecord(step=4, score=38.2), EvalRecord(step=8, score=31.5)]), "performance_regression")
        assert sorted(d) == [w + 2 for w in want], (retrain.action.arguments["command"], d)
    # (sixth set) an edit, its retrain launched and an eval seconds later (the old model, same score): the final eval
    # measures the edit, which is the regression
    steps = [t4, idle("train"), ev(), edit, t8, ev(), st("finish", {}, "Finished.")]
    d = drops(t(*steps, evals=[EvalRecord(step=2, score=58.2), EvalRecord(step=5, score=58.2), EvalRecord(step=6, score=46.5, forced=True)]),
              "performance_regression")
    assert list(d) == [3], d


# ---------------------------------------------------------------------- violate instruction
def test_directives_parsed_into_checkable_constraints():
    kinds = lambda text: [(d.kind, d.target, d.values.get("v")) for d in extract(text)]  # noqa: E731
    assert kinds("Do not go above 0.6 for format_weight.") == [("bound", "format_weight", "0.6")]
    assert kinds("Keep min_quality at 8; do not lower it.") == [("keep", "min_quality", "8")]
    assert kinds("Use --min_votes 5 when extracting.") == [("flag", "--min_votes", "5")]
    assert ("count", "examples", "40,000") in kinds("Keep the final training set at 40,000 examples or fewer.")
    assert ("bound", "max_calls", "12") in kinds("Keep at most 12 tool calls per question; do not raise max_calls.")
    assert [k for k, *_ in kinds("Do not touch the batch size and KL settings.")] == ["no_touch", "no_touch"]


def test_a_breach_after_a_directive_is_a_violation_and_a_satisfying_action_is_not():
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    bound = g(st("edit_file", {"path": "configs/grpo.yaml", "start_line": 5, "end_line": 5, "content": "  format_weight: 0.9"},
                 "Edited"), "Do not go above 0.6 for format_weight.")
    ok = st("edit_file", {"path": "configs/grpo.yaml", "start_line": 5, "end_line": 5, "content": "  format_weight: 0.6"},
            "Edited")
    assert list(drops(t(bound, ok), "violate_instruction")) == [0]
    keep = g(run("python scripts/select.py --input a --output outputs/s.jsonl --min_quality 7"),
             "Keep min_quality at 8; do not lower it.")
    assert "not 8 as told" in drops(t(keep), "violate_instruction")[0]
    shown = st("open_file", {"path": "configs/dpo.yaml"}, "[configs/dpo.yaml: lines 1-3 of 3]\n1: per_device_train_batch_size: 4\n"
                                                        "2: kl_penalty: 0.05\n3: learning_rate: 5e-7")
    touch = st("edit_file", {"path": "configs/dpo.yaml", "start_line": 2, "end_line": 2, "content": "kl_penalty: 0.0"}, "Edited")
    same = st("edit_file", {"path": "configs/dpo.yaml", "start_line": 1, "end_line": 1,
                            "content": "per_device_train_batch_size: 4"}, "Edited")
    lr = st("edit_file", {"path": "configs/dpo.yaml", "start_line": 3, "end_line": 3, "content": "learning_rate: 1e-6"}, "Edited")
    d = drops(t(g(shown, "Do not touch the batch size and KL settings."), same, touch, lr), "violate_instruction")
    assert list(d) == [2] and "kl_penalty (0.05 -> 0)" in d[2]  # same value and another topic are kept
    flag = g(run("python scripts/mix.py --output outputs/mix.jsonl --max_per_problem 8"),
             "Use --max_per_problem 4 in mix.py; more overweights easy problems.")
    assert list(drops(t(flag, run("python scripts/mix.py --output outputs/mix.jsonl --max_per_problem 4")),
                      "violate_instruction")) == [0]
    big = g(run("head -n 58000 outputs/all.jsonl > outputs/sft.jsonl && wc -l outputs/sft.jsonl",
                "$ head -n 58000 outputs/all.jsonl > outputs/sft.jsonl && wc -l outputs/sft.jsonl\n58000 outputs/sft.jsonl"),
            "Keep the final training set at 40,000 examples or fewer.")
    retrain = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train")
    d = drops(t(big, retrain), "violate_instruction")
    assert list(d) == [0] and "58,000 examples" in d[0]  # the breach, not the training run that consumes it
    assert drops(t(big), "violate_instruction") == {}  # an intermediate file nobody trains on is no breach


# ------------------------------------------------------- session 40: more ways the tasks say it
def test_more_directive_forms_keep_a_topic_leave_a_file_alone_and_the_last_eval_rule():
    kinds = lambda text: [(d.kind, d.target, d.values.get("v")) for d in extract(text)]  # noqa: E731
    assert ("keep", r"learning_rate|(?:^|_)lr(?:_|$)", "2e-5") in kinds("Keep the learning rate at 2e-5.")
    # the grammar reads "leave that file alone"; the generic layer adds what "to beta 0.1" asks for
    assert kinds("Revert configs/dpo.yaml to beta 0.1 and leave that file alone.") == [
        ("forbid_write", "configs/dpo.yaml", None), ("keep", r"(?:^|_)beta(?:_|$)", "0.1")]
    assert kinds("Leave scripts/train.sh as it is.") == [("forbid_write", "scripts/train.sh", None)]
    assert kinds("Do not spend the last eval without a clear improvement on dev (scripts/bench.py) first.") == \
        [("eval_needs_check", "scripts/bench.py", None)]
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    edit = lambda c: st("edit_file", {"path": "configs/train.yaml", "start_line": 5, "end_line": 5, "content": c}, "Edited")
    d = drops(t(g(edit("learning_rate: 2.0e-5"), "Keep the learning rate at 2e-5."), edit("learning_rate: 4.0e-5")),
              "violate_instruction")
    assert list(d) == [1] and "not 2e-5 as told" in d[1]  # 2.0e-5 is the value asked for: kept
    dpo = lambda c: st("edit_file", {"path": "configs/dpo.yaml", "start_line": 3, "end_line": 3, "content": c}, "Edited")
    d = drops(t(g(dpo("beta: 0.1"), "Revert configs/dpo.yaml to beta 0.1 and leave that file alone."),
                dpo("learning_rate: 1.0e-6")), "violate_instruction")
    assert list(d) == [1]  # the revert asked for is kept, the edit after it is not


def test_the_last_eval_needs_a_change_and_the_named_check_after_it():
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    rule = "Do not spend the last eval without a clear improvement on dev (scripts/bench.py) first."
    train = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train")
    bench = run("python scripts/bench.py --model outputs/ckpt/final")
    edit = st("edit_file", {"path": "configs/train.yaml", "start_line": 3, "end_line": 3, "content": "lr: 1e-5"}, "Edited")
    base = [train, idle("train"), ev(), g(edit, rule), train, idle("train"), ev()]
    unchanged = drops(t(*base, ev()), "violate_instruction")
    assert list(unchanged) == [7] and "nothing changed" in unchanged[7]
    unchecked = drops(t(*base, edit, train, idle("train"), ev()), "violate_instruction")
    assert list(unchecked) == [10] and "without running scripts/bench.py" in unchecked[10]
    checked = drops(t(*base, edit, train, idle("train"), bench, ev()), "violate_instruction")
    assert checked == {}


def test_an_own_script_named_like_a_provided_one_by_prefix_by_its_line_or_by_what_it_writes():
    decon = created("scripts/decon.py", "import json, sys\nout = open(sys.argv[2], 'w')\n")
    scripts = {**SCRIPTS, "scripts/decontaminate.py": "- `scripts/decontaminate.py --input IN --output OUT`: CPU; "
                                                     "removes samples sharing a 13-gram with dev.",
               "scripts/run_agent.py": "- `scripts/run_agent.py --split dev|test [--output OUT]`: runs the scaffold and "
                                       "writes predictions (default `outputs/<split>_predictions.jsonl`)."}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tt = lambda *steps: traj(*steps, desc=DESC, facts=facts)  # noqa: E731
    assert "own version of the provided scripts/decontaminate.py" in drops(tt(decon), "ignore_script")[0]
    acc = created("scripts/dev_acc.py", VLLM_BATCH)  # "bench.py: dev accuracy with vLLM"
    assert "scripts/bench.py" in drops(tt(acc), "ignore_script")[0]
    runner = created("scripts/go.py", "import json\nwith open('outputs/test_predictions.jsonl', 'w') as fh:\n    pass\n")
    assert "scripts/run_agent.py" in drops(tt(runner), "ignore_script")[0]
    fixer = created("scripts/go.py", "import json\nrows = list(open('outputs/test_predictions.jsonl'))\n"
                                     "with open('outputs/test_predictions.jsonl', 'w') as fh:\n    pass\n")
    assert drops(tt(fixer), "ignore_script") == {}  # rewrites the provided script's output in place: not a copy of it
    notes = created("scripts/dev_split_stats.py", "print(1)\n")  # a word of its name is in no provided line
    assert drops(tt(notes), "ignore_script") == {}


def test_a_provided_multi_gpu_script_run_as_one_process_is_waste_whatever_its_name():
    scripts = {**SCRIPTS,
               "scripts/score_pairs.py": "- `scripts/score_pairs.py --input IN --output OUT [--batch_size 32]`: reward-model "
                                         "scores (batched, `accelerate launch --num_processes 8`).",
               "scripts/backtranslate.py": "- `scripts/backtranslate.py --input IN --output OUT [--tensor_parallel_size 1] "
                                           "[--data_parallel 8]`: vLLM back-translation; with `--data_parallel 8` it starts "
                                           "one vLLM engine per GPU."}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tt = lambda *steps: traj(*steps, desc=DESC, facts=facts)  # noqa: E731
    plain = bg("python scripts/score_pairs.py --input a --output outputs/s.jsonl", "sc")
    assert "on 1 GPU(s) while 8" in drops(tt(plain), "resource_waste")[0]
    launched = bg("accelerate launch --num_processes 8 scripts/score_pairs.py --input a --output outputs/s.jsonl", "sc")
    assert drops(tt(launched), "resource_waste") == {}
    one = bg("python scripts/backtranslate.py --input a --output outputs/bt.jsonl", "bt")
    assert "on 1 GPU(s)" in drops(tt(one), "resource_waste")[0]
    dp = bg("python scripts/backtranslate.py --input a --output outputs/bt.jsonl --data_parallel 8", "bt")
    assert drops(tt(dp), "resource_waste") == {}


# ------------------------------------- session 40, second round (the dev split of blind_research2)
def test_usage_lines_as_tasks_write_them_tables_dashes_and_usage_parentheses():
    from apollo.supervision.facts import CPU_DOC_RE, signature

    table = ("| `scripts/split_docs.py` | `python scripts/split_docs.py --src data/reports --out FILE [--passage_tokens 512]` "
             "| CPU: cuts reports into passages |")
    dash = "- `scripts/inject_bugs.py` — CPU. `python scripts/inject_bugs.py --programs DIR --out FILE [--per_program 4]` applies"
    paren = "- `scripts/ppl_tag.py` (usage: `torchrun --nproc_per_node 8 scripts/ppl_tag.py --in DIR --out DIR`) adds `ppl`"
    assert [f for f, _ in signature(table).flags] == ["--src", "--out", "--passage_tokens"]
    assert [f for f, _ in signature(dash).flags] == ["--programs", "--out", "--per_program"]
    assert [f for f, _ in signature(paren).flags] == ["--in", "--out"]
    assert CPU_DOC_RE.search(table) and CPU_DOC_RE.search(dash) and not CPU_DOC_RE.search(paren)
    assert not CPU_DOC_RE.search("- `scripts/train.sh DATA OUT`: ZeRO-3 with CPU offload, `torchrun --nproc_per_node 8`.")


# ------------------------------------- session 46 (the dev split of blind_research5: task_147's usage block)
def test_a_usage_block_without_backticks_and_its_comment_lines():
    from apollo.supervision.facts import signature

    block = ("python scripts/sample_solutions.py --problems data/p.jsonl --n_per 8 --out FILE [--dp 8] "
             "# samples solutions with the policy (vLLM, batched)")
    assert signature(block).flags == (("--problems", "data/p.jsonl"), ("--n_per", "8"), ("--out", "FILE"), ("--dp", "8"))
    assert signature("bash scripts/train_prm.sh DATA OUT # trains the PRM on 8 GPUs").positional == ("DATA", "OUT")
    assert signature("CUDA_VISIBLE_DEVICES=0 torchrun --nproc_per_node 8 scripts/t.py --cfg C").flags == (("--cfg", "C"),)
    # prose that names a script shows no usage; nor does "path (python path …): what it does"
    assert signature("Run scripts/score.py to score the predictions.") is None
    assert signature("scripts/chart_dev.py (python scripts/chart_dev.py --ckpt DIR): accuracy") is None
    assert signature("scripts/train.py --data FILE: prints the accuracy") is None  # no launcher: prose, not a usage line
    facts = FACTS.model_copy(update={"scripts": {"scripts/sample.py": block.replace("sample_solutions", "sample"),
                                                 "scripts/split.py": "python scripts/split.py --in F --out F # steps (CPU)"}})
    sample = bg("python scripts/sample.py --problems data/p.jsonl --n_per 8 --out outputs/s.jsonl", "gen")
    assert drops(traj(sample, desc=DESC, facts=facts), "resource_waste") == {}  # --dp 8 by default: every GPU
    one = bg("python scripts/sample.py --problems data/p.jsonl --n_per 8 --out outputs/s.jsonl --dp 1", "gen")
    assert "on 1 GPU(s)" in drops(traj(one, desc=DESC, facts=facts), "resource_waste")[0]
    split = bg("python scripts/split.py --in outputs/s.jsonl --out outputs/t.jsonl", "split")
    assert drops(traj(split, desc=DESC, facts=facts), "resource_waste") == {}  # a CPU tool


def test_gpu_counts_a_script_line_states_replicas_tensor_parallel_and_per_gpu():
    scripts = {**SCRIPTS,
               "scripts/repair_dev.py": "- `scripts/repair_dev.py` — dev check. `python scripts/repair_dev.py --ckpt DIR "
                                        "[--replicas 8]` repairs the dev bugs (one vLLM replica per GPU).",
               "scripts/shop_dev.py": "- `scripts/shop_dev.py` runs a checkpoint on the dev tasks (it starts its own vLLM "
                                      "server at tensor parallel 4). Usage: `python scripts/shop_dev.py --ckpt DIR`."}
    facts = FACTS.model_copy(update={"scripts": scripts, "compute_pool": [Machine(kind="gpu", gpus=4)]})
    tt = lambda *steps: traj(*steps, desc=DESC, facts=facts)  # noqa: E731
    for cmd in ("python scripts/repair_dev.py --ckpt outputs/c --replicas 4", "python scripts/repair_dev.py --ckpt outputs/c",
                "python scripts/shop_dev.py --ckpt outputs/c"):
        assert drops(tt(bg(cmd, "dev")), "resource_waste") == {}, cmd  # all 4 GPUs, by the flag or the line
    assert "on 1 GPU(s)" in drops(tt(bg("python scripts/repair_dev.py --ckpt outputs/c --replicas 1", "d")),
                                  "resource_waste")[0]


def test_a_dev_run_writes_its_default_output_and_does_not_hold_the_eval_of_the_test_output():
    from apollo.supervision.facts import _default_outputs

    line = ("- `scripts/run_qa.py` — `python scripts/run_qa.py --split dev|test [--out FILE]` writes predictions "
            "(default `outputs/<split>_pred.jsonl`).")
    assert _default_outputs(line, {"--split": "dev"}) == ["outputs/dev_pred.jsonl"]
    assert _default_outputs(line, {}) == []  # a placeholder without a value: unknown
    desc = DESC.replace("The evaluation scores `outputs/ckpt/final/`", "The evaluation reads `outputs/test_pred.jsonl`")
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/run_qa.py": line}})
    tt = lambda *steps: traj(*steps, desc=desc, facts=facts)  # noqa: E731
    assert drops(tt(bg("python scripts/run_qa.py --split dev", "dev"), ev()), "improper_eval") == {}
    assert list(drops(tt(bg("python scripts/run_qa.py --split test", "te"), ev()), "improper_eval")) == [1]


def test_a_new_job_that_names_the_output_is_no_evidence_the_old_one_finished():
    first = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train")
    again = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train2")
    oom = st("get_session_output", {"session_id": "train2"}, "$ bash scripts/train.sh outputs/sft.jsonl outputs/ckpt\n"
             "torch.OutOfMemoryError: CUDA out of memory.\n[session 'train2': finished, exit code 1]")
    sleep = st("sleep", {"seconds": 1800}, "Slept 1800 s.")
    d = drops(t(first, again, oom, sleep), "resource_waste")
    assert list(d) == [1]  # the duplicate; the sleep waits for the first run, which still runs


def test_hf_generation_one_at_a_time_is_waste_on_a_gpu_task_without_vllm_but_not_on_a_cpu_box():
    no_vllm = DESC.replace("vLLM 0.6.3 is installed.", "vLLM is not available.")
    assert list(drops(traj(created("scripts/tag.py", HF_LOOP), desc=no_vllm, facts=FACTS), "inefficient_inference")) == [0]
    cpu = FACTS.model_copy(update={"compute_pool": [Machine(kind="localhost_cpu", cpus=8)]})
    assert drops(traj(created("scripts/tag.py", HF_LOOP), desc=no_vllm, facts=cpu), "inefficient_inference") == {}
    fixed_slice = HF_LOOP.replace('json.loads(line)["q"]', 'json.loads(line)["messages"][:2]')
    assert list(drops(t(created("scripts/tag.py", fixed_slice)), "inefficient_inference")) == [0]  # [:2] is no batch


def test_a_provided_scripts_inner_trainer_is_not_the_agents_own_and_own_versions_by_every_name_word():
    scripts = {**SCRIPTS, "scripts/distill.sh": "- Training: `bash scripts/distill.sh CONFIG OUT` — runs "
                                                "`scripts/kd_train.py` with `torchrun --nproc_per_node 8`.",
               "scripts/run_tests.py": "- `scripts/run_tests.py` — CPU. `python scripts/run_tests.py --in FILE --out FILE`."}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tt = lambda *steps: traj(*steps, desc=DESC, facts=facts)  # noqa: E731
    inner = bg("torchrun --nproc_per_node 4 scripts/kd_train.py --config c.yaml --output_dir outputs/ckpt", "train")
    assert drops(tt(inner), "ignore_script") == {}
    assert "on 4 GPU(s) while 8" in drops(tt(inner), "resource_waste")[0]
    own = created("scripts/fast_tests.py", "import json, sys\nfrom multiprocessing import Pool\n")
    assert "scripts/run_tests.py" in drops(tt(own), "ignore_script")[0]  # fast_ is a qualifier, tests the function


def test_the_change_a_still_running_job_makes_is_judged_at_the_eval_that_measures_it():
    train = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train")
    select = bg("python scripts/select.py --in outputs/tagged --out outputs/sel.jsonl --sort ppl", "sel")
    retrain = bg("bash scripts/train.sh outputs/sel.jsonl outputs/ckpt", "train")  # new data, same shape
    steps = [train, idle("train"), ev(), select, ev(), idle("sel"), retrain, idle("train"), ev()]
    d = drops(t(*steps, evals=[EvalRecord(step=2, score=44.0), EvalRecord(step=4, score=44.0),
                               EvalRecord(step=8, score=36.5)]), "performance_regression")
    assert list(d) == [3] and "did not measure it" in d[3]


def test_more_directive_forms_or_lower_at_n_or_fewer_blocks_and_word_values():
    kinds = lambda text: [(d.kind, d.target, d.values.get("op"), d.values.get("v")) for d in extract(text)]  # noqa: E731
    assert kinds("Keep the generation temperature at 0.7 or lower.") == [("bound", "temperature", "le", "0.7")]
    assert kinds("Keep the synthetic pairs at 100,000 or fewer.") == [("count", "pairs", "le", "100,000")]
    assert kinds("Don't change the optim block in configs/distill.yaml.") == [("no_touch_block", "configs/distill.yaml", None, None)]
    assert kinds("Use --min_q as a threshold and keep the crawl order.") == []
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    temp = g(run("python scripts/rewrite.py --input a --output outputs/r.jsonl --model m --temperature 0.9"),
             "Keep the generation temperature at 0.7 or lower.")
    assert "past the bound of 0.7" in drops(t(temp), "violate_instruction")[0]
    shown = st("open_file", {"path": "configs/distill.yaml"},
               "[configs/distill.yaml: lines 1-6 of 6]\n1: model: m\n2: max_len: 2048\n3: optim:\n4:   lr: 2.0e-5\n"
               "5:   warmup_steps: 100\n6: kd_weight: 0.5")
    in_block = st("edit_file", {"path": "configs/distill.yaml", "start_line": 4, "end_line": 4, "content": "  lr: 4.0e-5"}, "Edited")
    outside = st("edit_file", {"path": "configs/distill.yaml", "start_line": 6, "end_line": 6, "content": "kd_weight: 0.7"},
                 "Edited")
    d = drops(t(g(shown, "Don't change the optim block in configs/distill.yaml."), outside, in_block), "violate_instruction")
    assert list(d) == [2] and "optim block" in d[2]


# ------------------------------------- session 41, third round (the dev split of blind_research3)
def test_own_versions_by_a_word_only_one_provided_line_uses_or_by_the_options_it_reimplements():
    scripts = {**SCRIPTS,
               "scripts/beir_dev.py": "- `scripts/beir_dev.py --ckpt DIR` — run with `torchrun --nproc_per_node 8`; "
                                      "nDCG@10 and recall@100 of a checkpoint on the three dev collections.",
               "clean/select_pairs.py": "- `clean/select_pairs.py` applies thresholds and writes the selected pairs (CPU). "
                                        "Use: `python clean/select_pairs.py --in FILE --out FILE [--min_labse S] "
                                        "[--max_len_ratio R] [--drop_copies] [--dedup] [--max_per_url K]`.",
               "clean/labse_score.py": "- `clean/labse_score.py` adds a `labse` column. Use: `torchrun --nproc_per_node 8 "
                                       "clean/labse_score.py --in FILE --out FILE [--batch 1024]`."}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tt = lambda *steps: traj(*steps, desc=DESC, facts=facts)  # noqa: E731
    ndcg = created("ndcg_quick.py", "import sys, torch\nckpt = sys.argv[1]\n# mean nDCG@10 over the dev sets\n")
    assert "scripts/beir_dev.py" in drops(tt(ndcg), "ignore_script")[0]
    tidy = created("tidy_pairs.py", "import sys\n# LaBSE threshold + length ratio + copy removal + exact dedup\n"
                                    "for line in open(sys.argv[1]):\n    s, t, url, sim = line.split('\\t')\n")
    d = drops(tt(tidy, run("python tidy_pairs.py outputs/scored.tsv outputs/clean.tsv 0.7", "done")), "ignore_script")
    assert "clean/select_pairs.py" in d[0] and "runs its own tidy_pairs.py" in d[1]
    # a helper for a step no provided script covers, sharing one word of one line: no own version
    merge = created("merge_parts.py", "import sys\n# concatenate the labse-scored parts\nfor p in sys.argv[1:]:\n    pass\n")
    assert drops(tt(merge), "ignore_script") == {}


def test_directives_keep_a_flag_count_a_qualified_file_and_a_folder_left_alone():
    kinds = lambda text: [(d.kind, d.target, d.values.get("v"), d.values.get("in_path")) for d in extract(text)]  # noqa: E731
    assert kinds("Keep --max_steps at 30 for every run, dev and test.") == [("keep", "max_steps", "30", None)]
    assert kinds("Keep at least 500k en-is pairs in the final data.") == [("count", "pairs", "500k", "en-is")]
    assert kinds("Don't edit anything under clean/.") == [("forbid_write", "clean/", None, None)]
    from apollo.supervision.instructions import _reported_count

    line = "$ python clean/select_pairs.py ...\nselected 380112/1032877 pairs -> outputs/clean/en-is.tsv"
    assert _reported_count(line, "outputs/clean/en-is.tsv", "pairs") == 380112  # N of M kept: N
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    steps = lambda cmd: [g(run("ls"), "Keep --max_steps at 30 for every run, dev and test."), bg(cmd, "r")]  # noqa: E731
    assert "not 30" in drops(t(*steps("python scripts/bench.py --model m --max_steps 40")), "violate_instruction")[1]
    assert drops(t(*steps("python scripts/bench.py --model m --max_steps 30")), "violate_instruction") == {}
    # folder: an edit under it breaks the directive; putting back the line one's own edit replaced does not
    shown = st("open_file", {"path": "clean/select_pairs.py"},
               "[clean/select_pairs.py: lines 1-3 of 3]\n1: import sys\n2: key = (s.lower(), t.lower())\n3: print(key)")
    mine = st("edit_file", {"path": "clean/select_pairs.py", "start_line": 2, "end_line": 2, "content": "key = (s, t)"},
              "Edited clean/select_pairs.py lines 2-2.")
    back = st("edit_file", {"path": "clean/select_pairs.py", "start_line": 2, "end_line": 2,
                            "content": "key = (s.lower(), t.lower())"}, "Edited clean/select_pairs.py lines 2-2.")
    d = drops(t(g(shown, "Don't edit anything under clean/."), mine, back), "violate_instruction")
    assert list(d) == [1] and "clean/" in d[1]


# ------------------------------------- session 42, fourth round: the generic (subject, relation, value) layer
def test_generic_constraints_read_subject_relation_and_value_whatever_the_sentence_shape():
    from apollo.supervision.instructions import generic_constraints

    def read(text):
        return [(d.kind, d.target, d.values.get("op"), d.values.get("v"), d.values.get("pct")) for d in generic_constraints(text)]

    # a flag in parentheses after a bound phrased in words: the bound, not an equality
    assert read("Limit the shards per host to at most 6 (--max_shards 6).") == [("bound", "max_shards", "le", "6", None)]
    # a range on a topic, a postfix relation, a percent, a negated bound, a value before "for KEY"
    assert read("Keep the temperature between 0.2 and 0.5.") == [
        ("bound", "temperature", "ge", "0.2", None), ("bound", "temperature", "le", "0.5", None)]
    assert read("Use --workers 12 at most with pack.py.") == [("bound", "workers", "le", "12", None)]
    assert read("Keep synthetic rows at 30% or less of the mix (--synth_frac 0.3 or lower).") == [
        ("bound", "synth_frac", "le", "30", "1"), ("bound", "synth_frac", "le", "0.3", None)]
    assert read("Never set MAX_TURNS above 6.") == [("bound", "MAX_TURNS", "le", "6", None)]
    assert read("Do not go below 0.5 for min_conf.") == [("bound", "min_conf", "ge", "0.5", None)]
    assert read("Keep alpha at 0.25 from now on.") == [("keep", "(?:^|_)alpha(?:_|$)", None, "0.25", None)]
    # information, not a directive (no cue); a count in other units is the grammar's, not a key's value
    assert read("The default max_shards is 8.") == []
    assert read("Keep the final set at 50,000 examples or fewer.") == []


def test_generic_bounds_are_checked_on_flags_and_files_and_a_satisfying_action_is_kept():
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    say = "Keep synthetic rows at 30% or less of the mix (--synth_frac 0.3 or lower)."
    over = drops(t(g(run("ls"), say), run("python scripts/mix.py --synth_frac 0.45 --out outputs/mix.jsonl", "ok")),
                 "violate_instruction")
    assert list(over) == [1] and "0.45" in over[1]
    assert drops(t(g(run("ls"), say), run("python scripts/mix.py --synth_frac 0.3 --out outputs/mix.jsonl", "ok")),
                 "violate_instruction") == {}
    rng = "Keep the temperature between 0.2 and 0.5."
    hot = st("edit_file", {"path": "configs/gen.yaml", "start_line": 3, "end_line": 3, "content": "temperature: 0.9"}, "Edited")
    ok = st("edit_file", {"path": "configs/gen.yaml", "start_line": 3, "end_line": 3, "content": "temperature: 0.4"}, "Edited")
    assert list(drops(t(g(run("ls"), rng), hot), "violate_instruction")) == [1]
    assert drops(t(g(run("ls"), rng), ok), "violate_instruction") == {}


def test_eval_preconditions_and_metric_conditions_from_the_humans_words():
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    edit = st("edit_file", {"path": "configs/train.yaml", "start_line": 2, "end_line": 2, "content": "lr: 1.0e-5"}, "Edited")
    say = "Run scripts/bench.py on every new checkpoint before you spend an eval on it."
    unchecked = drops(t(g(run("ls"), say), edit, st("eval", {}, "Evaluation 1/3: overall_score=40")), "violate_instruction")
    assert list(unchecked) == [2] and "scripts/bench.py" in unchecked[2]
    checked = t(g(run("ls"), say), edit, run("python scripts/bench.py --model outputs/ckpt", "dev accuracy 0.61"),
                st("eval", {}, "Evaluation 1/3: overall_score=40"))
    assert drops(checked, "violate_instruction") == {}  # (and the run of bench.py is not an omission of it)
    cond = "Only spend an eval if dev accuracy is above 60%."
    low = t(g(run("ls"), cond), run("python scripts/bench.py --model m", "dev accuracy 0.55"), st("eval", {}, "Evaluation 1/3"))
    high = t(g(run("ls"), cond), run("python scripts/bench.py --model m", "dev accuracy 0.64"), st("eval", {}, "Evaluation 1/3"))
    assert list(drops(low, "violate_instruction")) == [2]
    assert drops(high, "violate_instruction") == {}


def test_an_own_scorer_is_found_by_the_metrics_it_prints_and_a_batched_turn_loop_is_not_one_at_a_time():
    from apollo.supervision.detectors import one_at_a_time

    scorer = created("check_dev.py", "import json, sys\npred = [json.loads(l) for l in open(sys.argv[1])]\n"
                                     "acc = sum(p['answer'] == p['gold'] for p in pred) / len(pred)\nprint(f'accuracy {acc:.3f}')\n")
    d = drops(t(scorer, run("python check_dev.py outputs/dev_pred.jsonl", "accuracy 0.612")), "ignore_script")
    assert "scripts/bench.py" in d[0] and 1 in d  # bench.py's line: "dev accuracy with vLLM"
    # a script that prints no metric the provided lines name is a helper, not a scorer done again
    stats = created("count_rows.py", "import sys\nprint('rows', sum(1 for _ in open(sys.argv[1])))\n")
    assert drops(t(stats), "ignore_script") == {}
    turns = ("from vllm import LLM\nllm = LLM('m')\nlive = list(range(50))\nfor _ in range(10):\n"
             "    prompts = [msgs[i] for i in live]\n    outs = llm.generate(prompts)\n")
    single = "from vllm import LLM\nllm = LLM('m')\nfor p in prompts:\n    out = llm.generate([p])\n"
    assert one_at_a_time(turns) is None and one_at_a_time(single) is not None


def test_a_job_waited_out_or_read_after_a_wait_has_ended_and_a_launch_line_with_tp_and_dp_uses_their_product():
    from apollo.supervision.detectors import gpus_used

    sleep = lambda s: st("sleep", {"seconds": s}, f"Slept {s} s.")  # noqa: E731
    train = bg("bash scripts/train.sh outputs/train.jsonl outputs/ckpt", "train")
    # an eval after sleeping out the job (nothing said "running" since): kept; seconds after the launch: improper
    assert drops(t(train, sleep(1500), ev()), "improper_eval") == {}
    assert "not seen finished" in drops(t(train, sleep(30), ev()), "improper_eval")[2]
    running = st("check_session_idle", {"session_id": "train"}, "Session 'train' is still running.")
    assert 3 in drops(t(train, sleep(1500), running, ev()), "improper_eval")
    launch = bg("python scripts/rewrite.py --input data/a.jsonl --output outputs/train.jsonl --model m "
                "--tensor_parallel_size 8", "gen")
    # a command that reads the job's output after a wait treats it as ended: a long sleep after that is idle
    read = run("python scripts/verify_answers.py --input outputs/train.jsonl --output outputs/v.jsonl", "kept 9/10")
    assert 3 in drops(t(launch, sleep(900), read, sleep(1800)), "resource_waste")
    # ... but a look at its log is watching it, not a sign it ended
    tail = run("tail -n 3 outputs/gen.log", "step 10")
    assert drops(t(launch, sleep(900), tail, sleep(1800)), "resource_waste") == {}
    assert gpus_used("python gen.py --tp 4 --dp 2") == 8 and gpus_used("python gen.py --tp 4") == 4


def test_an_own_script_under_outputs_is_an_own_version_and_after_use_s_it_breaks_the_directive():
    mine = created("outputs/answer_check.py", "import json, sys\n# keep samples whose final number matches\n"
                                          "for l in open(sys.argv[1]):\n    r = json.loads(l)\n")
    ran = run("python outputs/answer_check.py outputs/raw.jsonl outputs/ok.jsonl", "kept 90/100")
    d = drops(t(mine, ran), "ignore_script")
    assert "scripts/verify_answers.py" in d[0] and 1 in d
    told = st("list_files", {"path": "."}, guidance=("Use scripts/verify_answers.py for the answer check.",))
    vi = drops(t(told, mine, ran), "violate_instruction")
    assert "its own version of scripts/verify_answers.py" in vi[1] and 2 in vi
    assert drops(t(told, mine, ran), "ignore_script") == {}  # one fault, named once: the directive's


def test_own_versions_is_the_one_walk_both_detectors_read_and_same_script_matches_relative_paths():
    from apollo.supervision.detectors import own_versions, same_script
    from apollo.supervision.facts import Facts

    assert same_script("scripts/verify_answers.py", "verify_answers.py") and same_script("a/b.py", "a/b.py")
    assert not same_script("scripts/verify_answers.py", "answers.py") and not same_script("x/a.py", "y/a.py")
    mine = created("outputs/answer_check.py", "import json, sys\n# keep samples whose final number matches\n"
                                              "for l in open(sys.argv[1]):\n    r = json.loads(l)\n")
    other = created("notes.md", "plan: run the checker")
    tr = t(mine, other, run("python outputs/answer_check.py outputs/raw.jsonl outputs/ok.jsonl", "kept 90/100"),
           run("python outputs/answer_check.py a b", "Refused: the sandbox is read-only here.", refused=True))
    f = Facts(tr, Masker(MaskConfig()).task_info(tr))
    got = own_versions(f)
    # the write and the run; not the unrelated file, not the refused run (the tool did not run)
    assert got == {0: ("outputs/answer_check.py", "scripts/verify_answers.py"),
                   2: ("outputs/answer_check.py", "scripts/verify_answers.py")}
    assert own_versions(f) is got  # computed once per facts


def test_more_directive_shapes_a_count_in_any_unit_a_file_left_exactly_as_it_is_and_a_block_with_a_colon():
    def kinds(text):
        return [(d.kind, d.target, d.values.get("op"), d.values.get("v")) for d in extract(text)]

    assert ("count", "dialogues", "le", "30k") in kinds("Keep the SFT set at or below 30k dialogues, please.")
    assert kinds("Leave configs/sft.yaml exactly as it is.") == [("forbid_write", "configs/sft.yaml", None, None)]
    assert kinds("Don't touch the train: block of configs/rm.yaml.")[0][:2] == ("no_touch_block", "configs/rm.yaml")
    assert ("keep", "temperature", None, "1.0") in kinds("And the loss temperature stays at 1.0.")
    from apollo.supervision.instructions import _reported_count

    assert _reported_count("$ python dedup.py --out o.jsonl\nkept 30912/31877\n", "outputs/o.jsonl") == 30912


# ------------------------------------------------- round 5: references a reader resolves, eval budgets
def test_a_pronoun_a_noun_a_script_stem_an_eval_budget_and_a_count_with_max_after_it():
    def kinds(text):
        return [(d.kind, d.target, d.values.get("v") or d.values.get("n")) for d in extract(text)]

    assert ("forbid_write", "agent/prompts.py", None) in kinds(
        "Heads up: agent/prompts.py is shared with another experiment. Do not edit it; leave it as it is.")
    assert [k[:2] for k in kinds("good. Don't touch the loss or the config any more.")] == [
        ("forbid_noun", "loss"), ("forbid_noun", "config")]
    assert kinds("Don't touch the batch size.")[0][0] == "no_touch"  # a hyperparameter topic, not a file noun
    assert all(k[0] != "forbid_noun" for k in kinds("Don't change the learning rate or the weight decay."))
    assert ("script_value", "needle_dev", "32k") in kinds("needle_dev at 32k only from now on please")
    assert ("eval_budget", "", "1") in kinds("Nice. You get ONE more eval after this, make it count.")
    assert ("count", "pairs", "100k") in kinds("For this round train on 100k pairs max.")
    assert kinds("Keep the anchor weight at or below 0.05.")[0][0] == "bound"
    assert kinds("The loss looks fine and the config parses.") == []  # information, not a directive
    # one verb list for every form: alter/tweak reach paths and folders, delete/replace reach pronouns and nouns
    assert ("forbid_write", "configs/base.yaml", None) in kinds("Please do not alter configs/base.yaml.")
    assert ("forbid_write", "data/raw.jsonl", None) in kinds("Heads up: data/raw.jsonl is the only copy. Do not delete it, ever.")
    assert [k[:2] for k in kinds("good. Don't replace the loss or the config any more.")] == [
        ("forbid_noun", "loss"), ("forbid_noun", "config")]

    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    shown = st("open_file", {"path": "configs/distill.yaml"}, "[configs/distill.yaml: lines 1-2 of 2]\n1: kind: kl\n2: lr: 1e-5")
    cfg = st("edit_file", {"path": "configs/distill.yaml", "start_line": 1, "end_line": 1, "content": "kind: tv"}, "Edited")
    out = st("create_file", {"path": "outputs/notes.md", "content": "config tried: tv"}, "Created outputs/notes.md (16 characters).")
    d = drops(t(g(shown, "Don't touch the loss or the config any more."), out, cfg), "violate_instruction")
    assert list(d) == [2] and "the config" in d[2]  # an output named like it is not the config
    dev = lambda n: run(f"python scripts/needle_dev.py --ckpt outputs/ckpt --len {n}")  # noqa: E731
    d = drops(t(g(dev(32768), "needle_dev at 32k only from now on please"), dev(32000), dev(64000)), "violate_instruction")
    assert list(d) == [2] and "64000" in d[2]
    e = lambda: st("eval", {}, "score 61.0")  # noqa: E731
    d = drops(t(e(), g(run("python scripts/bench.py --model m"), "You get ONE more eval after this, make it count."), e(), e()),
              "violate_instruction")
    assert list(d) == [3]  # the one eval it had, then a second one
    # the anchor weight: its keys whatever their spelling; a value within the bound is kept
    rm = lambda v: st("edit_file", {"path": "configs/rm.yaml", "start_line": 3, "end_line": 3,  # noqa: E731
                                    "content": f"  anchor_weight: {v}"}, "Edited")
    d = drops(t(g(rm(0.05), "Keep the anchor weight at or below 0.05."), rm(0.2)), "violate_instruction")
    assert list(d) == [1]


def test_a_count_written_before_the_directive_breaks_it_at_the_training_run_on_that_data():
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    gen = bg("python scripts/rewrite.py --input a --output outputs/sft.jsonl --model m", "gen")
    read = st("get_session_output", {"session_id": "gen"},
              "$ python scripts/rewrite.py --input a --output outputs/sft.jsonl\nwrote 131842 pairs\n[session 'gen': finished, exit code 0]")
    train = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train")
    d = drops(t(gen, g(read, "For this round train on 100k pairs max."), train), "violate_instruction")
    assert list(d) == [2] and "131,842 pairs" in d[2]
    small = st("get_session_output", {"session_id": "gen"}, "$ python scripts/rewrite.py\nwrote 90000 pairs\n[session 'gen': finished, exit code 0]")
    assert drops(t(gen, g(small, "For this round train on 100k pairs max."), train), "violate_instruction") == {}


def test_a_read_task_module_rewritten_in_full_is_an_edit_and_an_eval_after_a_missing_output_is_not_wasted():
    shown = st("open_file", {"path": "src/train_loss.py"}, "[src/train_loss.py: lines 1-3 of 3]\n1: def loss(x):\n2:     return x\n3: ")
    code = "import torch\n\ndef loss(logits, labels):\n    return torch.nn.functional.cross_entropy(logits, labels)\n"
    full = st("create_file", {"path": "src/train_loss.py", "content": code}, f"Overwrote src/train_loss.py ({len(code)} characters).")
    assert drops(t(shown, full), "ignore_script") == {}
    unread = st("create_file", {"path": "outputs/my_train.py", "content": "import torch\n# my own trainer\n" + code},
                "Created outputs/my_train.py (120 characters).")
    assert drops(t(shown, full, unread), "ignore_script").keys() <= {2}  # (judged by what it does, not by this rule)
    early = st("eval", {}, "Evaluation 1/3: outputs/ckpt/final/ not found: overall_score=0")
    train = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train")
    done = idle("train")
    later = ev("Evaluation 2/3: overall_score=58")
    d = drops(t(train, done, early, later), "improper_eval")
    assert 3 not in d  # the output exists now: not "nothing changed since the eval"


def test_round_6_key_value_sides_stays_a_total_a_flag_without_value_a_stem_and_a_first_run_scope():
    def kinds(text):
        return [(d.kind, d.target, d.values.get("op"), d.values.get("v")) for d in extract(text)]

    assert ("bound", "k", "ge", "8") in kinds("Use k=8 completions per step, not fewer.")
    assert ("bound", "n", "le", "4") in kinds("use n=4 or less")
    assert ("keep", "visible_weight", None, "0") in kinds("visible_weight stays 0")
    assert ("count", "", "le", "40k") in kinds("you can add neutral now but keep the total at 40k max, not 50k")
    assert ("flag_on", "--balance", None, None) in kinds("for the selection: use --balance")
    assert all(k[0] != "forbid_noun" for k in kinds("dont change max_len or the batch"))  # max_len is a key, not a noun

    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    mc = lambda k: run(f"python scripts/rewrite.py --input a --output outputs/r.jsonl --model m --k {k}")  # noqa: E731
    d = drops(t(g(mc(8), "Use k=8 completions per step, not fewer."), mc(16), mc(4)), "violate_instruction")
    assert list(d) == [2]
    sel = lambda extra: run(f"python scripts/verify_answers.py --input a --output outputs/v.jsonl{extra}")  # noqa: E731
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/verify_answers.py": SCRIPTS["scripts/verify_answers.py"]
                                                 + " [--balance]"}})
    tr = traj(g(sel(" --balance"), "for the selection: use --balance"), sel(""), desc=DESC, facts=facts)
    assert list(drops(tr, "violate_instruction")) == [1]
    # a tuple assignment gives each name its own value: MAX_CMDS is 20, as told
    code = "MAX_CALLS, MAX_CMDS = 12, 20\n"
    agent = g(st("create_file", {"path": "agent/loop.py", "content": code}, "Created agent/loop.py (29 characters)."),
              "keep MAX_CALLS=12 and MAX_CMDS=20 exactly as the constraint says")
    assert drops(t(agent), "violate_instruction") == {}
    # "for the first run": the value holds until that run is launched
    cfg = lambda v: st("edit_file", {"path": "configs/train.yaml", "start_line": 9, "end_line": 9,  # noqa: E731
                                     "content": f"  alpha: {v}"}, "Edited")
    trn = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train")
    assert drops(t(g(cfg(0.3), "use alpha=0.3 for the first run."), trn, cfg(0.45)), "violate_instruction") == {}
    assert list(drops(t(g(cfg(0.3), "use alpha=0.3 for every run."), trn, cfg(0.45)), "violate_instruction")) == [2]


def test_round_8_usage_layouts_stated_durations_short_checks_and_directive_shapes():
    """Round 8 (tuned on blind_research7's dev split): usage lines after a label (``Run:``, a ``--help``
    output), the rest of a script's paragraph, job durations the task states, scripts that run on one GPU or
    for a few minutes, and more directive shapes."""
    from apollo.env.tasks import provided_scripts
    from apollo.supervision.facts import job_duration, signature

    # a usage after "Run:" and an argparse --help usage followed by prose
    sig = signature("Script: scripts/rw.py Run:    python scripts/rw.py --in FILE --out FILE [--gpus 8 --bs 32 --limit N]")
    assert sig is not None and ("--gpus", "8") in sig.flags and ("--limit", "N") in sig.flags
    sig = signature("$ python scripts/dev.py --help usage: scripts/dev.py [-h] --ckpt CKPT [--tp TP] [--dp DP] pass@1 "
                    "(greedy) on the dev halves. --tp TP tensor parallel size (default 1)")
    assert sig is not None and [f for f, _ in sig.flags] == ["--ckpt", "--tp", "--dp"]
    assert signature("SYNOPSIS bash scripts/sft.sh IDS OUT [NGPU] DESCRIPTION torchrun on NGPU GPUs").positional == \
        ("IDS", "OUT", "NGPU")
    # a script's paragraph: its Does: line and the text under its heading; a numbered item naming no script ends it
    docs = provided_scripts("## Scripts\nScript: scripts/a.py\nRun:    python scripts/a.py --in F\nDoes:   CPU. Filters.\n\n"
                            "scripts/serve.sh\n----------------\n`bash scripts/serve.sh [TP]` starts the server\n"
                            "(tensor parallel 4) and runs until stopped.\n\n"
                            "1. `scripts/b.py` - trains.\n2. `configs/x.yaml` - the config.\n")
    assert "CPU. Filters." in docs["scripts/a.py"] and "runs until stopped" in docs["scripts/serve.sh"]
    assert "----" not in docs["scripts/serve.sh"] and "configs/x.yaml" not in docs["scripts/b.py"]

    # stated durations: "GRPO takes about 90 minutes" names scripts/grpo_mt.sh; "the dev script" names qwk_dev.py
    env = ("## Environment\n8 GPUs. GRPO (300 steps) takes about 90 minutes on 8 GPUs; judging them about 35 minutes; "
           "the dev script about 2 minutes.\n")
    assert job_duration(env, "scripts/grpo_mt.sh") == 5400 and job_duration(env, "scripts/qwk_dev.py") == 120
    assert job_duration(env, "scripts/judge_dialogues.py") == 2100 and job_duration(env, "scripts/mix.py") is None
    desc = DESC.replace("vLLM 0.6.3 is installed.\n", "vLLM 0.6.3 is installed. " + env.split("\n", 1)[1])
    scripts = {**SCRIPTS, "scripts/grpo_mt.sh": "- `bash scripts/grpo_mt.sh OUT 8`: GRPO with verl on 8 GPUs.",
               "scripts/qwk_dev.py": "- `python scripts/qwk_dev.py --ckpt DIR`: QWK on the dev set (GPU).",
               "scripts/head_probe.py": "- `python scripts/head_probe.py --ckpt DIR`: accuracy of each head. Runs on one "
                                        "GPU by design."}
    facts = FACTS.model_copy(update={"scripts": scripts})
    sleep = lambda s: st("sleep", {"seconds": s}, f"Slept {s} s.")  # noqa: E731
    grpo = bg("bash scripts/grpo_mt.sh outputs/ckpt 8", "grpo")
    # 30 minutes into a 90-minute run is not waited out (the 600 s default alone would say it is)
    assert list(drops(traj(grpo, sleep(1800), ev(), desc=desc, facts=facts), "improper_eval")) == [2]
    assert drops(traj(grpo, sleep(1800), sleep(1800), ev(), desc=desc, facts=facts), "improper_eval") == {}
    # a 2-minute dev check and a one-GPU-by-design probe on 1 of 8 GPUs: no waste; a 1-GPU job that says neither is
    assert drops(traj(run("python scripts/qwk_dev.py --ckpt outputs/c"), run("python scripts/head_probe.py --ckpt o"),
                      desc=desc, facts=facts), "resource_waste") == {}
    assert list(drops(traj(run("python scripts/rewrite.py --input a --output o --model m"), desc=desc, facts=facts),
                      "resource_waste")) == [0]

    def kinds(text):
        return [(d.kind, d.target, d.values.get("op"), d.values.get("v")) for d in extract(text)]

    assert ("bound", "min_conf", "ge", "0.5") in kinds("min_conf for the guard: 0.5 or higher. below that we saw drift")
    assert [k[2:] for k in kinds("temp no higher than 0.8 please")] == [("le", "0.8")]
    assert ("forbid_write", "configs/sft.yaml", None, None) in kinds("configs/sft.yaml stays exactly as shipped. yes even so")
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    w = lambda v: st("edit_file", {"path": "configs/grpo.yaml", "start_line": 20, "end_line": 20,  # noqa: E731
                                   "content": f"  w_term: {v}"}, f"Edited configs/grpo.yaml lines 20-20. Now:\n20:   w_term: {v}")
    tr = t(g(st("open_file", {"path": "configs/grpo.yaml"}, "[configs/grpo.yaml: lines 1-30 of 30]"),
             "Term weight must stay at least 0.4 - the customer cares"), w(0.5), w(0.3))
    assert list(drops(tr, "violate_instruction")) == [2]
    # a one-word flag of a provided script, named without its dashes: "keep the default concurrency (24)"
    facts_c = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/plans.py": "- `python scripts/plans.py --out F "
                                                                                  "[--concurrency 24]`: runs the agent."}})
    pl = lambda c: bg(f"python scripts/plans.py --out outputs/p.jsonl --concurrency {c}", "p")  # noqa: E731
    tr = traj(g(st("list_files"), "for the test run keep the default concurrency (24)."), pl(24), pl(48), desc=DESC, facts=facts_c)
    assert list(drops(tr, "violate_instruction")) == [2]


def test_round_8_serial_flags_serial_forward_passes_and_qualified_own_versions():
    """A provided script run with its batch/concurrency flag at 1 (its line shows more); a created script that
    runs the model's forward pass one row at a time; ``strict_leak.py`` is its own ``leak_check.py``."""
    from apollo.supervision.detectors import serial_forward

    scripts = {**SCRIPTS, "scripts/ppl.py": "- `python scripts/ppl.py --in F --out F [--gpus 4 --bs 8]`: perplexity (HF).",
               "scripts/leak_check.py": "- `python scripts/leak_check.py --in F --out F`: CPU; drops dialogues that leak "
                                        "the answer."}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tr = traj(run("python scripts/ppl.py --in a --out outputs/p.tsv --bs 1"), run("python scripts/ppl.py --in a --out b --bs 8"),
              run("python scripts/ppl.py --in a --out c --gpus 1"), desc=DESC, facts=facts)
    assert list(drops(tr, "inefficient_inference")) == [0]  # (--gpus 1 is no batch flag)
    loop = ("import torch\nmodel = load().to('cuda')\nfor r in rows:\n    enc = tok(r['text'], return_tensors='pt').to('cuda')\n"
            "    with torch.no_grad():\n        p = model(**enc)\n")
    assert "one item per loop iteration" in serial_forward(loop)
    batched = loop.replace("for r in rows:\n    enc = tok(r['text'],", "for k in range(0, len(rows), 64):\n    enc = tok([r['text'] "
                                                                    "for r in rows[k:k + 64]], padding=True,")
    assert serial_forward(batched) is None
    assert list(drops(traj(created("tools/err_dump.py", loop), run("python tools/err_dump.py"), desc=DESC, facts=facts),
                      "inefficient_inference")) == [0, 1]
    own = created("scripts/strict_leak.py", "import json, sys\nfor line in open(sys.argv[1]):\n    pass\n")
    assert list(drops(traj(own, run("python scripts/strict_leak.py a b"), desc=DESC, facts=facts), "ignore_script")) == [0, 1]


def test_a_sleep_before_a_job_was_launched_does_not_wait_for_it():
    """A command that reads a job's output counts as the agent taking the job as finished only after a sleep
    since that job's launch: a sleep before a retrain does not make the retrain done (blind_research7 dev)."""
    sleep = st("sleep", {"seconds": 1500}, "Slept 1500 s.")
    train = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train")
    read = run("python scripts/bench.py --model outputs/ckpt/final")
    # slept, then relaunched, then read the old checkpoint: the retrain still runs, so the next sleep waits for it
    assert drops(t(train, sleep, train, read, sleep), "resource_waste") == {}
    # slept after the launch, then read its output: taken as finished, a second long sleep waits for nothing
    assert list(drops(t(train, sleep, read, sleep), "resource_waste")) == [3]


def test_round_9_order_rules_gpu_minimums_comparisons_fixed_lists_and_finish_after():
    """Round 9 (tuned on blind_research8): "do not start X before Y has finished" / "X only after Y has
    finished" (an order between jobs, not a ban), "dont run grpo on fewer than 6 gpus", "dont use flip k>1",
    "optimizer/lr/steps are fixed", "keep margin at 0", "after the 2nd eval just finish", and a flag asked for
    a second script of the same sentence."""
    def kinds(text):
        return [(d.kind, d.target, d.values.get("after") or d.values.get("op"), d.values.get("v")) for d in extract(text)]

    assert kinds("do NOT start training before the judge has finished") == [("order", "training", "judge", None)]
    assert ("order", "scripts/dev.py", "training", None) in kinds("run scripts/dev.py only after training has finished")
    assert not [k for k in kinds("run scripts/dev.py only after training has finished") if k[0] == "use_script"]
    assert kinds("dont use flip k>1, extra flips are near dupes")[0][:4] == ("bound", "k", "le", "1")
    assert {k[1] for k in kinds("also optimizer/lr/steps are fixed - only the loss: section is yours")} >= \
        {"(?:^|[_.])optimizer$", "(?:^|[_.])steps$"}
    assert kinds("after the 2nd eval just finish, no more evals please") == [("finish_after", "", None, None)]

    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    sleep = st("sleep", {"seconds": 1800}, "Slept 1800 s.")
    judge = bg("python scripts/rewrite.py --input a --output outputs/judged.jsonl --model m --tensor_parallel_size 8", "judge")
    train = bg("bash scripts/train.sh outputs/judged.jsonl outputs/ckpt", "train")
    rule = "do NOT start training before the judge has finished"
    # training launched while the judge still runs breaks the order; after the judge is seen idle it does not
    assert list(drops(t(judge, g(sleep, rule), train), "violate_instruction")) == [2]
    assert drops(t(judge, g(sleep, rule), idle("judge"), train), "violate_instruction") == {}
    # the bench only after training has finished: a bench while the trainer runs breaks it, after its end it does not
    bench = run("python scripts/bench.py --model outputs/ckpt/checkpoint-100")
    rule = "train on all 8 GPUs, and run bench only after training has finished"
    assert list(drops(t(g(train, rule), sleep, bench), "violate_instruction")) == [2]
    assert drops(t(g(train, rule), sleep, idle("train"), bench), "violate_instruction") == {}
    # "after the 2nd eval just finish": the 2nd eval is allowed, the work after it is not (once)
    tr = t(ev(), st("list_files"), g(ev("Evaluation 2/3: overall_score=12"), "after the 2nd eval just finish, no more evals"),
           run("cut -f1 outputs/a.tsv > outputs/b.tsv"), run("cut -f2 outputs/a.tsv > outputs/c.tsv"), st("finish"))
    assert list(drops(tr, "violate_instruction")) == [3]
    # a flag asked for the second script of the sentence is that script's
    ver = lambda flags: run(f"python scripts/verify_answers.py --input a --output outputs/v.jsonl{flags}")  # noqa: E731
    rw = run("python scripts/rewrite.py --input a --output outputs/r.jsonl --model m")
    rule = "Use rewrite.py, and run verify_answers with --strict. Not negotiable."
    assert list(drops(t(g(rw, rule), ver(""), ver(" --strict")), "violate_instruction")) == [1]


def test_round_9_what_carries_a_change_out_is_not_the_regression_and_launcher_less_usage_lines():
    """Round 9 (blind_research8): a torchrun retrain on more GPUs, an edit that mends the file the last run
    crashed on, a command that only deletes intermediate checkpoints and a command that goes on from what a
    directive breach wrote are no causes of a lower score; a usage line without a launcher gives the GPU
    argument; "(1 GPU)" is a one-GPU script; a reader that crashed does not show a job finished."""
    from apollo.supervision.facts import signature

    ev_at = lambda *pairs: [EvalRecord(step=s, score=v) for s, v in pairs]  # noqa: E731
    tr4 = bg("torchrun --nproc_per_node 4 scripts/train_v.py --train outputs/sft.jsonl --out outputs/ckpt", "train")
    tr8 = bg("torchrun --nproc_per_node 8 scripts/train_v.py --train outputs/sft.jsonl --out outputs/ckpt", "train")
    cap = run("cat outputs/a.jsonl outputs/b.jsonl | head -n 1000 > outputs/sft.jsonl")
    steps = [tr4, idle("train"), ev(), cap, tr8, idle("train"), ev()]
    assert list(drops(t(*steps, evals=ev_at((2, 60.0), (6, 50.0))), "performance_regression")) == [3]
    crash = run("python scripts/mk.py --out outputs/a.jsonl", "$ python scripts/mk.py\nTraceback (most recent call last):\n"
                "  File \"scripts/mk.py\", line 3\nNameError: name 'ordr' is not defined\n\n[finished, exit code 1]", 1)
    fix = st("edit_file", {"path": "scripts/mk.py", "start_line": 3, "end_line": 3, "content": "order = 1"}, "Edited")
    steps = [tr4, idle("train"), ev(), crash, fix, cap, tr8, idle("train"), ev()]
    assert list(drops(t(*steps, evals=ev_at((2, 60.0), (8, 50.0))), "performance_regression")) == [5]
    rm = run("rm -rf outputs/ckpt/checkpoint-*")
    steps = [tr4, idle("train"), ev(), cap, tr8, idle("train"), rm, st("finish", {}, "Finished.")]
    forced = [EvalRecord(step=2, score=60.0), EvalRecord(step=8, score=50.0, forced=True)]
    assert list(drops(t(*steps, evals=forced), "performance_regression")) == [3]

    assert signature("scripts/train_math.sh      DATA OUT [NGPU] # SFT, default 8 GPUs").positional == ("DATA", "OUT", "NGPU")
    assert signature("scripts/x.py Filters the rows") is None  # prose after the path is no usage
    scripts = {**SCRIPTS, "scripts/tm.sh": "scripts/tm.sh      DATA OUT [NGPU] # SFT of the 7B model, default 8 GPUs",
               "scripts/fdev.py": "| `scripts/fdev.py` | `python scripts/fdev.py --ckpt DIR` | dev score (1 GPU) |"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tr = traj(bg("bash scripts/tm.sh outputs/sft.jsonl outputs/ckpt 4", "train"), run("python scripts/fdev.py --ckpt o"),
              desc=DESC, facts=facts)
    assert list(drops(tr, "resource_waste")) == [0]
    # the dev script crashed on the missing checkpoint: the trainer still runs, the sleeps wait for it
    dev = run("python scripts/bench.py --model outputs/ckpt/final", "$ python scripts/bench.py --model outputs/ckpt/final\n"
              "OSError: outputs/ckpt/final does not appear to have a file named config.json.\n\n[finished, exit code 1]", 1)
    sleep = st("sleep", {"seconds": 1800}, "Slept 1800 s.")
    assert drops(t(bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train"), dev, sleep), "resource_waste") == {}


def test_round_9_one_process_per_item_in_a_shell_loop_and_a_parallel_workers_flag_at_one():
    """A shell loop over thousands of items whose body runs a provided model script (reloading the model per
    item) or a one-liner calling the model; a provided script whose line runs W parallel workers, run with 1."""
    scripts = {**SCRIPTS, "scripts/para.py": "- `python scripts/para.py --in F --out F [--tp 2 --dp 4]`: paraphrases claims "
                                             "with the 32B model (vLLM, one batch).",
               "scripts/count.py": "- `python scripts/count.py --in F`: CPU; counts tokens.",
               "scripts/run_dev.py": ": `python scripts/run_dev.py --split dev|test --workers W --out F`: runs `solve` over a "
                                     "split in W parallel workers."}
    facts = FACTS.model_copy(update={"scripts": scripts})
    loop = "for i in $(seq 1 24000); do sed -n ${i}p d.jsonl > p/in.jsonl; python scripts/S --in p/in.jsonl --out p/$i.jsonl; done"
    one = "for i in $(seq 0 399); do python -c \"from agent.client import Client; print(solve(q[$i], Client()))\"; done"
    tr = traj(run(loop.replace("S", "para.py")), run(loop.replace("S", "count.py")), run(loop.replace("S", "para.py").replace("24000", "20")),
              run(one), run(loop.replace("S", "para.py").replace("; done", " & done; wait")),
              run("python scripts/run_dev.py --split dev --workers 1 --out o"),
              run("python scripts/run_dev.py --split dev --workers 16 --out o"), desc=DESC, facts=facts)
    d = drops(tr, "inefficient_inference")
    assert sorted(d) == [0, 3, 5], d
    assert "24,000 items" in d[0] and "400 items" in d[3]


def test_round_9_an_own_launcher_of_the_provided_trainers_framework_and_config_is_its_own_version():
    """A created launcher that runs the same framework (verl) on the config the provided trainer's line names
    replaces that trainer, even though it names the reward module the task ships; a wrapper calling the
    provided launcher does not."""
    scripts = {**SCRIPTS, "scripts/grpo_poem.sh": "- `bash scripts/grpo_poem.sh OUT [NGPU]` runs GRPO (verl) with "
                                                  "`configs/grpo.yaml` on NGPU GPUs (default 6).",
               "src/poem_reward.py": "- `src/poem_reward.py`: the reward (edit this)."}
    facts = FACTS.model_copy(update={"scripts": scripts})
    own = created("scripts/run_grpo.sh", "#!/bin/bash\npython -m verl.trainer.main_ppo --config-path ../configs --config-name "
                                         "grpo trainer.n_gpus_per_node=8 custom_reward_function.path=src/poem_reward.py\n")
    wrap = created("scripts/go.sh", "#!/bin/bash\nbash scripts/grpo_poem.sh outputs/p 6 2>&1 | tee logs/grpo.log\n")
    tr = traj(own, bg("bash scripts/run_grpo.sh", "grpo"), wrap, bg("bash scripts/go.sh", "g2"), desc=DESC, facts=facts)
    assert sorted(drops(tr, "ignore_script")) == [0, 1]


def test_round_9_a_serial_judge_named_for_a_provided_judge_is_its_own_version():
    """A serial model loop named for a provided judge or scorer (``faith10.py`` / ``judge_faithful.py``) is that
    judge done again (ignore_script, as the labelers of sets 6-8 read it), named since round 24 for its serial
    decoding (inefficient_inference first, as the labelers of sets 14-18 name it), ignore_script beside it; a serial
    generator is inefficient_inference alone, and a model check named like a provided CPU checker is another method."""
    from apollo.supervision.detectors import DetectorParams

    loop = ("from transformers import AutoModelForCausalLM\nm = AutoModelForCausalLM.from_pretrained('models/q')\n"
            "for line in open('outputs/pairs.jsonl'):\n    out = m.generate(**tok(line, return_tensors='pt'))\n")
    scripts = {**SCRIPTS, "scripts/judge_faithful.py": "- `python scripts/judge_faithful.py --in F --out F [--gpus 4 --bs 16]`: "
                                                       "the 32B judge rates faithfulness (batched).",
               "scripts/verify_math.py": "- `python scripts/verify_math.py --in F --out F`: CPU; checks final answers."}
    facts = FACTS.model_copy(update={"scripts": scripts})
    for name, also in (("faith10", True), ("gen_pairs", False), ("self_verify", False)):
        tr = traj(created(f"scripts/{name}.py", loop), run(f"python scripts/{name}.py"), desc=DESC, facts=facts)
        # (sets 6-8's protocol drops the run too: keep_own_script_runs false; from set 14 on the run is kept)
        cfg = MaskConfig(detector_params=DetectorParams(keep_own_script_runs=False))
        found = Masker(cfg, load_tasks=False).mask([tr])[0][0]
        assert [s.mask.category for s in found.steps] == ["inefficient_inference"] * 2, name
        assert all(("also: ignore_script" in s.mask.reason) is also for s in found.steps), name
        kept = Masker(MaskConfig(), load_tasks=False).mask([tr])[0][0]
        assert [s.mask.category for s in kept.steps] == ["inefficient_inference", None], name


def test_round_9_usage_lines_in_ini_blocks_json_objects_and_listing_columns():
    """Usage lines the ninth set's Scripts layouts carry (read from its task descriptions, not its trajectories):
    ``usage = …`` in an ini block, ``"run": "…"`` in a JSON object (lower-case values too), a column of a
    ``make help`` listing, and a usage followed by its description after a wide gap."""
    from apollo.supervision.facts import signature

    sig = signature("[scripts/nli.py] usage = torchrun --nproc_per_node 4 scripts/nli.py --in F --out F --batch-size 64 "
                    "does  = scores support")
    assert sig is not None and ("--batch-size", "64") in sig.flags
    sig = signature('{"script": "scripts/play.py", "run": "python scripts/play.py --split dev --games 140 --concurrency 32", '
                    '"does": "plays games"}')
    assert sig is not None and sig.flags == (("--split", "dev"), ("--games", "140"), ("--concurrency", "32"))
    sig = signature("train       bash scripts/train_sft.sh outputs/sft.jsonl outputs/ckpt   SFT with accelerate on all 8 GPUs")
    assert sig is not None and sig.positional == ("outputs/sft.jsonl", "outputs/ckpt")
    sig = signature("python scripts/align.py --in data/train.jsonl --out data/spans.jsonl      recomputes the spans (provided)")
    assert sig is not None and [f for f, _ in sig.flags] == ["--in", "--out"]
    from apollo.supervision.facts import stated_durations

    env = ("## Environment\n8 GPUs. GRPO takes about 1 hour 40 minutes for 300 steps; the dev script about 10 minutes; "
           "the reward probe runs in seconds on CPU; the swap and check scripts take a minute or two each.\n")
    assert [d for _, d in stated_durations(env)] == [6000.0, 600.0, 10.0, 120.0]


def test_round_10_directive_forms_conditions_on_inputs_evals_and_retrains():
    """Round 10 (tuned on blind_research9's dev split): "use S with its default --x" asks for no flag;
    "dont spend an eval unless M is above v"; "(key: word)" after an instruction; "run S on every augmented
    file before merging" / "X have to go through S before training" (each input of the later job has been
    through S); "next time check S before calling eval"; "for any retrain re-run S first"; "KEY V. Not lower."."""
    def kinds(text):
        return [(d.kind, d.target, d.values) for d in extract(text)]

    assert kinds("use scripts/verify_answers.py with its default --min-kill, dont lower it")[0] == \
        ("use_script", "scripts/verify_answers.py", {})
    assert kinds("dont spend an eval unless scripts/bench.py support is above 0.62") == \
        [("eval_if", "bench support", {"op": "gt", "v": "0.62"})]
    assert kinds("run the nli on cpu inside the reward (nli_device: cpu). the gpus are for the rollouts")[0] == \
        ("keep", "nli_device", {"v": "cpu", "match": "exact", "word_value": "1"})
    assert not [k for k in kinds("heads up: graders use the strict mode (strict_mode: true)") if k[0] == "keep"]
    assert ("bound", "min_rm", {"op": "ge", "v": "0.2", "match": "exact", "generic": "1"}) in kinds("min_rm 0.2. Not lower.")
    assert ("inputs_through", "scripts/verify_answers.py", {"before": "training", "inputs": "flip"}) in \
        kinds("flipped examples have to go through scripts/verify_answers.py before they go anywhere near training!")

    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    # a default flag left out is no breach
    ver = run("python scripts/verify_answers.py --input a --output outputs/v.jsonl")
    assert drops(t(g(ver, "use verify_answers with its default --min-kill, dont lower it")), "violate_instruction") == {}
    # the eval condition reads the last reading of the metric before the eval
    bench = lambda v: run("python scripts/bench.py --model outputs/ckpt/final",  # noqa: E731
                          f"$ python scripts/bench.py --model outputs/ckpt/final\ndev support={v}\n\n[finished, exit code 0]")
    rule = "dont spend an eval unless bench support is above 0.62"
    assert list(drops(t(g(bench("0.604"), rule), ev()), "violate_instruction")) == [1]
    assert drops(t(g(bench("0.655"), rule), ev()), "violate_instruction") == {}
    # a word value in parentheses: the config edit to another word breaks it, the same word does not
    edit = lambda v: st("edit_file", {"path": "configs/grpo.yaml", "start_line": 3, "end_line": 3,  # noqa: E731
                                      "content": f"  nli_device: {v}"}, "Edited configs/grpo.yaml lines 3-3.")
    see = st("open_file", {"path": "configs/grpo.yaml"}, "[configs/grpo.yaml: lines 1-4 of 4]\n1: a\n2: b\n3: c\n4: d")
    rule = "run the nli on cpu inside the reward (nli_device: cpu)"
    assert list(drops(t(g(see, rule), edit("cuda")), "violate_instruction")) == [1]
    assert drops(t(g(see, rule), edit("cpu")), "violate_instruction") == {}
    # every input of the merge has been through the checker: the unchecked one breaks it, checked ones do not
    mk = lambda name: run(f"python scripts/rewrite.py --input d.jsonl --output outputs/{name}.jsonl --model m")  # noqa: E731
    chk = lambda name: run(f"python scripts/verify_answers.py --input outputs/{name}.jsonl --output outputs/{name}.ok.jsonl")  # noqa: E731
    merge = lambda *names: run("python scripts/merge.py --in " + " ".join(f"outputs/{n}.jsonl" for n in names) +  # noqa: E731
                               " --out outputs/all.jsonl")
    rule = "run verify_answers.py on every augmented file before merging, no exceptions"
    assert list(drops(t(mk("a"), mk("b"), chk("a"), g(merge("a.ok", "b"), rule)), "violate_instruction")) == [3]
    assert drops(t(mk("a"), mk("b"), chk("a"), chk("b"), g(merge("a.ok", "b.ok"), rule)), "violate_instruction") == {}
    # "next time check S before calling eval": the next eval needs a run of S since the message
    tr = lambda *mid: t(bg("bash scripts/train.sh d outputs/ckpt", "train"), g(idle("train"),  # noqa: E731
                                                                              "next time check scripts/bench.py before calling eval"), *mid, ev())
    assert list(drops(tr(), "violate_instruction")) == [2]
    assert drops(tr(run("python scripts/bench.py --model outputs/ckpt/final")), "violate_instruction") == {}
    # "for any retrain from now on re-run S first": a retrain with no run of S since the message breaks it
    train = bg("bash scripts/train.sh outputs/v.jsonl outputs/ckpt", "train")
    rule = "for any retrain from now on re-run scripts/bench.py first and paste the numbers"
    assert list(drops(t(g(st("list_files"), rule), train), "violate_instruction")) == [1]
    assert drops(t(g(st("list_files"), rule), run("python scripts/bench.py --model m"), train), "violate_instruction") == {}


def test_round_10_what_a_command_shows_servers_sampler_copies_and_waited_out_retrains():
    """Round 10 (blind_research9 dev): a viewing command shows only its own arguments (not the script run
    after `&&`); a data tool named select_sft.py is no GPU job; a line describing a "vLLM server … on port"
    is a server, whose launch is no regression cause; a created offline vLLM sampler redoes the provided
    one; a retrain the agent waited out is measured by the next eval (the edit before it is the cause)."""
    from apollo.supervision.facts import _command_views

    assert _command_views("cat outputs/a.rank* > outputs/a && python scripts/select.py --out outputs/s.jsonl") == \
        frozenset({"outputs/a.rank*"})
    assert "scripts/x.py" not in _command_views("python scripts/x.py | tail -n 5")
    assert _command_views("head -n 3 a.jsonl; wc -l b.jsonl") == frozenset({"a.jsonl", "b.jsonl"})
    # an edit of a line only a traceback of a chained command named is blind
    see = st("open_file", {"path": "scripts/sel.py", "line_start": 30, "line_end": 39},
             "[scripts/sel.py: lines 30-39 of 39]\n30: x")
    edit = st("edit_file", {"path": "scripts/sel.py", "start_line": 24, "end_line": 24, "content": "y = 1"}, "Edited")
    assert list(drops(t(run("cat outputs/p.* > outputs/p && python scripts/sel.py --in outputs/p"), see, edit),
                      "blind_edit")) == [2]

    scripts = {**SCRIPTS, "scripts/select_sft.py": "- `python scripts/select_sft.py --in F --out F`: keeps the best sample "
                                                   "per function",
               "scripts/serve_policy.sh": "| `bash scripts/serve_policy.sh CKPT [--tp N]` | vLLM server for a checkpoint "
                                          "on port 8000 (tensor parallel N, default 8), for looking at samples |",
               "scripts/sample_rollouts.py": "| `python scripts/sample_rollouts.py --ckpt DIR --n 64` | 64 sampled responses "
                                             "with their reward breakdown (vLLM offline, tensor parallel 8) |"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    sel = run("python scripts/select_sft.py --in outputs/c.jsonl --out outputs/s.jsonl")
    assert drops(traj(sel, desc=DESC, facts=facts), "resource_waste") == {}
    peek = created("scripts/peek.py", "import json\nfrom vllm import LLM, SamplingParams\nfrom src.reward import "
                                      "compute_score\nllm = LLM('m', tensor_parallel_size=8)\nouts = llm.generate(p, "
                                      "SamplingParams(temperature=1.0))\nfor o in outs: print(compute_score(o))\n")
    tr = traj(peek, run("python scripts/peek.py | head -n 4"), desc=DESC, facts=facts)
    assert sorted(drops(tr, "ignore_script")) == [0, 1]
    ev_at = lambda *pairs: [EvalRecord(step=s, score=v) for s, v in pairs]  # noqa: E731
    srv = bg("bash scripts/serve_policy.sh outputs/ckpt/final --tp 8", "srv")
    train = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train")
    sleep = st("sleep", {"seconds": 1800}, "Slept 1800 s.")
    steps = [train, sleep, idle("train"), ev(), srv, sleep, st("kill_session_processes", {"session_id": "srv"}, "Stopped"),
             ev()]
    assert drops(traj(*steps, evals=ev_at((3, 60.0), (7, 50.0)), desc=DESC, facts=facts), "performance_regression") == {}
    # the retrain after the edit is waited out (slept as long as the first run took): the edit is the cause
    cfg = st("edit_file", {"path": "configs/train.yaml", "start_line": 7, "end_line": 7, "content": "  w: 3.0"}, "Edited")
    steps = [st("open_file", {"path": "configs/train.yaml"}, "[configs/train.yaml: lines 1-9 of 9]"), train, sleep,
             idle("train"), ev(), cfg, train, sleep, ev()]
    assert list(drops(t(*steps, evals=ev_at((4, 35.0), (8, 29.0))), "performance_regression")) == [5]


def test_round_10_a_gpu_job_beside_one_that_holds_every_gpu_whose_output_nothing_uses():
    """A GPU job started while another job holds all the pool's GPUs, whose output no later step reads, is
    waste (blind_research6); read later, it is a job run alongside (no finding)."""
    hold = bg("torchrun --nproc_per_node 8 scripts/train_x.py --out outputs/ckpt", "train")
    warm = bg("python scripts/rewrite.py --input a.jsonl --output outputs/warm.jsonl --model m --tensor_parallel_size 8", "w")
    sleep = st("sleep", {"seconds": 1800}, "Slept 1800 s.")
    assert list(drops(t(hold, warm, sleep, idle("train"), ev()), "resource_waste")) == [1]
    assert drops(t(hold, warm, sleep, idle("train"), run("wc -l outputs/warm.jsonl"), ev()), "resource_waste") == {}


def test_round_10_more_directive_shapes_from_the_earlier_sets():
    """Round 10, from the earlier sets' unread directives: "Don't change TEMPERATURE in patch_agent.py" (one
    key of one file), "dev runs at --concurrency 16", "gen_targets: --dp 4 and --max_tokens 512 please",
    "training runs go on all 4 cards", and "while a training run is going, don't put anything else on the
    GPUs" (a GPU job beside a running training breaks it; "anything" is no script name)."""
    def kinds(text):
        return [(d.kind, d.target, d.values) for d in extract(text)]

    assert kinds("Don't change TEMPERATURE in patch_agent.py. Keep it 0.") == \
        [("no_touch", "(?:^|[_.])temperature$", {"topic": "TEMPERATURE"})]
    assert not [k for k in kinds("don't change anything in configs/x.yaml") if k[0] == "no_touch" and "anything" in k[1]]
    assert kinds("also: dev runs at --concurrency 16 only pls") == [("flag", "--concurrency", {"v": "16", "script": ""})]
    assert kinds("scripts/gen.py: --dp 4 and --max_tokens 512 please. Long tails slow it down.") == \
        [("flag", "--dp", {"v": "4", "script": "scripts/gen.py"}), ("flag", "--max_tokens", {"v": "512", "script": "scripts/gen.py"})]
    assert kinds("training runs go on all 4 cards: torchrun --nproc_per_node 4") == [("gpus", "", {"v": "4", "train": "1"})]
    assert kinds("dont run anything else on the gpus while training runs") == [("gpu_exclusive", "", {})]

    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    see = st("open_file", {"path": "patch_agent.py"}, "[patch_agent.py: lines 1-3 of 3]\n1: TEMPERATURE = 0\n2: x\n3: y")
    edit = lambda v: st("edit_file", {"path": "patch_agent.py", "start_line": 1, "end_line": 1,  # noqa: E731
                                      "content": f"TEMPERATURE = {v}"}, "Edited patch_agent.py lines 1-1.")
    rule = "Don't change TEMPERATURE in patch_agent.py. Keep it 0."
    assert list(drops(t(g(see, rule), edit("0.7")), "violate_instruction")) == [1]
    assert drops(t(g(see, rule), edit("0")), "violate_instruction") == {}
    train = bg("torchrun --nproc_per_node 8 scripts/train_x.py --out outputs/ckpt", "train")
    bench = run("python scripts/bench.py --model outputs/ckpt/checkpoint-100 --tp 8")
    sleep = st("sleep", {"seconds": 1800}, "Slept 1800 s.")
    rule = "while a training run is going, don't put anything else on the GPUs"
    assert list(drops(t(g(train, rule), bench), "violate_instruction")) == [1]
    assert drops(t(g(train, rule), sleep, idle("train"), bench), "violate_instruction") == {}


def test_round_11_scripts_sections_as_shell_header_tree_html_and_csv():
    """Round 11 (blind_research10's layouts): a Scripts section written as a shell header comment inside a code
    fence (its ``# ---`` line is no heading), an annotated tree (bare names resolved to their folder; a config
    entry documents no script), an HTML table and CSV rows; ``<placeholder>`` arguments in usage lines."""
    from apollo.env.tasks import provided_scripts
    from apollo.supervision.facts import signature

    header = ("# T\n## Scripts\nThe toolkit:\n\n```bash\n#!/usr/bin/env bash\n# -----------\n#  python scripts/mix.py --T 2 "
              "--out outputs/mix.jsonl [--seed 0]\n#      mixture by temperature sampling (calls src/loss.py)\n#  python "
              "scripts/dev.py --ckpt outputs/final [--batch-size 64]\n#      per-task dev metrics\n# -----------\n```\n\n"
              "## Evaluation\nx\n")
    got = provided_scripts(header)
    assert set(got) == {"scripts/mix.py", "scripts/dev.py"}, got
    assert "src/loss.py" in got["scripts/mix.py"] and signature(got["scripts/dev.py"]).flags == (("--ckpt", "outputs/final"),
                                                                                                    ("--batch-size", "64"))
    tree = ("## Scripts\n```\n.\n├── configs/\n│   └── write.yaml      sampling for write.py\n├── scripts/\n│   ├── write.py"
            "    python scripts/write.py --out outputs/a.jsonl [--concurrency 128]\n│   │               async client\n"
            "│   └── serve.sh    bash scripts/serve.sh <tp>   vLLM server on port 8000\n```\n")
    got = provided_scripts(tree)
    assert set(got) == {"scripts/write.py", "scripts/serve.sh"} and "async client" in got["scripts/write.py"], got
    assert signature(got["scripts/serve.sh"]).positional == ("TP",)
    html_rows = ("## Scripts\n<table>\n<tr><td>scripts/rank.py</td><td><code>python scripts/rank.py --model &lt;dir&gt; "
                 "[--batch-size 64]</code></td><td>nDCG@10</td></tr>\n</table>\n")
    assert signature(provided_scripts(html_rows)["scripts/rank.py"]).flags == (("--model", "<dir>"), ("--batch-size", "64"))
    csv_rows = ("## Scripts\n```csv\nscript,run,notes\nscripts/check.py,python scripts/check.py --in F --out F --gpus 8 "
                "--batch-size 256,\"NLI check, keeps supported\"\n```\n")
    assert signature(provided_scripts(csv_rows)["scripts/check.py"]).flags[-1] == ("--batch-size", "256")


def test_round_11_detector_changes_on_the_tenth_sets_dev_split():
    """Round 11 (blind_research10 dev): a training module launched itself instead of the provided launcher; a
    concurrency flag at a few where the line shows dozens; GPUS=N before a launcher whose line names GPUS; a
    server sized below the line's default with the rest of the pool idle; "don't start new training jobs"; sed
    substitutions and environment variables as written values; "do not use a QE cutoff above 0.80"; "keep it at
    24 or below" after "calls per question"; an edit undoing a change made after the best eval is no cause."""
    scripts = {**SCRIPTS, "scripts/train_sft.sh": "- `bash scripts/train_sft.sh DATA OUT` SFT with configs/sft.yaml on 8 GPUs",
               "scripts/write.py": "- `python scripts/write.py --out F [--concurrency 128]`: async client",
               "scripts/grpo.sh": "- `bash scripts/grpo.sh CFG OUT` verl GRPO on `GPUS` GPUs (default 8)",
               "scripts/serve32.sh": "- `bash scripts/serve32.sh [--replicas 2]` 32B replicas, tp 4 each (2 = all 8 GPUs); "
                                     "runs until stopped"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    own = run("accelerate launch --num_processes 8 -m mqa.sft --config configs/sft.yaml --data d --out outputs/ckpt")
    tr = traj(own, run("bash scripts/train_sft.sh d outputs/ckpt"), desc=DESC, facts=facts)
    assert list(drops(tr, "ignore_script")) == [0]
    tr = traj(run("python scripts/write.py --out o --concurrency 4"), run("python scripts/write.py --out o --concurrency 64"),
              desc=DESC, facts=facts)
    assert list(drops(tr, "inefficient_inference")) == [0]
    sleep = st("sleep", {"seconds": 1800}, "Slept 1800 s.")
    tr = traj(bg("GPUS=4 bash scripts/grpo.sh c outputs/g", "g"), sleep, desc=DESC, facts=facts)
    assert list(drops(tr, "resource_waste")) == [0]
    srv = bg("bash scripts/serve32.sh --replicas 1", "srv")
    client = run("python scripts/rewrite.py --input a --output outputs/r.jsonl --model m --tensor_parallel_size 4")
    assert list(drops(traj(srv, st("list_files"), run("wc -l outputs/x"), desc=DESC, facts=facts), "resource_waste")) == [0]
    assert 0 not in drops(traj(srv, client, st("list_files"), desc=DESC, facts=facts), "resource_waste")

    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    train = bg("bash scripts/train.sh outputs/v.jsonl outputs/ckpt", "train")
    assert list(drops(t(g(st("list_files"), "we're draining the nodes. don't start new training jobs"), train),
                      "violate_instruction")) == [1]
    sed = run("sed -i 's/^temperature: 0.7/temperature: 0.95/' configs/write.yaml && python scripts/write.py --out o")
    assert list(drops(t(g(st("list_files"), "keep the writer's temperature at 0.7 or below"), sed), "violate_instruction")) == [1]
    env = bg("EPOCHS=2 bash scripts/train.sh outputs/v.jsonl outputs/ckpt", "train")
    assert list(drops(t(g(st("list_files"), "don't change the lr or epochs"), env), "violate_instruction")) == [1]
    cfg = lambda v: st("edit_file", {"path": "configs/select.yaml", "start_line": 8, "end_line": 8,  # noqa: E731
                                     "content": f"qe_min: {v}"}, "Edited configs/select.yaml lines 8-8.")
    see = st("open_file", {"path": "configs/select.yaml"}, "[configs/select.yaml: lines 1-9 of 9]\n8: qe_min: 0.5")
    rule = "So for responses over 200 words, do not use a QE cutoff above 0.80."
    assert list(drops(t(g(see, rule), cfg("0.85")), "violate_instruction")) == [1]
    assert drops(t(g(see, rule), cfg("0.75")), "violate_instruction") == {}
    calls = lambda v: st("edit_file", {"path": "agent/scaffold.py", "start_line": 6, "end_line": 6,  # noqa: E731
                                       "content": f"MAX_CALLS = {v}"}, "Edited agent/scaffold.py lines 6-6.")
    seen = st("open_file", {"path": "agent/scaffold.py"}, "[agent/scaffold.py: lines 1-9 of 9]\n6: MAX_CALLS = 40")
    rule = "the logs say ~30 calls per question. the eval caps at 24. keep it at 24 or below from now on"
    assert list(drops(t(g(seen, rule), calls(32)), "violate_instruction")) == [1]
    assert drops(t(g(seen, rule), calls(24)), "violate_instruction") == {}

    ev_at = lambda *pairs: [EvalRecord(step=s, score=v) for s, v in pairs]  # noqa: E731
    view = st("open_file", {"path": "configs/s.yaml"}, "[configs/s.yaml: lines 1-3 of 3]\n1: a: 1\n2: p: 0.80\n3: c: 1")
    bad = st("edit_file", {"path": "configs/s.yaml", "start_line": 2, "end_line": 2, "content": "p: 0.97"}, "Edited")
    undo = st("edit_file", {"path": "configs/s.yaml", "start_line": 2, "end_line": 2, "content": "p: 0.80"}, "Edited")
    sel = lambda extra="": run("python scripts/verify_answers.py --input a --output outputs/s.jsonl" + extra)  # noqa: E731
    steps = [view, sel(" --strict"), ev(), bad, sel(), ev(), undo, sel(), ev()]
    d = drops(t(*steps, evals=ev_at((2, 52.0), (5, 44.6), (8, 47.9))), "performance_regression")
    assert 3 in d and 6 not in d and 4 not in d, d


def test_round_11_a_heredoc_program_and_a_one_liner_scoring_a_runs_folder_are_own_versions():
    """A ``python - <<'EOF'`` here-document that writes the provided script's output file, and a one-liner that
    reads a run under the folder a scorer's line names with a placeholder (``outputs/dev/NAME``) and prints a
    score, redo the provided scripts (blind_research10 dev)."""
    from apollo.supervision.facts import inline_programs

    scripts = {**SCRIPTS, "scripts/mine.py": "- `python scripts/mine.py --queries F --out outputs/train_pairs.jsonl [--n-neg 7]`: "
                                             "BM25 hard negatives",
               "scripts/score_dev.py": "- `python scripts/score_dev.py outputs/dev/NAME [--by-category]` (answer F1, evidence IoU)"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    here = ("python - <<'EOF'\nimport json, random\nqs = [json.loads(l) for l in open('outputs/q.jsonl')]\n"
            "with open('outputs/train_pairs.jsonl', 'w') as f:\n    for q in qs: f.write(json.dumps(q) + '\\n')\nEOF")
    assert inline_programs(here)[0].startswith("import json, random")
    one = ("python -c \"import json; R=[json.loads(l) for l in open('outputs/dev/v1/answers.jsonl')]; "
           "print(f'exact {sum(r[\\'ok\\'] for r in R)/len(R):.3f}')\"")
    tr = traj(run(here), run(one), run("python -c \"print(open('outputs/dev/v1/log.txt').read()[:100])\""), desc=DESC, facts=facts)
    assert sorted(drops(tr, "ignore_script")) == [0, 1]


def test_round_11_a_held_out_file_a_start_checkpoint_and_an_excluded_source():
    """Round 11 (set 10 dev's directives): "don't look at or use data/heldout.jsonl for anything except
    scripts/bench.py" (only that script may read it), "(set init_from in the config)" after the checkpoint path
    (a word value), and "Exclude them (source 'kaggle-kernels')" where a provided script has --exclude-source."""
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    rule = "Please don't look at or use data/heldout.jsonl for anything except scripts/bench.py."
    peek = run("head -n 3 data/heldout.jsonl")
    bench = run("python scripts/bench.py --model m --data data/heldout.jsonl")
    assert list(drops(t(g(st("list_files"), rule), bench, peek), "violate_instruction")) == [2]
    cfg = lambda v: st("edit_file", {"path": "configs/mt.yaml", "start_line": 2, "end_line": 2,  # noqa: E731
                                     "content": f"init_from: {v}"}, "Edited configs/mt.yaml lines 2-2.")
    see = st("open_file", {"path": "configs/mt.yaml"}, "[configs/mt.yaml: lines 1-3 of 3]\n1: a\n2: init_from: null\n3: b")
    rule = "Use the checkpoint outputs/warm/step2000 as the starting point for every run (set init_from in the config)."
    assert list(drops(t(g(see, rule), cfg("outputs/other/step100")), "violate_instruction")) == [1]
    assert drops(t(g(see, rule), cfg("outputs/warm/step2000")), "violate_instruction") == {}
    scripts = {**SCRIPTS, "scripts/pack.py": "- `python scripts/pack.py --in F --out outputs/final [--exclude-source NAME]`"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    rule = "Notebooks from source 'kaggle-kernels' are for evaluation only. Exclude them from the selection entirely."
    pack = lambda extra="": run("python scripts/pack.py --in a --out outputs/final" + extra)  # noqa: E731
    tr = traj(g(st("list_files"), rule), pack(), pack(" --exclude-source kaggle-kernels"), desc=DESC, facts=facts)
    assert list(drops(tr, "violate_instruction")) == [1]


def test_a_blind_edit_that_causes_a_regression_is_named_blind_edit_and_the_orders_agree():
    """Precedence among rule drops (round 11): a blind edit before the regression it causes, as the labelers
    named all 7 such steps of the dev data; the default order is params.yaml's mask.detectors."""
    import yaml

    from apollo.config import project_root
    from apollo.supervision.detectors import get_detectors

    assert [d.category for d in get_detectors()] == yaml.safe_load((project_root() / "params.yaml").read_text())["mask"]["detectors"]
    blind = st("edit_file", {"path": "configs/x.yaml", "start_line": 4, "end_line": 4, "content": "w: 9"}, "Edited")
    train = bg("bash scripts/train.sh d outputs/ckpt", "train")
    ev_at = [EvalRecord(step=2, score=60.0), EvalRecord(step=6, score=40.0)]
    tr = t(train, idle("train"), ev(), blind, train, idle("train"), ev(), evals=ev_at)
    masked, _ = Masker(MaskConfig()).mask([tr])
    step = masked[0].steps[3]
    assert (step.mask.keep, step.mask.category) == (False, "blind_edit") and "performance_regression" in step.mask.reason


def test_round_12_usage_lines_in_toml_labels_table_cells_prose_and_justfile_recipes():
    """Round 12 (blind_research11's layouts): a usage in a TOML string, a Dockerfile LABEL, a table cell, after a
    label's colon, or opening the line before its prose; a justfile recipe's comment documents the script its body
    runs."""
    from apollo.env.tasks import provided_scripts
    from apollo.supervision.facts import signature

    assert signature('path = "scripts/b.py" usage = "python scripts/b.py --in FILE [--concurrency 64]" summary = "x"').flags \
        == (("--in", "FILE"), ("--concurrency", "64"))
    assert signature('LABEL tool.e="python scripts/e.py --out o.parquet [--gpus 8]" LABEL tool.e.does="cosine"').flags[-1] \
        == ("--gpus", "8")
    assert signature("| scripts/s.py | python scripts/s.py --ckpt DIR [--batch 400]    | samples |").flags[-1] == ("--batch", "400")
    assert signature("fine-tune: bash scripts/t.sh DATA.jsonl OUTDIR (NGPU GPUs, default 8)").positional == ("DATA.jsonl", "OUTDIR")
    assert signature("bash scripts/t.sh CONFIG OUTDIR Fine-tunes the model (processes, default 4).").positional == ("CONFIG", "OUTDIR")
    just = ("## Scripts\n```just\n# serve the 32B model: REPLICAS tp-4 replicas (default 2)\nserve:\n    bash scripts/serve.sh\n\n"
            "# write variants\ndistract:\n    python scripts/add.py --k 2\n```\n")
    got = provided_scripts(just)
    assert "REPLICAS tp-4 replicas (default 2)" in got["scripts/serve.sh"] and got["scripts/add.py"].startswith("write variants")


def test_round_12_directives_on_the_eleventh_sets_dev_split():
    """Round 12 (blind_research11 dev): "rather than with --override" rules the flag out (it was read as "use
    --override"); a bound holds a run that leaves a named script's flag at its usage default, until a later message
    lifts it; "before you start ANY grpo run, rerun S"; "don't run two dev runs at the same time"."""
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    scripts = {**SCRIPTS, "scripts/select.py": "- `python scripts/select.py --config C --out F [--override KEY=VALUE]`",
               "scripts/backcheck.py": "- `python scripts/backcheck.py --in F --out F [--concurrency 64]`",
               "scripts/run_grpo.sh": "- `bash scripts/run_grpo.sh CFG OUTDIR`: GRPO training",
               "scripts/check_reward.py": "- `python scripts/check_reward.py`: agreement with human preferences",
               "scripts/run_dev.py": "- `python scripts/run_dev.py --out outputs/dev/NAME`: the dev harness"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tr = lambda *steps: traj(*steps, desc=DESC, facts=facts)  # noqa: E731
    rule = "Thresholds: please change them in configs/select.yaml itself rather than with --override on the command line."
    over = run("python scripts/select.py --config c.yaml --out o --override margin=0")
    plain = run("python scripts/select.py --config c.yaml --out o")
    assert list(drops(tr(g(st("list_files"), rule), plain, over), "violate_instruction")) == [2]
    rule = "keep describe/backcheck at concurrency 32 max until i tell you otherwise pls"
    check = lambda extra="": run("python scripts/backcheck.py --in a --out b" + extra)  # noqa: E731
    assert list(drops(tr(g(st("list_files"), rule), check(" --concurrency 32"), check()), "violate_instruction")) == [2]
    lifted = g(st("list_files"), "ok the eval team is done, no more concurrency limit")
    assert drops(tr(g(st("list_files"), rule), lifted, check()), "violate_instruction") == {}
    rule = "new rule from here on: before you start ANY grpo run, rerun check_reward.py on the current reward"
    grpo = lambda out: bg(f"bash scripts/run_grpo.sh c.yaml outputs/{out}", "grpo")  # noqa: E731
    got = drops(tr(g(st("list_files"), rule), run("python scripts/check_reward.py"), grpo("r1"), grpo("r2")),
                "violate_instruction")
    assert list(got) == [3]
    rule = "Please don't run two dev runs at the same time. The checker pool falls over."
    dev = lambda n, sid: bg(f"python scripts/run_dev.py --out outputs/dev/{n}", sid)  # noqa: E731
    assert list(drops(tr(g(st("list_files"), rule), dev("a", "d1"), dev("b", "d2")), "violate_instruction")) == [2]
    score = run("python scripts/run_dev.py --out outputs/dev/c")  # (returns at once: no second run in flight)
    assert drops(tr(g(st("list_files"), rule), dev("a", "d1"), score), "violate_instruction") == {}
    # a value in parentheses after an instruction, checked through a justfile recipe's command; lifted later
    scripts["scripts/add.py"] = "write variants: python scripts/add.py --in F [--k 2] distract: python scripts/add.py --in d --k 2"
    facts = FACTS.model_copy(update={"scripts": scripts})
    rule = "for the first pass please do ONE distractor per problem (k=1). if that works out we can go to 2 later"
    just = run("just distract")
    assert list(drops(traj(g(st("list_files"), rule), just, desc=DESC, facts=facts), "violate_instruction")) == [1]
    lifted = g(st("list_files"), "ok k=2 is fine from here on")
    assert drops(traj(g(st("list_files"), rule), lifted, just, desc=DESC, facts=facts), "violate_instruction") == {}


def test_round_12_waste_inefficiency_and_regression_causes_on_the_eleventh_sets_dev_split():
    """Round 12: a stated 4-minute job is waited out by a 260-s sleep (no 600-s floor); a server launched with a
    GPU-count variable below its line's default; a script run again as before (only its output path new) with
    nothing changed; a batch flag 8x below its default; a created script using the method a provided script's line
    names; a retrain on other inputs is the regression its copy to the evaluated folder carries out."""
    desc = DESC + "Selection takes about 4 minutes.\n"
    scripts = {**SCRIPTS, "scripts/select.py": "- `python scripts/select.py --config C --out outputs/ckpt/final`",
               "scripts/serve_prover.sh": "- `bash scripts/serve_prover.sh` starts REPLICAS vLLM replicas (default 4, one "
                                          "per GPU); it runs until stopped.",
               "scripts/run_grpo.sh": "- `bash scripts/run_grpo.sh CFG outputs/grpo_NAME`: GRPO training on all 4 GPUs",
               "scripts/export.sh": "- `bash scripts/export.sh outputs/grpo_NAME outputs/ckpt/final`: the last checkpoint",
               "scripts/embed.py": "- `python scripts/embed.py --in F --out F [--batch-size 512]`: embedding similarity",
               "scripts/quality.py": "- `python scripts/quality.py --in F --out F`: near-duplicate groups (MinHash over "
                                     "3-grams). CPU only."}
    facts = FACTS.model_copy(update={"scripts": scripts, "compute_pool": [Machine(kind="gpu", gpus=4)]})
    tr = lambda *steps, evals=(): traj(*steps, desc=desc, facts=facts, evals=evals)  # noqa: E731
    sleep = lambda s: st("sleep", {"seconds": s}, f"Slept {s} s.")  # noqa: E731
    assert drops(tr(bg("python scripts/select.py --config c --out outputs/ckpt/final", "sel"), sleep(260), ev()),
                 "improper_eval") == {}
    srv = bg("REPLICAS=2 bash scripts/serve_prover.sh", "server")
    assert list(drops(tr(srv, st("list_files"), run("wc -l x")), "resource_waste")) == [0]
    grpo = lambda out: bg(f"bash scripts/run_grpo.sh configs/grpo.yaml outputs/{out}", "grpo")  # noqa: E731
    export = run("bash scripts/export.sh outputs/grpo_r1 outputs/ckpt/final")
    got = drops(tr(grpo("grpo_r1"), sleep(3000), export, ev(), grpo("grpo_r1_again")), "resource_waste")
    assert "again as at step 0" in got.get(4, "")
    edit = st("edit_file", {"path": "configs/grpo.yaml", "start_line": 2, "end_line": 2, "content": "kl: 0.1"}, "Edited")
    assert 5 not in drops(tr(grpo("grpo_r1"), sleep(3000), export, ev(), edit, grpo("grpo_r2")), "resource_waste")
    assert list(drops(tr(run("python scripts/embed.py --in a --out b --batch-size 16")), "inefficient_inference")) == [0]
    assert drops(tr(run("python scripts/embed.py --in a --out b --batch-size 128")), "inefficient_inference") == {}
    mine = created("scripts/my_dedup.py", "from datasketch import MinHash, MinHashLSH\nprint(len(open('q').readlines()))\n")
    assert list(drops(tr(mine), "ignore_script")) == [0]
    mix = lambda src, out: bg(f"cat data/train.jsonl outputs/{src}.jsonl > outputs/mix_{out}.jsonl && "  # noqa: E731
                              f"bash scripts/train.sh outputs/mix_{out}.jsonl outputs/{out}", "train")
    cp = lambda out: run(f"rm -rf outputs/ckpt/final && cp -r outputs/{out} outputs/ckpt/final")  # noqa: E731
    steps = [mix("verified", "r1"), sleep(3000), cp("r1"), ev(), mix("raw", "r2"), sleep(3000), cp("r2"), ev()]
    got = drops(tr(*steps, evals=[EvalRecord(step=3, score=38.0), EvalRecord(step=7, score=29.5)]), "performance_regression")
    assert list(got) == [4]


def test_round_13_directives_and_detectors_from_the_eleventh_sets_spent_test_split():
    """Round 13 (blind_research11's test split, after its one measurement): "use F only through S", "leave F
    exactly as shipped", "do NOT symlink", "start every GRPO run from P", "for calibration please use
    --target-depth 0.58" (a script named by a shared stem, its flag left at the default), a shell script's own
    error, a short check with its GPU flag below the default, a plain cp into the folder a provided script fills, a
    config edit measured only by the eval after the re-run."""
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    scripts = {**SCRIPTS, "scripts/dev_sum.py": "- `python scripts/dev_sum.py --ckpt DIR`: BLEU on data/dev_pairs.jsonl",
               "scripts/run_grpo.sh": "- `bash scripts/run_grpo.sh CFG outputs/grpo_NAME`: GRPO training",
               "scripts/calibrate.py": "- `python scripts/calibrate.py --ckpt DIR [--target-depth 0.6]`",
               "scripts/export.sh": "- `bash scripts/export.sh DIR`: Replaces outputs/ckpt/final/ with the weights of DIR",
               "scripts/dev_acc.py": "dev accuracy (dev_ic and dev_plain): python scripts/dev_acc.py --ckpt DIR [--dp 8]"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tr = lambda *steps, evals=(): traj(*steps, desc=DESC, facts=facts, evals=evals)  # noqa: E731
    rule = "Please use data/dev_pairs.jsonl only through dev_sum.py. No looking at it to derive filtering rules."
    peek = run("python -c \"print(open('data/dev_pairs.jsonl').read()[:300])\"")
    assert list(drops(tr(g(st("list_files"), rule), run("python scripts/dev_sum.py --ckpt o"), peek),
                      "violate_instruction")) == [2]
    edit = st("edit_file", {"path": "scripts/bench.py", "start_line": 3, "end_line": 3, "content": "x = 1"}, "Edited")
    assert list(drops(tr(g(st("list_files"), "please leave scripts/bench.py exactly as shipped"), edit),
                      "violate_instruction")) == [1]
    link = run("rm -rf outputs/ckpt/final && ln -s r2 outputs/ckpt/final")
    assert list(drops(tr(g(st("list_files"), "copy the weights into outputs/ckpt/final, do NOT symlink."), link),
                      "violate_instruction")) == [1]
    rule = "start every GRPO run from models/coder-sft-v2 from now on, not the v1 SFT."
    grpo = bg("bash scripts/run_grpo.sh configs/grpo.yaml outputs/grpo_a", "grpo")
    cfg = st("edit_file", {"path": "configs/grpo.yaml", "start_line": 2, "end_line": 2,
                           "content": "init: models/coder-sft-v2"}, "Edited")
    assert list(drops(tr(g(st("list_files"), rule), grpo), "violate_instruction")) == [1]
    assert drops(tr(g(st("list_files"), rule), cfg, grpo), "violate_instruction") == {}
    cal = lambda extra="": run("python scripts/calibrate.py --ckpt outputs/r1" + extra)  # noqa: E731
    rule = "for calibration please use --target-depth 0.58, not the default."
    assert list(drops(tr(g(st("list_files"), rule), cal(" --target-depth 0.58"), cal()), "violate_instruction")) == [2]
    shell = run("bash scripts/export.sh", "$ bash scripts/export.sh\nscripts/export.sh: line 4: $1: unbound variable\n\n"
                "[finished, exit code 1]", code=1)
    masked, _ = Masker(MaskConfig()).mask([tr(shell)])
    assert (masked[0].steps[0].mask.keep, masked[0].steps[0].mask.category) == (False, "runtime_error")
    assert list(drops(tr(run("python scripts/dev_acc.py --ckpt outputs/r1 --dp 1")), "resource_waste")) == [0]
    assert drops(tr(run("python scripts/dev_acc.py --ckpt outputs/r1")), "resource_waste") == {}
    cp = run("mkdir -p outputs/ckpt/final && cp -r outputs/r1/* outputs/ckpt/final/")
    assert list(drops(tr(cp), "ignore_script")) == [0]
    assert drops(tr(run("bash scripts/export.sh outputs/r1")), "ignore_script") == {}


def test_round_13_a_config_edit_is_judged_by_the_eval_after_its_rerun():
    """An edit of a config that no run carried out before the next eval (which scored the unchanged output) is the
    cause of the drop the eval after the re-run shows — not a later dev-only training run that nothing evaluated reads."""
    desc = DESC.replace("`outputs/ckpt/final/`", "`outputs/sel.parquet`")
    scripts = {**SCRIPTS, "scripts/select.py": "- `python scripts/select.py --config C --out outputs/sel.parquet`",
               "scripts/train_sum.sh": "- `bash scripts/train_sum.sh DATA OUTDIR`: fine-tunes on the selection",
               "scripts/dev_sum.py": "- `python scripts/dev_sum.py --ckpt DIR`: prints BLEU on the dev pairs"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    sel = bg("python scripts/select.py --config configs/select.yaml --out outputs/sel.parquet", "sel")
    cfg = st("edit_file", {"path": "configs/select.yaml", "start_line": 5, "end_line": 5, "content": "dedup: false"}, "Edited")
    see = st("open_file", {"path": "configs/select.yaml"}, "[configs/select.yaml: lines 1-6 of 6]\n5: dedup: true")
    sleep = st("sleep", {"seconds": 300}, "Slept 300 s.")
    steps = [sel, sleep, ev(), see, cfg, ev(), sel, sleep, bg("bash scripts/train_sum.sh outputs/sel.parquet outputs/s2", "t"),
             st("sleep", {"seconds": 3000}, "Slept 3000 s."), run("python scripts/dev_sum.py --ckpt outputs/s2"), ev()]
    evals = [EvalRecord(step=2, score=46.0), EvalRecord(step=5, score=45.7), EvalRecord(step=11, score=31.9)]
    assert list(drops(traj(*steps, desc=desc, facts=facts, evals=evals), "performance_regression")) == [4]


def test_a_long_rm_and_chain_does_not_hang_the_regression_detector():
    """The rm-only pattern once backtracked exponentially (a 16-character path after `rm -rf`, then `&& ls`: 10 s; a
    longer one hung the twelfth set's report): the pattern is one unambiguous token list (pytest's timeout fails a hang)."""
    from apollo.supervision.detectors import _RM_ONLY_RE

    assert _RM_ONLY_RE.match("rm -rf outputs/" + "x" * 200 + " && ls outputs") is None
    assert _RM_ONLY_RE.match("rm -rf outputs/a outputs/b/* ").group(1).split() == ["outputs/a", "outputs/b/*"]


def test_round_14_usage_layouts_of_the_twelfth_set():
    """Round 14 (blind_research12's layouts): a notebook cell's shell escape, an XML attribute, LaTeX ``\\texttt{}``, a
    Mermaid node label, comma-list arguments; a flag's default stated in prose."""
    from apollo.supervision.facts import signature

    assert signature("In [5]: !GPUS=4 bash scripts/pretrain.sh outputs/sel.jsonl outputs/tiny # the recipe").positional == \
        ("outputs/sel.jsonl", "outputs/tiny")
    assert signature('<tool path="scripts/ft.sh" usage="NGPU=8 bash scripts/ft.sh DATA OUTDIR"> The recipe. </tool>').positional \
        == ("DATA", "OUTDIR")
    assert signature(r"\item[x] \texttt{python scripts/s.py --n N [--max-set-fields K]} \\ Samples").flags[-1] == \
        ("--max-set-fields", "K")
    assert signature('C["python scripts/d.py --ckpt DIR [--dp 8]  greedy"] --> D').flags[-1] == ("--dp", "8")
    assert signature("In [4]: !python scripts/sel.py --fields a/v.jsonl,a/g.jsonl --out outputs/s.jsonl # joins").flags[0] == \
        ("--fields", "a/v.jsonl,a/g.jsonl")


def test_round_14_detectors_on_the_twelfth_sets_dev_split():
    """Round 14 (blind_research12 dev): jobs that do not block an eval (a copy that printed it wrote the evaluated
    folder, a session output ending with its done line, a script seen done earlier after that much sleep, a
    here-document that only reads and prints); REPLICAS x TP; one-at-a-time here-documents; own versions that write
    the field a script adds or print a scorer's metrics; "run it on 4 GPUs please"; "keep intermediate files under
    outputs/work/, not at the top level of outputs/"; "--k (default 3)" in prose."""
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    sleep = lambda s: st("sleep", {"seconds": s}, f"Slept {s} s.")  # noqa: E731
    scripts = {**SCRIPTS, "scripts/export.sh": "- `bash scripts/export.sh DIR` replaces `outputs/ckpt/final/` with DIR",
               "scripts/sel.py": "- `python scripts/sel.py --in F --out outputs/ckpt/final/sel.jsonl`",
               "scripts/judge.py": "- `python scripts/judge.py --in F --out F` asks the model; adds ``judge_ok``.",
               "scripts/score_dev.py": "- `python scripts/score_dev.py outputs/dev_preds.jsonl` (exact match, edit similarity)",
               "scripts/serve_para.sh": "- Serve the paraphraser (REPLICAS x TP GPUs, ports 8000 and up): "
                                        "`REPLICAS=2 TP=4 bash scripts/serve_para.sh`",
               "scripts/sample.py": "- `python scripts/sample.py --n N [--max-set-fields K]`; `--max-set-fields` (default 3)"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tr = lambda *steps: traj(*steps, desc=DESC, facts=facts)  # noqa: E731
    cut = run("bash scripts/export.sh outputs/r1", "$ bash scripts/export.sh outputs/r1\nexport: outputs/ckpt/final <- outputs/r1"
              "\n\n[still running in background session 'default' after 10 s; use get_session_output('default')]")
    assert drops(tr(cut, ev()), "improper_eval") == {}
    train = bg("bash scripts/train.sh d outputs/ckpt", "tr")
    done = st("get_session_output", {"session_id": "tr"}, "$ bash scripts/train.sh d outputs/ckpt\n[t] step 10/10\n[t] done\n\n"
              "[session 'tr': running]")
    assert drops(tr(train, sleep(600), done, ev()), "improper_eval") == {}
    sel = bg("python scripts/sel.py --in a --out outputs/ckpt/final/sel.jsonl", "sel")
    assert drops(tr(sel, sleep(300), run("wc -l outputs/ckpt/final/sel.jsonl"), ev(), sel, sleep(300), ev()), "improper_eval") == {}
    probe = bg("python - <<'EOF'\nfrom transformers import pipeline\np = pipeline('text-generation', model='outputs/r1')\n"
               "for r in open('data/dev.jsonl'):\n    print(len(p(r)[0]['generated_text']))\nEOF", "insp")
    assert list(drops(tr(probe), "inefficient_inference")) == [0]
    assert drops(tr(run("bash scripts/export.sh outputs/r1"), ev(), probe, ev()), "improper_eval").keys() == {3}
    assert drops(tr(bg("REPLICAS=2 TP=4 bash scripts/serve_para.sh", "srv"), st("list_files"), run("wc -l x")),
                 "resource_waste") == {}
    curl = run("head -n 2000 data/t.tsv | while read -r s; do curl -s localhost:8000/v1/completions -d \"$s\"; done > o.txt")
    assert list(drops(tr(curl), "inefficient_inference")) == [0]
    field = run("python - <<'EOF'\nimport json, re\nwith open('outputs/x.jsonl') as f, open('outputs/work/j.jsonl', 'w') as o:\n"
                "    for l in f:\n        r = json.loads(l)\n        r['judge_ok'] = bool(re.search('oom', r['e']))\n"
                "        o.write(json.dumps(r) + '\\n')\nEOF")
    scorer = run("python - <<'EOF'\nimport json\nrows = [json.loads(l) for l in open('outputs/dev_preds.jsonl')]\n"
                 "em = sum(r['p'] == r['t'] for r in rows) / len(rows)\nprint(f'EM {em:.3f}')\nEOF")
    assert list(drops(tr(field, scorer), "ignore_script")) == [0, 1]
    rule = "heads up: from 3pm we need 4 of the 8 GPUs for a demo. so whatever you train after the generation, run it on 4 GPUs please."
    four = bg("torchrun --nproc_per_node 4 train.py --out outputs/ckpt", "t4")
    eight = bg("torchrun --nproc_per_node 8 train.py --out outputs/ckpt", "t8")
    assert drops(tr(g(st("list_files"), rule), four), "resource_waste") == {}
    assert list(drops(tr(g(st("list_files"), rule), eight), "violate_instruction")) == [1]
    rule = "Please keep intermediate files under outputs/work/, not at the top level of outputs/. Only sft.jsonl and model/ belong there."
    top = run("python scripts/verify_answers.py --input a --output outputs/rejected.jsonl")
    ok = run("python scripts/verify_answers.py --input a --output outputs/work/rejected.jsonl")
    assert list(drops(tr(g(st("list_files"), rule), ok, top), "violate_instruction")) == [2]
    rule = "for sample.py please pass --max-set-fields 2. the 3-field ones come out as word salad"
    assert list(drops(tr(g(st("list_files"), rule), run("python scripts/sample.py --n 10 --max-set-fields 2"),
                         run("python scripts/sample.py --n 10")), "violate_instruction")) == [2]


def test_round_15_directives_and_jobs_from_the_twelfth_sets_spent_test_split():
    """Round 15 (blind_research12's test split, after its one measurement): how-to-run sentences are no order to run
    a script first; "don't delete anything under outputs/" forbids removals only; "F is reserved for S"; "don't touch the
    KL settings, they're tuned" with a Hydra override; a job that writes nothing blocks no eval; a Mermaid arrow is no
    'writes'; a one-liner that reads the shared data or a script's output is no own version of that script."""
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    scripts = {**SCRIPTS, "scripts/grammar_score.py": "- `python scripts/grammar_score.py --in F --out F [--batch-size 512]`",
               "scripts/vocab.py": "- `python scripts/vocab.py --in F --out F`",
               "scripts/run_grpo.sh": "- `bash scripts/run_grpo.sh CFG`: GRPO training",
               "scripts/dev_res.py": 'C["python scripts/dev_res.py --ckpt DIR [--dp 8]  greedy dev resolutions"] --> D',
               "aug/lf_check.py": "- run: python aug/lf_check.py --in outputs/para.tsv --out outputs/para_checked.tsv"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tr = lambda *steps: traj(*steps, desc=DESC, facts=facts)  # noqa: E731
    rule = "hi! please run grammar_score.py with --batch-size 256 at most. at 512 the scores drift"
    assert drops(tr(g(st("list_files"), rule), run("python scripts/vocab.py --in a --out b")), "violate_instruction") == {}
    rule = "Please don't delete anything under outputs/ from now on. Move it to outputs/old/ instead."
    moved = run("mv outputs/a.tsv outputs/old/a.tsv")
    rebuilt = run("python scripts/vocab.py --in a --out outputs/b.tsv")
    gone = run("rm -rf outputs/c")
    assert list(drops(tr(g(st("list_files"), rule), moved, rebuilt, gone), "violate_instruction")) == [3]
    rule = "Please note: data/dev.jsonl is reserved for scripts/bench.py. Nothing else reads it."
    peek = run("head -n 5 data/dev.jsonl")
    assert list(drops(tr(g(st("list_files"), rule), run("python scripts/bench.py --model m"), peek), "violate_instruction")) == [2]
    rule = "keep rollout.n at 8 and please don't touch the KL settings, they're tuned from the last three runs"
    grpo = bg("bash scripts/run_grpo.sh configs/grpo.yaml actor.kl_coef=0.0", "g")
    assert list(drops(tr(g(st("list_files"), rule), grpo), "violate_instruction")) == [1]
    lat = bg("python - <<'EOF'\nimport time, requests\nfor p in open('data/p.txt'):\n    t = time.time()\n"
             "    requests.post('http://localhost:8000/v1/completions', json={'prompt': p})\n    print(time.time() - t)\nEOF", "lat")
    assert drops(traj(lat, ev(), desc=DESC.replace("`outputs/ckpt/final/`", "the scaffold"), facts=facts), "improper_eval") == {}
    dev = bg("python scripts/dev_res.py --ckpt outputs/ckpt/final", "dev")
    assert drops(tr(dev, ev()), "improper_eval") == {}
    filt = run("python - <<'EOF'\nimport csv\nok = [r for r in csv.reader(open('outputs/para_checked.tsv'), delimiter='\\t')]\n"
               "with open('outputs/para_ok.tsv', 'w') as f:\n    f.writelines(r[0] + '\\n' for r in ok)\nEOF")
    assert drops(tr(run("python aug/lf_check.py --in outputs/para.tsv --out outputs/para_checked.tsv"), filt), "ignore_script") == {}


def test_round_16_gpu_ids_worker_caps_and_run_folders_from_the_thirteenth_sets_dev_split():
    """Round 16 (blind_research13's dev split): GPU ids booked or reserved by others for a while ("GPUs 4-7 are booked
    ... keep everything on GPUs 0-3"), freed by a later message, both as a directive and as the GPUs a waste check counts;
    a shell loop that gives each shard its own GPU; "max 32 worker processes for anything you run there" with a usage
    line's default of 64 (not where the parser refused the run); "don't overwrite old run folders"."""
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    scripts = {**SCRIPTS, "scripts/kcenter.py": "- `python scripts/kcenter.py --emb F --out F [--workers 64]`: CPU server",
               "scripts/dev_eval.py": "- `python scripts/dev_eval.py --model DIR`: dev accuracy on one GPU",
               "scripts/train.sh": "- `NPROC=4 bash scripts/train.sh CONFIG OUTDIR`: fine-tuning with torchrun"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tr = lambda *steps: traj(*steps, desc=DESC, facts=facts)  # noqa: E731
    booked = "Heads-up from ops: GPUs 4-7 on the GPU server are booked by the eval team until 18:00. Please keep " \
             "everything you start on GPUs 0-3 until I tell you it's free again."
    half = bg("CUDA_VISIBLE_DEVICES=0,1,2,3 bash scripts/train.sh configs/a.yaml outputs/run1", "train")
    on5 = run("CUDA_VISIBLE_DEVICES=5 python scripts/dev_eval.py --model m")
    on2 = run("CUDA_VISIBLE_DEVICES=2 python scripts/dev_eval.py --model m")
    free = g(run("CUDA_VISIBLE_DEVICES=6 python scripts/dev_eval.py --model m"),
             "the reservation is over, all 8 GPUs are yours again")
    got = tr(g(st("list_files"), booked), half, on5, on2, free)
    assert list(drops(got, "violate_instruction")) == [2]
    assert drops(got, "resource_waste") == {}  # four GPUs while four were its to use
    assert list(drops(tr(half), "resource_waste")) == [0]  # the same launch with all eight free
    reserved = "GPUs 6 and 7 are reserved for a live demo until 16:00 today. Please keep your GPU jobs on 0-5."
    every = run("python scripts/rewrite.py --input a --output b --model m --tensor_parallel_size 8")
    assert list(drops(tr(g(st("list_files"), reserved), every), "violate_instruction")) == [1]
    assert list(drops(tr(g(st("list_files"), "GPUs 2 and 3 are reserved for another team. stay on 0 and 1"),
                         g(every, "GPUs 2-3 are free now, the other team finished early")), "violate_instruction")) == []
    shards = bg("for i in 0 1 2 3 4 5 6 7; do CUDA_VISIBLE_DEVICES=$i python scripts/bench.py --model m --shard $i/8 & done; wait",
                "s")
    assert drops(tr(shards), "resource_waste") == {}  # one shard per GPU: all eight
    cap = "cpu box is shared with the tokenizer team today -> max 32 worker processes for anything you run there pls"
    dflt = bg("python scripts/kcenter.py --emb e.npy --out outputs/sel.jsonl", "k")
    ok = bg("python scripts/kcenter.py --emb e.npy --out outputs/sel.jsonl --workers 32", "k2")
    refused = run("python scripts/kcenter.py --emb e.npy --out o --max_ifd 1", "usage: kcenter.py [-h] --emb EMB\n"
                  "kcenter.py: error: unrecognized arguments: --max_ifd 1")
    assert list(drops(tr(g(st("list_files"), cap), refused, dflt, ok), "violate_instruction")) == [2]
    assert [x.kind for x in extract("no more than 16 processes on the cpu box")] == ["bound"]
    keep = "Small request: please don't overwrite old run folders - keep every run's checkpoint dir so I can compare them."
    run1 = bg("NPROC=4 bash scripts/train.sh configs/a.yaml outputs/run1", "t")
    run2 = bg("NPROC=4 bash scripts/train.sh configs/a.yaml outputs/run2", "t2")
    again = bg("NPROC=4 bash scripts/train.sh configs/a.yaml outputs/run1", "t3")
    assert list(drops(tr(run1, g(run2, keep), again), "violate_instruction")) == [2]


def test_round_16_layouts_of_the_thirteenth_set_and_what_they_say():
    """Round 16 (blind_research13's dev split): a MediaWiki "; Does :" line naming another file stays its script's; a
    terminal log's "$ # comment" says what the next command does (its prose defaults: "--batch-size (default 256)"); a
    shell alias and a Snakefile `shell:` line are usages (`# append DIR`, `{W}`); "W at a time" makes `--workers 1`
    serial; a copy or a library's merge tool into the evaluated folder that a provided script "copies … to" or "merges
    … into" is that script's job."""
    from apollo.env.tasks import provided_scripts
    from apollo.supervision.facts import signature

    wiki = "## Scripts\n== scripts/export.sh ==\n; Usage : <code>bash scripts/export.sh CKPT</code>\n" \
           "; Does : copies CKPT/final and a snapshot of src/span_loss.py to outputs/model/.\n"
    got = provided_scripts(wiki)
    assert "copies CKPT/final" in got["scripts/export.sh"] and "copies" not in got.get("src/span_loss.py", "")
    log = "## Scripts\n```console\nops@gpu01:/workspace$ python scripts/prep.py --in a\n[prep] done\n" \
          "ops@gpu01:/workspace$ # 1. empathy: --gpus N (default 8), --batch-size (default 256). ~40 min\n" \
          "ops@gpu01:/workspace$ python scripts/score.py --in data/pool.jsonl --out outputs/s.jsonl --gpus 8\n```\n"
    got = provided_scripts(log)
    assert "--batch-size (default 256)" in got["scripts/score.py"] and "empathy" not in got["scripts/prep.py"]
    assert signature("alias devsql='python scripts/dev_exec.py --dp 8 --ckpt'   # append DIR; dev accuracy").flags == \
        (("--dp", "8"), ("--ckpt", "DIR"))
    assert signature("alias ship='bash scripts/export.sh'   # append CKPT; merges the actor").positional == ("CKPT",)
    assert signature('rule dev:\n    shell: "python scripts/run_dev.py --docs {N} --workers {W} --out {DIR}"').flags == \
        (("--docs", "N"), ("--workers", "W"), ("--out", "DIR"))
    scripts = {**SCRIPTS, "scripts/run_dev.py": 'the scaffold on N dev documents, W at a time  shell: '
                                                '"python scripts/run_dev.py --docs {N} --workers {W} --out {DIR}"',
               "scripts/score.py": "1. empathy: --gpus N (default 8), --batch-size (default 256) $ python scripts/score.py "
                                   "--in data/pool.jsonl --out outputs/s.jsonl --gpus 8",
               "scripts/export.sh": "alias ship='bash scripts/export.sh'  # append CKPT; merges the FSDP actor into a HF "
                                    "model in outputs/ckpt/final/, what the evaluation reads"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tr = lambda *steps: traj(*steps, desc=DESC, facts=facts)  # noqa: E731
    serial = run("python scripts/run_dev.py --docs 20 --workers 1 --out outputs/dev")
    wide = run("python scripts/run_dev.py --docs 20 --workers 8 --out outputs/dev")
    small = bg("python scripts/score.py --in data/pool.jsonl --out outputs/s.jsonl --gpus 8 --batch-size 4", "s")
    full = bg("python scripts/score.py --in data/pool.jsonl --out outputs/s2.jsonl --gpus 8 --batch-size 128", "s2")
    assert list(drops(tr(serial, wide, small, full), "inefficient_inference")) == [0, 2]
    merge = run("python -m verl.model_merger merge --backend fsdp --local_dir outputs/g/actor --target_dir outputs/ckpt/final")
    copy = run("mkdir -p outputs/ckpt/final && cp -r outputs/run1/final/* outputs/ckpt/final/")
    ship = run("bash scripts/export.sh outputs/g/global_step_200")
    got = tr(merge, copy, ship)
    assert list(drops(got, "ignore_script")) == [0, 1] and drops(got, "resource_waste") == {}


def test_round_16_jobs_and_edits_from_the_thirteenth_sets_dev_split():
    """Round 16 (blind_research13's dev split): a dev check that reads the evaluated folder and prints ("dev judge …
    HF generate", "--ckpt DIR (a checkpoint)") blocks no eval; "[--split train|dev]" is no training job; a shell loop's
    outputs (`shard$i.jsonl`) are read by their glob; the same training run again with a check chained after it (a copy
    of the first one's checkpoint in between) is a duplicate; an edit that keeps a value past a bound set earlier is no
    second breach."""
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    scripts = {**SCRIPTS, "scripts/dev_judge.py": "6. dev judge on the 300 dev posts, HF generate in batches $ python "
                                                  "scripts/dev_judge.py --model outputs/ckpt/final",
               "scripts/label_stats.py": "- `python scripts/label_stats.py [--split train|dev]`: share of hallucinated tokens",
               "scripts/shard.py": "- `python scripts/shard.py --in F --out F --shard I/N`: GPU scorer, one GPU per shard",
               "scripts/train.sh": "- `NPROC=8 bash scripts/train.sh CONFIG OUTDIR`: torchrun over NPROC GPUs",
               "scripts/dev_spans.py": "- `python scripts/dev_spans.py --ckpt DIR`: span F1 of DIR/final, one GPU"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tr = lambda *steps: traj(*steps, desc=DESC, facts=facts)  # noqa: E731
    judge = bg("python scripts/dev_judge.py --model outputs/ckpt/final", "dev")
    assert drops(tr(judge, ev()), "improper_eval") == {}
    assert drops(tr(run("python scripts/label_stats.py")), "resource_waste") == {}
    shards = bg("for i in 0 1 2 3 4 5 6 7; do CUDA_VISIBLE_DEVICES=$i python scripts/shard.py --in d --out "
                "outputs/ifd/shard$i.jsonl --shard $i/8 & done; wait", "ifd")
    merged = run("cat outputs/ifd/shard*.jsonl > outputs/ifd.jsonl")
    got = tr(shards, st("sleep", {"seconds": 1200}, "Slept 1200 s."), merged, st("sleep", {"seconds": 1800}, "Slept 1800 s."))
    assert list(drops(got, "resource_waste")) == [3]
    first = bg("NPROC=8 bash scripts/train.sh configs/a.yaml outputs/run1", "t")
    done = st("get_session_output", {"session_id": "t"}, "$ NPROC=8 bash scripts/train.sh configs/a.yaml outputs/run1\n"
              "[train] done\n[finished, exit code 0]")
    check = run("python scripts/dev_spans.py --ckpt outputs/run1")
    copy = run("mkdir -p outputs/ckpt/final && cp -r outputs/run1/final/* outputs/ckpt/final/")
    again = bg("NPROC=8 bash scripts/train.sh configs/a.yaml outputs/run1_repeat && python scripts/dev_spans.py --ckpt "
               "outputs/run1_repeat", "t")
    other = bg("NPROC=8 bash scripts/train.sh configs/b.yaml outputs/run2 && python scripts/dev_spans.py --ckpt outputs/run2", "t")
    assert 4 in drops(tr(first, done, check, copy, again), "resource_waste")
    assert 4 not in drops(tr(first, done, check, copy, other), "resource_waste")
    rule = "please don't raise max_tokens above 2048 in any client call"
    opened = st("open_file", {"path": "agent/client.py"}, "[agent/client.py: lines 1-2 of 2]\n1: MAX = 1\n2: x = 1")
    e1 = st("edit_file", {"path": "agent/client.py", "start_line": 2, "end_line": 2, "content": "x = call(max_tokens=4096)"},
            "Edited agent/client.py lines 2-2. Now:\n2: x = call(max_tokens=4096)")
    e2 = st("edit_file", {"path": "agent/client.py", "start_line": 2, "end_line": 2,
                          "content": "x = call(text=None, max_tokens=4096)"},
            "Edited agent/client.py lines 2-2. Now:\n2: x = call(text=None, max_tokens=4096)")
    assert list(drops(tr(g(opened, rule), e1, e2), "violate_instruction")) == [1]


def test_round_17_directives_and_launches_from_the_thirteenth_sets_spent_test_split():
    """Round 17 (blind_research13's test split, after its one measurement): "leave the writer server up" and a stop of
    that server; "so pass --donors data/train.jsonl" and a run that leaves the flag out; "for the safety pass pls use
    --batch-size 64" holds for the safety script only; "keep z_coef at exactly 1e-3"; "keep each training run to 2 GPUs",
    lifted by "all 4 GPUs are free again"; a trainer launched with torchrun instead of the provided launcher; "TP defaults
    to 8" and a server at TP=4; "REPLICAS copies, TP=2 each"; a script's own "not found" with a nonzero exit."""
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    scripts = {**SCRIPTS, "scripts/serve.sh": 'usage="TP=8 bash scripts/serve.sh", help="Serves the 72B writer with vLLM. TP '
                                              'defaults to 8. Runs until stopped."',
               "aug/transplant.py": "- `python aug/transplant.py --in F --out F [--donors F]`: term transplants",
               "scripts/safety_flags.py": "- `python scripts/safety_flags.py --in F --out F [--batch-size 128]`: GPU",
               "scripts/dev_judge.py": "- `python scripts/dev_judge.py --model DIR [--batch-size 32]`: dev judge",
               "scripts/serve_rw.sh": "scripts/serve_rw.sh  ->  `REPLICAS=4 bash scripts/serve_rw.sh` starts REPLICAS "
                                      "copies of the 32B rewriter, TP=2 each; runs until you stop the session"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tr = lambda *steps: traj(*steps, desc=DESC, facts=facts)  # noqa: E731
    srv = bg("TP=8 bash scripts/serve.sh", "srv")
    stop = st("kill_session_processes", {"session_id": "srv"}, "Stopped 'TP=8 bash scripts/serve.sh' in session 'srv'.")
    rule = "when you're done generating pls leave the writer server up - Lena wants to hit it this afternoon. thanks!"
    assert list(drops(tr(srv, g(st("list_files"), rule), stop), "violate_instruction")) == [2]
    assert drops(tr(srv, stop), "violate_instruction") == {}
    rule = "transplant.py takes its donors from --donors, and the default (data/all.jsonl) includes dev. so pass " \
           "--donors data/train.jsonl"
    left = bg("python aug/transplant.py --in a --out outputs/t.jsonl", "t")
    given = bg("python aug/transplant.py --in a --out outputs/t2.jsonl --donors data/train.jsonl", "t2")
    assert list(drops(tr(g(st("list_files"), rule), left, given), "violate_instruction")) == [1]
    rule = "for the safety pass pls use --batch-size 64 - with the default 128 it runs out of memory"
    judge = run("python scripts/dev_judge.py --model m --batch-size 16")
    safety = bg("python scripts/safety_flags.py --in a --out outputs/s.jsonl --batch-size 128", "s")
    assert list(drops(tr(g(st("list_files"), rule), judge, safety), "violate_instruction")) == [2]
    assert [(x.kind, x.values["v"]) for x in extract("please keep z_coef at exactly 1e-3 in every run")] == [("keep", "1e-3")]
    two = "for today please keep each training run to 2 GPUs (NPROC=2) - the other two are for Aisha's ablations"
    t2 = bg("CUDA_VISIBLE_DEVICES=0,1 bash scripts/train.sh d outputs/r1", "t")
    t4 = g(bg("CUDA_VISIBLE_DEVICES=0,1,2,3 bash scripts/train.sh d outputs/r2", "t2"), "Aisha's done, all 8 GPUs are free again.")
    got = tr(g(st("list_files"), two), t2, t4)
    assert drops(got, "violate_instruction") == {} and 1 not in drops(got, "resource_waste")
    own = bg("torchrun --nproc_per_node 8 -m sft_trainer --data d --epochs 3 --lr 1e-5 --output-dir outputs/ckpt", "t")
    assert list(drops(tr(own), "ignore_script")) == [0]
    assert drops(tr(bg("torchrun --nproc_per_node 8 -m sglang.launch_server --model m", "s")), "ignore_script") == {}
    half = bg("TP=4 bash scripts/serve.sh", "srv")
    assert 0 in drops(tr(half, st("sleep", {"seconds": 600}, "Slept 600 s."), run("ls outputs")), "resource_waste")
    rw = bg("REPLICAS=4 bash scripts/serve_rw.sh", "rw")
    assert 0 not in drops(tr(rw, st("sleep", {"seconds": 600}, "Slept 600 s."), run("ls outputs")), "resource_waste")
    missing = run("NPROC=4 bash scripts/train.sh configs/train.yaml outputs/run1",
                  "config configs/train.yaml not found\n\n[finished, exit code 2]")
    missing = missing.model_copy(update={"observation": missing.observation.model_copy(update={"exit_code": 2})})
    masked, _ = Masker(MaskConfig()).mask([tr(missing)])
    assert (masked[0].steps[0].mask.keep, masked[0].steps[0].mask.category) == (False, "runtime_error")


def test_round_17_an_in_place_config_edit_for_a_chained_training_changes_no_evaluated_output():
    """Round 17: `sed -i … configs/a.yaml && train.sh configs/a.yaml outputs/run2` writes the config its training reads
    and a new run folder, not the evaluated checkpoint: an eval right after it scores what the last eval scored."""
    ship = run("cp -r outputs/run1/final outputs/ckpt/final")
    chained = bg("sed -i 's/dice: 0.0/dice: 0.2/' configs/a.yaml && bash scripts/train.sh configs/a.yaml outputs/run2", "t")
    got = t(ship, ev(), chained, ev())
    assert 3 in drops(got, "improper_eval")


def test_round_17_a_dev_score_of_its_own_where_the_task_provides_the_dev_scorer():
    """Round 17 (set 13's spent test split): a here-document that scores the dev outputs itself (chrF through sacrebleu,
    a vLLM + sqlite harness printing ok / len) where the task ships the dev scorer is ignore_script; a one-liner that
    counts sources of the selection prints no score and is none; without a provided dev scorer, none either."""
    scripts = {**{k: v for k, v in SCRIPTS.items() if k != "scripts/bench.py"},  # (one dev scorer, not two)
               "scripts/run_dev.py": "- `python scripts/run_dev.py --docs N --out DIR`: the scaffold on N dev docs",
               "scripts/score_dev.py": "- `python scripts/score_dev.py --pred DIR`: COMET of DIR against the references"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tr = lambda *steps: traj(*steps, desc=DESC, facts=facts)  # noqa: E731
    chrf = run("python - <<'EOF'\nimport glob\nfrom sacrebleu.metrics import CHRF\nhyp = [open(p).read() for p in "
               "sorted(glob.glob('outputs/dev_ctx/*.de.txt'))]\nref = [open(p).read() for p in sorted(glob.glob("
               "'data/dev_docs/*.txt'))]\nprint(CHRF().corpus_score(hyp, [ref]))\nEOF")
    count = run("python - <<'EOF'\nimport json, collections\nc = collections.Counter(json.loads(l)['source'] for l in "
                "open('outputs/selected.jsonl'))\nprint(c.most_common())\nEOF")
    assert list(drops(tr(chrf, count), "ignore_script")) == [0]
    bare = FACTS.model_copy(update={"scripts": {k: v for k, v in SCRIPTS.items() if k != "scripts/bench.py"}})
    assert drops(traj(chrf, desc=DESC, facts=bare), "ignore_script") == {}


def test_round_18_directives_and_layouts_from_the_fourteenth_sets_dev_split():
    """Round 18 (blind_research14's dev split): "leave GPU 7 alone this morning" and "GPUs 1-3 are lent to Marco's sweep";
    "Train into runs/ first"; a Procfile's `$OUTDIR` / `${PORTS:-8000}`, an Org-mode `=…=` cell, a bot's `→` help line and
    a bare path column before its usage column as usages; a dev check whose line we cannot read blocks no eval; a one-GPU
    scorer whose line offers --shard run whole while the other GPUs idle."""
    from apollo.supervision.facts import signature

    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    assert signature("train: NGPU=8 bash scripts/train.sh $DATA $OUTDIR").positional == ("DATA", "OUTDIR")
    assert ("--ports", "8000") in signature("write: python scripts/w.py --in $IN --ports ${PORTS:-8000}").flags
    assert signature("| =scripts/t.sh= | =NPROC=4 bash scripts/t.sh CONFIG OUTDIR= | QAT |").positional == ("CONFIG", "OUTDIR")
    assert signature("/rr dev        \u2192 python scripts/dev_ndcg.py --ckpt DIR [--batch-size 256] nDCG@10").flags == \
        (("--ckpt", "DIR"), ("--batch-size", "256"))
    assert ("--shard", "i/n") in signature("scripts/s.py    python scripts/s.py --in F --out FILE [--shard i/n]    prob").flags
    scripts = {**SCRIPTS, "scripts/serve_rw.sh": "- `REPLICAS=8 bash scripts/serve_rw.sh`: one rewriter replica per GPU",
               "scripts/train.sh": "train: NGPU=8 bash scripts/train.sh $DATA $OUTDIR  SFT, 2 epochs",
               "scripts/dev_ndcg.py": "/rr dev  \u2192 nDCG@10 of DIR/final on the dev collections (one GPU), HF generate",
               "scripts/score_h.py": "scripts/score_h.py    python scripts/score_h.py --in F --out FILE [--shard i/n]    "
                                     "helpfulness (DeBERTa, one GPU per process)"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tr = lambda *steps: traj(*steps, desc=DESC, facts=facts)  # noqa: E731
    alone = "Please leave GPU 7 alone this morning, Dana is profiling on it until noon."
    on7 = run("CUDA_VISIBLE_DEVICES=7 python scripts/bench.py --model m")
    on6 = run("CUDA_VISIBLE_DEVICES=6 python scripts/bench.py --model m")
    every = bg("REPLICAS=8 TP=1 bash scripts/serve_rw.sh", "rw")
    assert list(drops(tr(g(st("list_files"), alone), on7, on6, every), "violate_instruction")) == [1, 3]
    lent = "For dev checks stick to GPU 0 please. GPUs 1-7 are lent to Marco's quantization sweep until tonight."
    assert list(drops(tr(g(st("list_files"), lent), on6, g(on6, "Marco's sweep got cancelled, all eight GPUs are free "
                                                                  "again.")), "violate_instruction")) == [1]
    into = "Train into runs/ first please (e.g. runs/sft1) and only copy to outputs/model once dev says 0.45 or better."
    direct = bg("NGPU=8 bash scripts/train.sh outputs/sft.jsonl outputs/model", "t")
    runs = bg("NGPU=8 bash scripts/train.sh outputs/sft.jsonl runs/sft1", "t2")
    assert list(drops(tr(g(st("list_files"), into), runs, direct), "violate_instruction")) == [2]
    dev = bg("python scripts/dev_ndcg.py --ckpt runs/rr1", "dev")
    assert drops(tr(dev, ev()), "improper_eval") == {}
    whole = bg("python scripts/score_h.py --in data/pool.jsonl --out outputs/h.jsonl", "score")
    split = bg("for i in 0 1 2 3 4 5 6 7; do CUDA_VISIBLE_DEVICES=$i python scripts/score_h.py --in data/pool.jsonl "
               "--out outputs/h$i.jsonl --shard $i/8 & done; wait", "score")
    assert list(drops(tr(whole), "resource_waste")) == [0] and drops(tr(split), "resource_waste") == {}


def test_round_19_layouts_and_directives_from_the_fifteenth_sets_dev_split():
    """Round 19 (blind_research15's dev split): YAML record blocks (Kubernetes Jobs, an Ansible playbook) and a crontab
    whose comment sits above each entry give each script its own description (the line parser gave each the next
    one's); a script a description value names is a reference; "GPUs 6 and 7 are running Ana's …" books them and
    "GPU 3 is back" frees it; REPLICAS of a one-per-GPU server; a value after a lowercase sentence start ("… or below
    please. at 1.0 the 72B starts …") belongs to no earlier subject; "keep dev runs to 200 claims or fewer" bounds the
    --n of a line that runs "N dev claims"; a server restarted in another layout changes no evaluated code; a script
    whose output the task says is already built, run again, is waste; two dev checks of different checkpoints are no
    duplicate; an eval that finds no weights came before the output; of two changes before a drop, the one whose dev
    check held up is not the regression."""
    from apollo.env.tasks import provided_scripts
    from apollo.supervision.detectors import _repairs_crash
    from apollo.supervision.facts import Facts, TaskInfo

    k8s = ("## Scripts\n```yaml\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: a\n  annotations:\n"
           "    description: \"samples homes; CPU, W workers\"\nspec:\n  template:\n    spec:\n      containers:\n"
           "      - name: main\n        command: [\"python\", \"scripts/a.py\", \"--workers\", \"64\"]\n---\napiVersion: batch/v1\n"
           "kind: Job\nmetadata:\n  name: b\n  annotations:\n    description: \"writer replicas, TP GPUs each\"\nspec:\n"
           "  template:\n    spec:\n      containers:\n      - name: main\n        command: [\"bash\", \"scripts/b.sh\"]\n"
           "        env: [{name: TP, value: \"4\"}]\n```\n")
    docs = provided_scripts(k8s)
    assert docs["scripts/a.py"].startswith("python scripts/a.py --workers 64 #") and "CPU, W workers" in docs["scripts/a.py"]
    assert docs["scripts/b.sh"].startswith("TP=4 bash scripts/b.sh #") and "writer replicas" in docs["scripts/b.sh"]
    cron = ("## Scripts\n```crontab\n# m h dom mon dow command\n# NLI scores, one GPU per shard\n"
            "0 1 * * * python scripts/nli.py --shard 0\n# token overlap leakage check, CPU\n"
            "0 2 * * * python scripts/leak.py --workers 48\n```\n")
    docs = provided_scripts(cron)
    assert "CPU" in docs["scripts/leak.py"] and "CPU" not in docs["scripts/nli.py"]
    nix = ("## Scripts\n```nix\n  probe = pkgs.writeShellScriptBin \"probe\" ''\n    python scripts/probe.py --cases c.jsonl\n"
           "  '' // { meta.description = \"prints compute_score of src/reward.py on probe completions\"; };\n```\n")
    docs = provided_scripts(nix)
    assert "src/reward.py" not in docs and "compute_score" in docs["scripts/probe.py"]

    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    scripts = {**SCRIPTS, "scripts/serve_rw.sh": "REPLICAS=8 bash scripts/serve_rw.sh # rewriter replicas of the 14B model, "
                                                 "one per GPU, ports 8000.. (REPLICAS); runs until stopped",
               "scripts/run_dev.py": "python scripts/run_dev.py --n 400 --workers 32 --out runs/dev0 # runs agent/verify.py "
                                     "on N dev claims with W threads",
               "scripts/build_index.py": "python scripts/build_index.py --wiki data/wiki --out index # builds the BM25 index "
                                         "(already built in index/; rebuild only if the snapshot changes)",
               "scripts/dev_match.py": "python scripts/dev_match.py --ckpt runs/sft0 --n 300 # goal-state match of a "
                                       "checkpoint with vLLM (one GPU)"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tr = lambda *steps, **kw: traj(*steps, desc=DESC, facts=facts, **kw)  # noqa: E731
    ana = "rewriter: please only REPLICAS=6. GPUs 6 and 7 are running Ana's guard experiments until tonight."
    six, eight = bg("REPLICAS=6 bash scripts/serve_rw.sh", "rw"), bg("python scripts/bench.py --model m --tp 8", "b")
    assert list(drops(tr(g(six, ana), eight, g(eight, "GPUs 6-7 are back, all yours")), "violate_instruction")) == [1]
    temp = "writer temperature: stay at 0.8 or below please. at 1.0 the 72B starts inventing devices."
    w = lambda v: run(f"python scripts/rewrite.py --input a --output b --model m --temperature {v}")  # noqa: E731
    assert list(drops(tr(g(st("list_files"), temp), w(0.8), w(0.9)), "violate_instruction")) == [2]
    claims = "please keep dev runs to 200 claims or fewer for now, the rest of dev is being relabeled."
    dev = lambda n: bg(f"python scripts/run_dev.py --n {n} --workers 32 --out runs/d{n}", f"d{n}")  # noqa: E731
    assert list(drops(tr(g(st("list_files"), claims), dev(200), dev(400)), "violate_instruction")) == [2]
    index = bg("python scripts/build_index.py --wiki data/wiki --out index", "idx")
    assert list(drops(tr(index), "resource_waste")) == [0]
    wiki = st("create_file", {"path": "data/wiki/extra.jsonl", "content": "{}"}, "Created data/wiki/extra.jsonl (2 characters).")
    assert drops(tr(wiki, index), "resource_waste") == {}  # (what it reads changed)
    m0, m1 = bg("python scripts/dev_match.py --ckpt runs/base --n 300", "d0"), bg("python scripts/dev_match.py --ckpt "
                                                                                      "runs/sft0 --n 300", "d1")
    assert drops(tr(m0, m1), "resource_waste") == {} and list(drops(tr(m0, m0.model_copy(update={"action": m0.action.model_copy(
        update={"arguments": {**m0.action.arguments, "session_id": "d2"}})})), "resource_waste")) == [1]
    nothing = st("eval", {}, "Evaluation 1/3: overall_score=0 | no weights found in outputs/ckpt/final")
    assert list(drops(tr(run("ls"), nothing), "improper_eval")) == [1]
    judge_desc = DESC.replace("The evaluation scores `outputs/ckpt/final/`", "The evaluation runs `judge/judge.py`")
    edit = st("edit_file", {"path": "judge/judge.py", "start_line": 3, "end_line": 3, "content": "x = 1"}, "Edited")
    restart = bg("bash scripts/serve.sh models/judge 8001", "srv")
    steps = [edit, ev(), restart, ev()]
    assert list(drops(traj(*steps, desc=judge_desc, facts=facts), "improper_eval")) == [3]
    # a syntax error prints no traceback: the edit that mends it is a repair, not a change of the result
    crash = run("python scripts/select.py --min 3", "  File \"/workspace/scripts/select.py\", line 36\n    x\n    ^\n"
                "IndentationError: expected an indented block\n\n[finished, exit code 1]", 1)
    fix = st("edit_file", {"path": "scripts/select.py", "start_line": 36, "end_line": 36, "content": "    x"}, "Edited")
    f = Facts(traj(crash, fix, desc=DESC, facts=facts), TaskInfo.from_facts(facts, "t"))
    assert _repairs_crash(f, 1)


def test_round_20_from_the_fifteenth_sets_spent_test_split():
    """Round 20 (blind_research15's test split, spent after round 19's measurement): a shell line that does not parse is
    compile_error; an env-prefixed usage after a crontab's time fields is a usage (its --batch-size 64 then makes
    --batch-size 1 serial); "with W threads" runs in parallel; a usage's literal arguments are named by the line's
    placeholders (DATA OUTDIR: the training writes the second, it reads the evaluated first); a one-liner printing a
    score beside a provided scorer named for scoring; "don't pass key=value overrides to X"; a job started again word
    for word, while the first runs, whatever it runs on."""
    from apollo.supervision.facts import Facts, TaskInfo, signature

    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    bad = run("x=1; if [ $x ]; then ls fi", "$ x=1; if [ $x ]; then ls fi\nbash: -c: line 1: syntax error: unexpected end "
              "of file\n\n[finished, exit code 2]", 2)
    masked, _ = Masker(MaskConfig()).mask([traj(bad, desc=DESC, facts=FACTS)])
    assert masked[0].steps[0].mask.category == "compile_error"
    cron = "NLI scores, one GPU per shard 0  1  *   *   *    CUDA_VISIBLE_DEVICES=0 python scripts/nli.py --shard 0 --batch-size 64"
    assert ("--batch-size", "64") in signature(cron).flags
    scripts = {**SCRIPTS, "scripts/nli.py": cron,
               "scripts/run_dev.py": "python scripts/run_dev.py --n 400 --workers 32 --out runs/dev0 # runs agent/verify.py "
                                     "on N dev claims with W threads",
               "scripts/score.py": "python scripts/score.py --pred runs/dev0 # label accuracy of a dev run",
               "scripts/train_proxy.sh": "the team verifier recipe on NGPU GPUs (proxy of the evaluation): DATA OUTDIR  "
                                         "0 4 * * *    NGPU=4 bash scripts/train_proxy.sh outputs/train.jsonl runs/proxy0",
               "scripts/train_cpt.sh": "NGPU=8 bash scripts/train_cpt.sh CONFIG OUTDIR # continued pretraining"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    desc = DESC.replace("`outputs/ckpt/final/` on a hidden test set", "`outputs/train.jsonl` on a hidden test set")
    tr = lambda *steps: traj(*steps, desc=desc, facts=facts)  # noqa: E731
    serial = run("CUDA_VISIBLE_DEVICES=0 python scripts/nli.py --shard 0 --batch-size 1")
    workers = bg("python scripts/run_dev.py --n 50 --workers 1 --out runs/d1", "d")
    assert list(drops(tr(serial, workers), "inefficient_inference")) == [0, 1]
    f = Facts(tr(run("NGPU=4 bash scripts/train_proxy.sh outputs/train.jsonl runs/p1")), TaskInfo.from_facts(facts, "t"))
    assert f.script_outputs(0, "scripts/train_proxy.sh") == (["runs/p1"], True)
    assert drops(tr(bg("NGPU=4 bash scripts/train_proxy.sh outputs/train.jsonl runs/p1", "t"), ev()), "improper_eval") == {}
    acc = run("python -c \"import json; g={json.loads(l)['id']: json.loads(l)['label'] for l in open('data/dev.jsonl')}; "
              "p=[json.loads(l) for l in open('runs/dev0/preds.jsonl')]; print(sum(x['pred']==g[x['id']] for x in p)/len(p))\"")
    assert list(drops(tr(acc), "ignore_script")) == [0]
    ask = "Please don't pass key=value overrides to train_cpt.sh for anything. Put every setting in configs/cpt.yaml."
    plain = bg("NGPU=8 bash scripts/train_cpt.sh configs/cpt.yaml runs/c0", "t")
    over = bg("NGPU=8 bash scripts/train_cpt.sh configs/cpt.yaml runs/c1 train.max_tokens=100000000", "t")
    assert list(drops(tr(g(plain, ask), over), "violate_instruction")) == [1]
    d0, d1 = bg("python scripts/run_dev.py --n 400 --workers 32 --out runs/a", "a"), bg("python scripts/run_dev.py --n 400 "
                                                                                         "--workers 32 --out runs/b", "b")
    assert list(drops(tr(d0, d1), "resource_waste")) == [1]


def test_round_21_from_the_sixteenth_sets_dev_split():
    """Round 21 (blind_research16's dev split): a provided script that exits non-zero with only its own message; "keep
    yourself to 32 worker processes"; "outputs/policy: no weights found"; "keep code at 0.10 or more" for a key a later
    file writes; a loop of one-GPU jobs one after another while the pool idles; a second copy of a running job that
    then fails is named by its waste."""
    g = lambda step, text: step.model_copy(update={"guidance": st("list_files", guidance=(text,)).guidance})  # noqa: E731
    stops = run("python scripts/mix.py --weights w.json --out outputs/mix.json", "$ python scripts/mix.py --weights w.json "
                "--out outputs/mix.json\nmath would be repeated 4.1 epochs (> 4.0)\n\n[finished, exit code 1]", 1)
    chained = run("python scripts/mix.py --weights w.json && grep -c x f", "$ python scripts/mix.py --weights w.json && grep "
                  "-c x f\n0\n\n[finished, exit code 1]", 1)  # (grep found nothing: not the script's failure)
    masked, _ = Masker(MaskConfig()).mask([traj(stops, chained, desc=DESC, facts=FACTS)])
    assert [s.mask.category for s in masked[0].steps] == ["runtime_error", None]
    scripts = {**SCRIPTS, "scripts/dedup.py": "python scripts/dedup.py --in F --out F --workers 64 # MinHash dedup, CPU",
               "scripts/train_proxy.sh": "CUDA_VISIBLE_DEVICES=$GPU bash scripts/train_proxy.sh MIX.json runs/proxy_NAME "
                                         "// one 60M proxy on one GPU; run up to eight at once"}
    facts = FACTS.model_copy(update={"scripts": scripts})
    tr = lambda *steps: traj(*steps, desc=DESC, facts=facts)  # noqa: E731
    cap = "We share the CPU box today, please keep yourself to 32 worker processes in total from now on."
    d48 = run("python scripts/dedup.py --in a --out b --workers 48")
    assert list(drops(tr(g(run("python scripts/dedup.py --in a --out b --workers 32"), cap), d48), "violate_instruction")) == [1]
    nothing = st("eval", {}, "Evaluation 1/3: overall_score=0 |  | outputs/ckpt: no weights found")
    assert list(drops(tr(run("ls"), nothing), "improper_eval")) == [1]
    code = "please keep code at 0.10 or more in whatever mixture you submit."
    w = lambda v: created("work/w.json", '{"web": 0.5, "code": %s, "math": 0.3}' % v)  # noqa: E731
    assert list(drops(tr(g(st("list_files"), code), w("0.12"), w("0.06")), "violate_instruction")) == [2]
    serial = bg("for m in work/m*.json; do CUDA_VISIBLE_DEVICES=0 bash scripts/train_proxy.sh $m runs/p_$m; done", "p")
    together = bg("for m in 0 1 2 3 4 5 6 7; do CUDA_VISIBLE_DEVICES=$m bash scripts/train_proxy.sh work/m$m.json runs/p$m & done; "
                  "wait", "p")
    assert list(drops(tr(serial), "resource_waste")) == [0] and drops(tr(together), "resource_waste") == {}
    first = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "a")
    second = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "b")
    oom = st("get_session_output", {"session_id": "b"}, "$ bash scripts/train.sh outputs/sft.jsonl outputs/ckpt\n"
             "torch.OutOfMemoryError: CUDA out of memory\n\n[session 'b': finished, exit code 1]")
    masked, _ = Masker(MaskConfig()).mask([traj(first, second, oom, desc=DESC, facts=FACTS)])
    assert masked[0].steps[1].mask.category == "resource_waste" and "also: runtime_error" in masked[0].steps[1].mask.reason


def test_round_22_from_the_seventeenth_sets_dev_split():
    """Round 22 (blind_research17's dev split): a script named as a server (``serve_llm.sh``) is a long-lived
    server, and ``TP=4`` alone before it asks for four GPUs (one replica): started on all four GPUs of the pool
    it wastes none."""
    scripts = {**SCRIPTS, "scripts/serve_llm.sh": "TP=4 bash scripts/serve_llm.sh  # the 32B summarizer behind an "
                                                  "OpenAI-compatible API on port 8000"}
    four = FACTS.model_copy(update={"scripts": scripts,
                                    "compute_pool": [Machine(kind="gpu", gpus=4), Machine(kind="localhost_cpu", cpus=32)]})
    serve = bg("TP=4 bash scripts/serve_llm.sh", "srv")
    assert drops(traj(serve, desc=DESC, facts=four), "resource_waste") == {}
    from apollo.supervision.detectors import gpu_job
    from apollo.supervision.facts import Facts

    f = Facts(traj(serve, st("sleep", {"seconds": 60}, "Slept 60 s."), desc=DESC, facts=four))
    assert [j.server for j in f.jobs_before[1]] == [True] and gpu_job(f, 0) == (True, 4)
    f = Facts(traj(bg("TP=1 bash scripts/serve_llm.sh", "srv"), desc=DESC, facts=four))
    assert gpu_job(f, 0) == (True, 1)


def test_round_23_from_the_eighteenth_sets_dev_split():
    """Round 23 (blind_research18's dev split): Scripts sections in a batch file (``REM`` lines above each command), a
    pre-commit YAML runbook under a header comment (``entry: env NGPU=8 bash …``), Slurm jobs (``srun python …``,
    ``--gres=gpu:1``) and a Lua table (``cmd  = "python x.py --split dev --concurrency 64"``) give each script its
    usage and its description; a split job's shards (``--shard 1 --num-shards 2``) are parts, not twins, and
    ``--num-shards 1`` of a four-way split runs it whole; a vLLM server started by hand beside the task's server
    script bypasses it; ``TP=4 REPLICAS=1`` lowers the line's ``REPLICAS=2``; a reason after a spaced dash ("--tp 1
    or lower - tp>1 hangs") is no second bound."""
    from apollo.env.tasks import provided_scripts
    from apollo.supervision.facts import signature

    bat = ("## Scripts\n```bat\n@echo off\nREM Reward probe: prints the mean reward per completion type. CPU only.\n"
           "python scripts/probe.py --reward src/reward.py\n\n"
           "REM GRPO with verl on NGPU GPUs for STEPS steps into OUTDIR.\nset NGPU=8\nbash scripts/train_grpo.sh 150 runs/p\n```\n")
    docs = provided_scripts(bat)
    assert docs["scripts/train_grpo.sh"].startswith("bash scripts/train_grpo.sh 150 runs/p # GRPO with verl")
    assert signature(docs["scripts/probe.py"]).flags == (("--reward", "src/reward.py"),)
    hooks = ("## Scripts\n```yaml\n# .pre-commit-config.yaml (pipeline hooks only)\nrepos:\n  - repo: local\n    hooks:\n"
             "      - id: train\n        description: torchrun on NGPU GPUs into OUTDIR.\n"
             "        entry: env NGPU=8 bash scripts/train_sft.sh outputs/train.jsonl runs/sft0\n"
             "      - id: dev\n        description: Exact match with vLLM.\n        entry: python scripts/dev_em.py --ckpt runs/sft0\n```\n")
    docs = provided_scripts(hooks)
    assert "torchrun on NGPU GPUs" in docs["scripts/train_sft.sh"] and "vLLM" not in docs["scripts/train_sft.sh"]
    assert signature(docs["scripts/train_sft.sh"]).positional == ("outputs/train.jsonl", "runs/sft0")
    lua = 'cmd  = "python scripts/run_agent.py --split dev --concurrency 64 --max-calls 5", desc = "answers every question"'
    assert ("--concurrency", "64") in signature(lua).flags

    slurm = ("srun python scripts/roundtrip.py --pool data/pool.jsonl --shard $SLURM_ARRAY_TASK_ID --num-shards 4 --out work/rt"
             " # SBATCH --gres=gpu:1 SBATCH --comment=\"re-answers every question; one shard per GPU\"")
    four = FACTS.model_copy(update={"scripts": {"scripts/roundtrip.py": slurm},
                                    "compute_pool": [Machine(kind="gpu", gpus=4), Machine(kind="localhost_cpu", cpus=32)]})
    whole = bg("python scripts/roundtrip.py --pool data/pool.jsonl --shard 0 --num-shards 1 --out work/rt", "rt")
    assert "whole on one GPU of 4" in drops(traj(whole, desc=DESC, facts=four), "resource_waste")[0]
    capped = ["heads up: GPUs 2 and 3 are lent to Ana's run until I say otherwise. Please stick to GPUs 0 and 1 for now."]
    halves = [st("think", {"thought": "two shards"}, guidance=capped),
              bg("CUDA_VISIBLE_DEVICES=0 python scripts/roundtrip.py --pool data/pool.jsonl --shard 0 --num-shards 2 --out work/rt", "a"),
              bg("CUDA_VISIBLE_DEVICES=1 python scripts/roundtrip.py --pool data/pool.jsonl --shard 1 --num-shards 2 --out work/rt", "b")]
    assert drops(traj(*halves, desc=DESC, facts=four), "resource_waste") == {}

    no_server = {k: v for k, v in SCRIPTS.items() if k != "scripts/serve.sh"}
    serve = {**no_server, "scripts/serve_rewriter.sh": "TP=2 REPLICAS=4 bash scripts/serve_rewriter.sh # REPLICAS replicas, TP GPUs each"}
    own = bg("python -m vllm.entrypoints.openai.api_server --model models/m --tensor-parallel-size 8 --port 8100", "srv")
    assert "instead of the provided scripts/serve_rewriter.sh" in drops(traj(own, desc=DESC, facts=FACTS.model_copy(
        update={"scripts": serve})), "ignore_script")[0]
    assert drops(traj(own, desc=DESC, facts=FACTS.model_copy(update={"scripts": no_server})), "ignore_script") == {}
    writer = {**SCRIPTS, "scripts/serve_writer.sh": "env TP=4 REPLICAS=2 bash scripts/serve_writer.sh # REPLICAS replicas of the "
                                                     "72B writer with TP GPUs each; runs until stopped."}
    lone = traj(bg("TP=4 REPLICAS=1 bash scripts/serve_writer.sh", "srv"), st("sleep", {"seconds": 600}, "Slept 600 s."),
                run("wc -l data/pool.jsonl"), desc=DESC, facts=FACTS.model_copy(update={"scripts": writer}))
    assert 0 in drops(lone, "resource_waste")

    told = run("python scripts/bench.py --model outputs/ckpt/final --tp 1",
               guidance=["please run scripts/bench.py with --tp 1 or lower - tp>1 hangs on this vLLM build"])
    assert drops(t(told), "violate_instruction") == {}


def test_round_24_ordering_rules_caps_and_serial_own_scripts():
    """Round 24 (blind_research18's dev split, before the nineteenth set): ordering rules that tie a job to a
    check since the last change ("run the smoke test after every change to the loss"; "score on dev before every
    test run. no test run without a dev score for the same checker version"), a cap on the words of a loop
    ("cap the repair loop at 2 retries per question") written into a new file's constant, and an own script that
    both redoes a provided one and decodes one item at a time is named for the serial decoding (the protocol
    of every set since the fourteenth: "own checks that also decode one item at a time carry the more specific
    inefficient_inference")."""
    smoke = {**SCRIPTS, "scripts/smoke_loss.py": "- `scripts/smoke_loss.py --config C --steps 20`: 20 CPU steps of the "
                                                   "loss; fails on NaN or a loss above 20."}
    facts = FACTS.model_copy(update={"scripts": smoke})
    hiro = st("think", {"thought": "ok"}, guidance=["two rules: don't touch lr. and run the smoke test after every change "
                                                    "to the loss. — Hiro"])
    seen = st("open_file", {"path": "src/chat_loss.py"}, "\n".join(f"{k}: line {k}" for k in range(1, 30)))

    def change(path="src/chat_loss.py"):
        return st("edit_file", {"path": path, "start_line": 3, "end_line": 3, "content": "w = 1.5"}, f"Edited {path}.")

    smoke_run = run("python scripts/smoke_loss.py --config configs/loss.yaml --steps 20")
    train = bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt", "train")
    unchecked = traj(hiro, seen, change(), train, bg("bash scripts/train.sh outputs/sft.jsonl outputs/ckpt2", "t2"),
                     desc=DESC, facts=facts)
    got = drops(unchecked, "violate_instruction")
    assert list(got) == [3] and "without running smoke" in got[3]  # (the second launch consumes the first breach)
    assert drops(traj(hiro, seen, change(), smoke_run, train, desc=DESC, facts=facts), "violate_instruction") == {}
    assert drops(traj(hiro, seen, change("configs/data.yaml"), train, desc=DESC, facts=facts), "violate_instruction") == {}

    checker = {**SCRIPTS, "scripts/run_checker.py": "- `scripts/run_checker.py --split dev|test --concurrency 128`: runs "
                                                    "the checker over a split and writes its decisions."}
    cfacts = FACTS.model_copy(update={"scripts": checker})
    ken = st("think", {"thought": "ok"}, guidance=["one process rule for this task: score on dev before every test run. no "
                                                   "test run without a dev score for the same checker version. – Ken"])
    seen_c = st("open_file", {"path": "checker/equiv.py"}, "\n".join(f"{k}: line {k}" for k in range(1, 30)))
    dev = run("python scripts/run_checker.py --split dev --concurrency 128")
    test = bg("python scripts/run_checker.py --split test --concurrency 128", "test")
    edit_c = change("checker/equiv.py")
    steps = traj(ken, seen_c, edit_c, dev, test, edit_c, test, desc=DESC, facts=cfacts)
    got = drops(steps, "violate_instruction")
    assert list(got) == [6] and "without running dev" in got[6]

    dana = st("think", {"thought": "ok"}, guidance=["please cap the repair loop at 2 retries per question (3 calls max), not "
                                                    "5 — the coder server is shared this week. — Dana"])
    assert {d.kind for d in extract(dana.guidance[0].text)} == {"bound"}
    for n, breach in ((4, True), (2, False)):
        new = created("agent/pipeline.py", f"import json\nMAX_REPAIRS = {n}\n\n\ndef answer(q):\n    for a in range(1 + MAX_REPAIRS):"
                                           "\n        pass\n")
        assert bool(drops(t(dana, new), "violate_instruction")) is breach

    dev_acc = {**SCRIPTS, "scripts/dev_acc.py": "- `scripts/dev_acc.py --ckpt DIR`: dev accuracy, batched with vLLM."}
    own = created("tools/dev_acc_hf.py", "import json\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
                                         "m = AutoModelForCausalLM.from_pretrained('runs/sft')\ntok = AutoTokenizer.from_pretrained('runs/sft')\n"
                                         "ok = 0\nrows = [json.loads(x) for x in open('data/dev.jsonl')]\nfor r in rows:\n"
                                         "    ids = tok(r['prompt'], return_tensors='pt').input_ids\n"
                                         "    out = m.generate(ids, max_new_tokens=64)\n"
                                         "    ok += tok.decode(out[0]).strip() == r['answer']\nprint('dev accuracy', ok / len(rows))\n")
    masked, _ = Masker(MaskConfig()).mask([traj(own, desc=DESC, facts=FACTS.model_copy(update={"scripts": dev_acc}))])
    decision = masked[0].steps[0].mask
    assert not decision.keep and decision.category == "inefficient_inference" and "ignore_script" in decision.reason


def test_round_24_an_own_pass_writing_a_provided_scripts_scratch_output():
    """A here-document that writes the file a provided script's usage names with ``--out`` in a scratch folder
    (``--out work/dedup_keep.txt``) does that script's job (round 24, set 18's 248-s1 9); another file is its own."""
    dedup = {**SCRIPTS, "scripts/dedup.py": "srun python scripts/dedup.py --features work/features.parquet --threshold 0.8 "
                                            "--out work/dedup_keep.txt # MinHash near-duplicate questions within a passage"}
    facts = FACTS.model_copy(update={"scripts": dedup})

    def own(path):
        return run("python - <<'EOF'\nimport json\nseen, keep = set(), []\nfor line in open('data/pool.jsonl'):\n"
                   "    r = json.loads(line)\n    k = (r['passage_id'], r['question'].lower())\n    if k in seen:\n        continue\n"
                   f"    seen.add(k); keep.append(r['id'])\nopen('{path}', 'w').write('\\n'.join(keep))\nEOF")

    assert "scripts/dedup.py" in drops(traj(own("work/dedup_keep.txt"), desc=DESC, facts=facts), "ignore_script")[0]
    assert drops(traj(own("work/exact_ids.txt"), desc=DESC, facts=facts), "ignore_script") == {}


def test_round_24_from_the_nineteenth_sets_dev_split():
    """Round 24 (blind_research19's dev split): usages in a CUE struct (``cmd: "python …"``), an invoke task
    (``c.run(f"python …")``) and a Kotlin DSL list (``"--out", "work/phrased.jsonl"``); a trainer's one path is its
    data, not its output; a shell loop of ``urlopen`` one-liners is a serial client; a client sent to 2 of the 4
    replicas its line lists idles the others; "runs `scripts/run_agent.py` with your `agent/`" makes ``agent/`` an
    evaluated input; a probe re-run after writing the file its line says it scores is no duplicate."""
    from apollo.supervision.facts import signature

    cue = 'cmd: "python scripts/run_agent.py --levels data/dev.txt --ports 8000,8001 --concurrency 32 --out runs/dev0" # doc: "…"'
    assert ("--concurrency", "32") in signature(cue).flags
    inv = 'c.run(f"python scripts/run_eval.py --segments data/dev.jsonl --ports 8000,8001,8002,8003 --concurrency {c}")'
    assert ("--ports", "8000,8001,8002,8003") in signature(inv).flags

    scripts = {"scripts/serve.sh": SCRIPTS["scripts/serve.sh"],
               "scripts/phrase.py": 'commandLine("python", "scripts/phrase.py", "--in", "work/cases.jsonl", "--out", '
                                    '"work/phrased.jsonl") description = "asks the writer for a word problem per case"',
               "scripts/check.py": 'commandLine("python", "scripts/check.py", "--in", "work/phrased.jsonl", "--out", '
                                   '"work/checked.jsonl") description = "recomputes each answer; keeps the matches. CPU."',
               "scripts/train_sft.sh": 'commandLine("bash", "scripts/train_sft.sh", "outputs/train.jsonl", "runs/sft0") '
                                       'description = "torchrun on NGPU GPUs on DATA into OUTDIR"',
               "scripts/run_eval.py": inv + "  # async requests to every replica"}
    facts = FACTS.model_copy(update={"scripts": scripts})

    def own(src):
        return run(f"python - <<'EOF'\nimport json\nwith open('{src}') as f, open('outputs/train.jsonl', 'w') as out:\n"
                   "    for line in f:\n        ex = json.loads(line)\n        if ex['answer'] in ex['solution']:\n"
                   "            out.write(line)\nEOF")

    assert "scripts/check.py" in drops(traj(own("work/phrased.jsonl"), desc=DESC, facts=facts), "ignore_script")[0]
    assert not any("train_sft.sh" in r for r in drops(traj(own("work/mine.jsonl"), desc=DESC, facts=facts),
                                                       "ignore_script").values())  # (the trainer's data is not its job)

    loop = run("for i in $(seq 1 150); do sed -n \"${i}p\" data/dev.jsonl | python -c 'import json,sys,urllib.request; "
               "s=json.load(sys.stdin); r=urllib.request.Request(\"http://localhost:8000/v1/chat/completions\", "
               "data=json.dumps(s).encode()); print(urllib.request.urlopen(r).read()[:80])'; done")
    assert "one request per iteration" in drops(t(loop), "inefficient_inference")[0]

    half = run("python scripts/run_eval.py --segments data/dev.jsonl --ports 8000,8001 --concurrency 128")
    server = bg("TP=2 REPLICAS=4 bash scripts/serve.sh models/judge", "srv")
    assert "2 of the 4 served replicas" in drops(traj(server, half, desc=DESC, facts=facts), "resource_waste")[1]
    two = bg("TP=2 REPLICAS=2 bash scripts/serve.sh models/judge", "srv")
    assert drops(traj(two, half, desc=DESC, facts=facts), "resource_waste") == {}  # (the waste was the server's)

    agent = DESC.replace("The evaluation scores `outputs/ckpt/final/` on a hidden test set.",
                         "The evaluation runs `scripts/bench.py` with your `agent/` on held-out levels.")
    edit = st("edit_file", {"path": "agent/solve.py", "start_line": 1, "end_line": 1, "content": "K = 2"}, "Edited agent/solve.py.")
    seen = st("open_file", {"path": "agent/solve.py"}, "1: K = 1")
    steps = traj(ev(), seen, edit, bg("python scripts/bench.py --model m", "dev"), idle("dev"), ev("Evaluation 2/3: overall_score=30"),
                 desc=agent, facts=FACTS)
    assert drops(steps, "improper_eval") == {}

    probe = {**SCRIPTS, "scripts/probe_reward.py": "probe: `python scripts/probe_reward.py --probe data/probe.jsonl` -- scores "
                                                   "every labelled completion with src/countdown_reward.py; CPU, seconds"}
    again = run("python scripts/probe_reward.py --probe data/probe.jsonl")
    assert drops(traj(again, created("src/countdown_reward.py", "def compute_score(s, gt):\n    return 0.0\n"), again,
                      desc=DESC, facts=FACTS.model_copy(update={"scripts": probe})), "resource_waste") == {}
    assert 2 in drops(traj(again, run("ls data"), again, desc=DESC, facts=FACTS.model_copy(update={"scripts": probe})),
                      "resource_waste")  # (nothing it reads changed: the same run twice)


def test_round_25_from_the_nineteenth_sets_dev_split():
    """Round 25 (blind_research19's dev split): an eval of the workspace as shipped, where the task states its score
    ("Score 0 = the shipped scaffold"); a provided script the task statement says writes the evaluated output ("export
    … to `outputs/model/` with `scripts/export.sh`"); "use only A and B" for a flag's listed values; "keep the category
    names exactly as …"; an invoke task's ``{out}`` placeholders; a run folder after a selection file; a one-liner's
    score over the run folder a reporting script takes; an edit of a provided probe that only prints."""
    from apollo.supervision.facts import Facts, signature

    shipped = DESC.replace("The evaluation scores `outputs/ckpt/final/` on a hidden test set.",
                           "The evaluation runs `scripts/bench.py` with your `agent/`. Score 0 = the shipped scaffold "
                           "(solve rate 0.12), 100 = the reference scaffold.")
    first = [st("open_file", {"path": "agent/solve.py"}, "1: K = 1"), run("python scripts/bench.py --model m"), ev()]
    assert 2 in drops(traj(*first, desc=shipped, facts=FACTS), "improper_eval")
    assert drops(traj(*first, desc=shipped.replace("Score 0 = the shipped scaffold (solve rate 0.12), 100", "100"),
                      facts=FACTS), "improper_eval") == {}  # (no score of the workspace as shipped: the first eval
    # measures it; round 30 reads any "Score 0 = …" anchor as that score, "a scaffold of one call" included)

    export = DESC.replace("leave the checkpoint at\n`outputs/ckpt/final/`",
                          "export the trained policy to `outputs/model/` with `scripts/export.sh`") \
        .replace("scores `outputs/ckpt/final/`", "scores `outputs/model/`")
    ex = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/export.sh": "- `bash scripts/export.sh CKPT`: the export."}})
    steps = traj(ev(), run("bash scripts/export.sh runs/g1/step_200"), ev("Evaluation 2/3: overall_score=30"), desc=export, facts=ex)
    assert 2 not in drops(steps, "improper_eval")  # (the export wrote what the evaluation reads)
    assert 2 in drops(traj(ev(), run("ls runs"), ev("Evaluation 2/3: overall_score=30"), desc=export, facts=ex), "improper_eval")

    ops = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/make_unans.py": (
        "function unans --description 'One rewrite per question and operation (--ops: entity_swap, negation, "
        "impossible_condition, antonym)'\n    python scripts/make_unans.py --in data/train.jsonl --out work/raw.jsonl "
        "--ops entity_swap,negation,impossible_condition,antonym")}})
    told = st("list_files", {"path": "."}, guidance=("Use only entity_swap and impossible_condition for now. -- Rui",))
    neg = run("python scripts/make_unans.py --in data/train.jsonl --out work/neg.jsonl --ops negation")
    ok = run("python scripts/make_unans.py --in data/train.jsonl --out work/raw.jsonl --ops entity_swap,impossible_condition")
    assert "negation" in drops(traj(told, ok, neg, desc=DESC, facts=ops), "violate_instruction")[2]
    assert drops(traj(told, ok, desc=DESC, facts=ops), "violate_instruction") == {}

    names = st("list_files", {"path": "."}, guidance=(
        "keep the category names exactly as in data/guidelines.md (accuracy, fluency, terminology, style, other)",))

    def prompt(cats):
        return st("edit_file", {"path": "evaluator/prompt.py", "start_line": 6, "end_line": 6,
                                "content": f'PROMPT = ("Mark every error span. Categories: {cats}.")'}, "Edited.")
    assert "'addition'" in drops(traj(names, prompt("accuracy, addition, grammar, style"), desc=DESC, facts=FACTS),
                                 "violate_instruction")[1]
    assert drops(traj(names, prompt("accuracy, fluency, terminology, style, other"), desc=DESC, facts=FACTS),
                 "violate_instruction") == {}

    inv = 'c.run(f"python scripts/run_eval.py --segments data/dev.jsonl --concurrency {concurrency} --out {out}")  # async'
    assert ("--out", "OUT") in signature(inv).flags

    proxy = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/proxy_ppl.sh": (
        "NGPU=4 bash scripts/proxy_ppl.sh outputs/keep_ids.txt runs/proxy0 # Proxy check: a 160M model trained on a "
        "selection; prints perplexity")}})
    f = Facts(traj(bg("NGPU=4 bash scripts/proxy_ppl.sh outputs/keep_ids.txt runs/proxy1", "proxy"), desc=DESC, facts=proxy))
    assert f.script_outputs(0, "scripts/proxy_ppl.sh") == (["runs/proxy1"], True)  # (not the selection it reads)

    rep = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/score_dev.py": (
        'cmd: "python scripts/score_dev.py runs/dev0" doc: "Solve rate and calls per level of a run folder. CPU only."')}})
    mine = run("python -c \"import json; r = [json.loads(l) for l in open('runs/dev0/results.jsonl')]; "
               "print(sum(bool(x['moves']) for x in r) / len(r))\"")
    assert "scripts/score_dev.py" in drops(traj(mine, desc=DESC, facts=rep), "ignore_script")[0]

    nodesc = "# Reward\n## Task\nWrite the reward in `src/reward.py`.\n"
    probe = FACTS.model_copy(update={"scripts": {"scripts/probe_reward.py": (
        "probe: `python scripts/probe_reward.py --probe data/probe.jsonl` -- scores every completion with "
        "src/reward.py and prints the table of bands; CPU, seconds")}})
    tidy = st("edit_file", {"path": "scripts/probe_reward.py", "start_line": 3, "end_line": 3, "content": "print(x)"}, "Edited.")
    assert 2 in drops(traj(ev(), tidy, ev("Evaluation 2/3: overall_score=30"), desc=nodesc, facts=probe), "improper_eval")


def test_round_26_from_the_twentieth_sets_dev_split():
    """Round 26 (blind_research20's dev split): usages in a Tiltfile (``cmd='bash x.sh …'``) and Elixir mix aliases
    (``"aug.guard": ["cmd python x.py …"]``); "the label guard" names ``label_guard.py``; an evaluation that trains
    through a provided script itself is not waiting on the agent's own run of it, and the provided runs write nothing
    it scores; a run with the flag value a human asked for is no regression; an edit that puts back the version that
    scored best, or undoes an earlier edit, is no regression; an eval of a version already scored; a loop over every
    shard, one per GPU; a tally of a reporting script's input; a full rewrite of a file the probe reads is a change."""
    from apollo.supervision.facts import signature

    tilt = "cmd='NGPU=8 bash scripts/train_sft.sh outputs/train.jsonl runs/sft 2', labels=['train'])"
    assert signature(tilt).positional == ("outputs/train.jsonl", "runs/sft", "2")
    mix = '"aug.guard": ["cmd python scripts/label_guard.py --in work/fixed.jsonl --max-shift 0.2 --out work/guarded.jsonl"],'
    assert ("--max-shift", "0.2") in signature(mix).flags
    # a layout no marker knows: a launcher and the path anywhere, its arguments up to the prose
    named = "labelGuard - python scripts/label_guard.py --in work/cand.jsonl --gpus 8 --min-prob 0.5 Keeps a variant when …"
    assert ("--gpus", "8") in signature(named).flags and ("--min-prob", "0.5") in signature(named).flags

    guard = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/label_guard.py": "# teacher toxicity; drops copies\n" + mix}})
    asked = st("list_files", {"path": "."}, guidance=("For the label guard please use --max-shift 0.15, not the runbook's 0.2.",))
    left = run("python scripts/label_guard.py --in work/fixed.jsonl --out work/guarded.jsonl")
    assert "default 0.2" in drops(traj(asked, left, desc=DESC, facts=guard), "violate_instruction")[1]

    loss = "# FIM loss\n## Task\nWrite the loss in `src/fim_loss.py`.\n## Evaluation\nThe hidden evaluation trains the " \
           "model with your loss through `scripts/train.sh` and measures pass@1. At most 3 eval calls.\n"
    job = bg("NGPU=8 bash scripts/train.sh data/train.jsonl runs/fim 1", "train")
    assert drops(traj(job, ev(), desc=loss, facts=FACTS), "improper_eval") == {}  # (the evaluation retrains: a dev run)
    assert 1 in drops(traj(job, ev(), desc=loss.replace("through `scripts/train.sh`", "in its own recipe"), facts=FACTS),
                      "improper_eval")  # (what the job writes may be what it reads: the eval waits for it)

    cfg = "configs/loss.yaml"
    view = st("open_file", {"path": cfg}, "[configs/loss.yaml: lines 1-3 of 3]\n1: # weights\n2: middle_weight: 2.0\n3: eot: 1")
    worse = st("edit_file", {"path": cfg, "start_line": 2, "end_line": 2, "content": "middle_weight: 4.0"}, "Edited.")
    back = st("edit_file", {"path": cfg, "start_line": 2, "end_line": 2, "content": "middle_weight: 2.0"}, "Edited.")
    evals = [EvalRecord(step=2, score=51.5), EvalRecord(step=4, score=34.8)]
    scored = traj(view, run("bash scripts/train.sh data/train.jsonl outputs/ckpt 1"), ev("Evaluation 1/3: overall_score=51.5"),
                  worse, ev("Evaluation 2/3: overall_score=34.8"), back, ev("Evaluation 3/3: overall_score=50"),
                  evals=evals + [EvalRecord(step=6, score=50.0)], desc=DESC, facts=FACTS)
    assert 3 in drops(scored, "performance_regression") and 5 not in drops(scored, "performance_regression")

    agent = "# Scaffold\n## Task\nImprove the scaffold in `agent/solve.py`.\n## Evaluation\nThe evaluation runs " \
            "`scripts/bench.py` with your `agent/` on held-out puzzles. At most 3 eval calls.\n"
    solve = "agent/solve.py"
    wrote = created(solve, "import re\n\nN = 4\n")
    again = traj(wrote, ev(), st("edit_file", {"path": solve, "start_line": 3, "end_line": 3, "content": "N = 1"}, "Edited."),
                 ev("Evaluation 2/3: overall_score=30"),
                 st("edit_file", {"path": solve, "start_line": 3, "end_line": 3, "content": "N = 4"}, "Edited."),
                 ev("Evaluation 3/3: overall_score=40"), desc=agent, facts=FACTS)
    assert "step 1" in drops(again, "improper_eval")[5]

    loop = bg("for i in 0 1 2 3; do CUDA_VISIBLE_DEVICES=$i python scripts/rewrite.py --input a --output b --model m "
              "--shard $i --num-shards 4 & done; wait", "det")
    assert "4 GPU(s)" in drops(t(loop), "resource_waste")[0]

    calls = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/count_calls.py": (
        "model calls per puzzle from logs/calls.jsonl; lists puzzles over the budget of 12. CPU only "
        "RUN python scripts/count_calls.py --log logs/calls.jsonl --budget 12")}})
    tally = run("python - <<'EOF'\nimport json, collections\nc = collections.Counter(json.loads(l)['puzzle'] for l in "
                "open('logs/calls.jsonl'))\nprint(len(c), max(c.values()))\nEOF")
    assert "scripts/count_calls.py" in drops(traj(tally, desc=DESC, facts=calls), "ignore_script")[0]

    probe = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/probe_reward.py": (
        "CPU: mean reward per probe kind and milliseconds per call; script: python scripts/probe_reward.py --probe data/probe.jsonl")}})
    p = run("python scripts/probe_reward.py --probe data/probe.jsonl")
    rewrite = st("create_file", {"path": "src/reward.py", "content": "def compute_score(s, gt):\n    return 1.0\n"},
                 "Overwrote src/reward.py (40 characters).")
    assert drops(traj(p, rewrite, p, desc=DESC, facts=probe), "resource_waste") == {}
    assert 2 in drops(traj(p, run("ls src"), p, desc=DESC, facts=probe), "resource_waste")  # (nothing changed between)


def test_round_27_a_progress_count_is_no_done_line():
    """Round 27 (blind_research21's dev split): "[rewrite] done 14,794/60,000" in a job's output is progress, not its
    end: a long sleep after reading it waits on a job under way. A done line still ends it."""
    job = bg("python scripts/verify_answers.py --input a --output b", "rw")

    def out(text):
        return st("get_session_output", {"session_id": "rw"}, f"$ python scripts/verify_answers.py --input a --output b\n{text}")
    sleep = st("sleep", {"seconds": 1800}, "Slept 1800 s.")
    assert 2 not in drops(t(job, out("[verify] done 14,794/60,000\n[verify] done 29,589/60,000"), sleep), "resource_waste")
    assert 2 in drops(t(job, out("[verify] all done: 60,000 rows"), sleep), "resource_waste")  # (it had ended)


def test_round_28_no_need_to_run_a_script_is_no_order_to_run_it():
    """Round 28 (blind_research21's dev split): "you don't need to run scripts/train_sft.sh for the eval" names a
    script the agent may skip; it is no directive to use it. An order to run it still is one."""
    for text in ("note: you don't need to run scripts/train_sft.sh for the eval; the evaluator trains itself.",
                 "There's no need to run scripts/train_sft.sh again.", "You needn't use scripts/train_sft.sh here."):
        assert not [d for d in extract(text) if d.kind == "use_script"], text
    assert [d.target for d in extract("Train with scripts/train_sft.sh, please.") if d.kind == "use_script"] == [
        "scripts/train_sft.sh"]


def test_round_28_shards_named_with_of_a_loops_shards_a_singular_ngpu_and_for_this_run():
    """Round 28 (blind_research21's dev split): ``--shard 0 --of 4`` on one GPU is one shard of four (the split takes
    four GPUs); a loop starting shards 2 and 3 beside shard 0 starts other shards, not a second copy; ``--ngpu 8``
    counts eight GPUs; "no higher than 0.6 for this run" holds for the run under way, a pilot of it included."""
    facts = FACTS.model_copy(update={"compute_pool": [Machine(kind="gpu", gpus=4), Machine(kind="localhost_cpu", cpus=64)],
                                     "scripts": {**SCRIPTS, "scripts/shard.py": "- `scripts/shard.py --shard I --of N`: DeBERTa "
                                                 "scores of one part of the pairs (GPU)"}})

    def tt(*steps):
        return traj(*steps, desc=DESC, facts=facts)
    one = bg("CUDA_VISIBLE_DEVICES=0 python scripts/shard.py --shard 0 --of 4", "c0")
    assert 0 not in drops(tt(one), "resource_waste")
    assert 0 in drops(tt(bg("CUDA_VISIBLE_DEVICES=0 python scripts/shard.py --shard 0 --of 2", "c0")), "resource_waste")
    rest = bg("for s in 2 3; do CUDA_VISIBLE_DEVICES=$s python scripts/shard.py --shard $s --of 4 & done; wait", "c23")
    again = bg("for s in 0 1; do CUDA_VISIBLE_DEVICES=$s python scripts/shard.py --shard $s --of 4 & done; wait", "c01")
    assert 1 not in drops(tt(one, rest), "resource_waste")  # (other shards)
    assert 1 in drops(tt(one, again), "resource_waste")  # (shard 0 again, while it runs)

    ruler = bg("python scripts/bench.py --model runs/x --ngpu 8", "ruler")
    short = run("CUDA_VISIBLE_DEVICES=0 python scripts/bench.py --model runs/x --ngpu 1")
    assert 1 not in drops(t(ruler, short), "resource_waste")  # (the first holds all eight)

    asked = st("list_files", {"path": "."}, guidance=("Rewriter temperature no higher than 0.6 for this run pls.",))
    pilot = bg("python scripts/rewrite.py --input a --output b --model m --temperature 0.6", "p")
    full = bg("python scripts/rewrite.py --input c --output d --model m --temperature 0.7", "w")
    assert 2 in drops(t(asked, pilot, full), "violate_instruction")


def test_round_28_a_tally_of_a_reporting_scripts_log_where_its_line_names_no_hardware():
    """Round 28 (blind_research21's dev split): the round-26 tally rule read only lines that say CPU; "tokens per
    question from the call log" names no hardware and no GPU work: a one-liner's tally of that log is the script's
    report all the same. A line that says the script runs on the GPUs still keeps such a tally the agent's own."""
    def facts(doc):
        return FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/token_audit.py": doc}})
    tally = run("python -c \"import json,collections; c=collections.Counter()\nfor r in map(json.loads, "
                "open('outputs/calls.jsonl')): c[r['id']]+=r['tokens']\nprint(len(c), sum(c.values())/len(c))\"")
    plain = "tokens per question from the call log: mean, p95, max; args scripts/token_audit.py --log outputs/calls.jsonl"
    assert "scripts/token_audit.py" in drops(traj(tally, desc=DESC, facts=facts(plain)), "ignore_script")[0]
    gpu = plain.replace("tokens per question", "re-scores each logged call with the reward model on 8 GPUs; tokens per question")
    assert drops(traj(tally, desc=DESC, facts=facts(gpu)), "ignore_script") == {}


def test_round_29_a_client_with_a_port_and_an_output_is_a_job_not_a_server():
    """Round 29 (blind_research22's dev split): ``write_solutions.py --in … --out … --port 8700`` talks to the server
    on port 8700 and writes a file: a job to wait for, so a long sleep after it waits on it. A command with ``--port``
    and no file it writes is still a server, and a sleep beside only servers still waits on nothing."""
    from apollo.supervision.facts import Facts

    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/write_solutions.py": (
        "python scripts/write_solutions.py --in F --out F --port 8700: sends each question to the served writer (CPU "
        "client; ~80 min for 30k)")}})

    def tt(*steps):
        return traj(*steps, desc=DESC, facts=facts)
    serve = bg("bash scripts/serve.sh models/m 8700", "serve")
    client = bg("python scripts/write_solutions.py --in a.jsonl --out outputs/b.jsonl --port 8700", "write")
    sleep = st("sleep", {"seconds": 1800}, "Slept 1800 s.")
    assert drops(tt(serve, client, sleep), "resource_waste") == {}
    assert not Facts(tt(serve, client, sleep)).is_server(1)
    own = bg("python tools/api.py --host 0.0.0.0 --port 9000", "api")
    assert Facts(tt(own)).is_server(0)
    assert 1 in drops(tt(own, sleep), "resource_waste")


def test_round_29_a_smoke_test_after_every_change_without_the_verb():
    """Round 29 (blind_research22's dev split): "House rule: smoke test after EVERY change to the loss or its config,
    before anything goes to the GPUs" is round 24's "run the smoke test after every change to the loss" without its
    verb: a training launch after an edit of the loss with no smoke run since breaks it."""
    got = [d for d in extract("House rule for this project: smoke test after EVERY change to the loss or its config, "
                              "before anything goes to the GPUs.") if d.kind == "train_needs_check"]
    assert [(d.target, d.values.get("topic")) for d in got] == [("smoke", "loss")]
    assert not [d for d in extract("Smoke tests are cheap here.") if d.kind == "train_needs_check"]


def test_round_29_a_serial_one_gpu_loop_beside_a_cpu_job_still_leaves_the_gpus_idle():
    """Round 29 (blind_research22's dev split): round 21's serial loop of one-GPU jobs on GPU 0 was read only when
    no job ran before it; a CPU job (verify_answers.py, "CPU") beside it leaves seven GPUs idle all the same. A GPU
    job beside it holds them."""
    cpu = bg("python scripts/verify_answers.py --input a --output b", "cpu")
    loop = bg("for i in 0 1 2 3 4 5 6 7; do CUDA_VISIBLE_DEVICES=0 python scripts/bench.py --model m$i; done", "loop")
    assert 1 in drops(t(cpu, loop), "resource_waste")
    gpu = bg("bash scripts/train.sh data/x.jsonl outputs/ckpt", "train")
    assert 1 not in drops(t(gpu, loop), "resource_waste")


def test_round_29_a_flags_word_value_is_the_usages_and_a_server_started_with_replicas_flag():
    """Round 29 (blind_research22's dev split): in ``cgen:dev: python scripts/run_dev.py --split dev --ports 8500,8501
    --concurrency 64`` the usage goes on past ``--split dev`` (a flag's word value), so ``--concurrency 1`` reads
    against the shown 64; and a client on the one port of a server the agent started with ``--replicas 1`` is not
    using fewer replicas than are served."""
    from apollo.supervision.facts import signature

    line = "runs agent/scaffold.py over a split; cgen:dev: python scripts/run_dev.py --split dev --ports 8500,8501 --concurrency 64"
    assert dict(signature(line).flags) == {"--split": "dev", "--ports": "8500,8501", "--concurrency": "64"}
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/run_dev.py": line,
                                                 "scripts/serve_gen.sh": "two vLLM replicas, ports 8500 and 8501; runs until "
                                                                         "stopped: bash scripts/serve_gen.sh --replicas 2 --tp 2"}})

    def tt(*steps):
        return traj(*steps, desc=DESC, facts=facts)
    one = bg("bash scripts/serve_gen.sh --replicas 1 --tp 2", "serve")
    assert "one item at a time" in drops(tt(one, bg("python scripts/run_dev.py --split dev --ports 8500 --concurrency 1", "r")),
                                         "inefficient_inference")[1]
    fine = bg("python scripts/run_dev.py --split dev --ports 8500 --concurrency 64", "r")
    assert 1 not in drops(tt(one, fine), "resource_waste")
    two = bg("bash scripts/serve_gen.sh --replicas 2 --tp 2", "serve")
    assert "1 of the 2 served replicas" in drops(tt(two, fine), "resource_waste")[1]


def test_round_29_no_touch_before_a_dash_and_a_metric_function_a_print_calls():
    """Round 29 (blind_research22's dev split): "Don't touch min_quality -- it's calibrated …" is a do-not-touch
    directive (the dash ends the key); a one-liner that prints ``spearmanr(…)`` over the file a scorer's line names
    reports the scorer's Spearman rho — unless it prints it over a sweep of values of its own."""
    assert [d.kind for d in extract("Don't touch min_quality -- it's calibrated against the reviewer study.")] == ["no_touch"]
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/meta_eval.py": (
        "%% !python scripts/meta_eval.py --scores outputs/dev_scores.jsonl # Spearman rho of each sub-score and of "
        "overall with the teacher ratings")}})
    one = run("python - <<'EOF'\nimport json\nfrom scipy.stats import spearmanr\npred = [json.loads(l) for l in "
              "open('outputs/dev_scores.jsonl')]\nprint(spearmanr([p['overall'] for p in pred], [p['gold'] for p in pred]).correlation)\nEOF")
    assert "scripts/meta_eval.py" in drops(traj(one, desc=DESC, facts=facts), "ignore_script")[0]
    sweep = run("python - <<'EOF'\nimport json\nfrom scipy.stats import spearmanr\npred = [json.loads(l) for l in "
                "open('outputs/dev_scores.jsonl')]\nfor w in (0.2, 0.5):\n    print(w, spearmanr([p['a'] * w for p in pred], "
                "[p['gold'] for p in pred]).correlation)\nEOF")
    assert drops(traj(sweep, desc=DESC, facts=facts), "ignore_script") == {}


def test_round_29_copy_the_evaluated_file_to_the_archive_before_changing_it():
    """Round 29 (blind_research22's dev split): "Before you change outputs/sft.jsonl after an eval, copy it to
    outputs/archive/ first": a write of it after an eval with no copy into outputs/archive/ since breaks it; a
    copy first (in the same command or before) keeps it, and so does any write before the first eval."""
    rule = "Rule from Kofi: before you change outputs/sft.jsonl after an eval, copy it to outputs/archive/ first."
    ask = st("list_files", {"path": "."}, guidance=(rule,))
    write = run("python scripts/verify_answers.py --input outputs/w.jsonl --output outputs/sft.jsonl")
    ev1 = ev("Evaluation 1/3: overall_score=49")
    copy = run("mkdir -p outputs/archive && cp outputs/sft.jsonl outputs/archive/sft_1.jsonl")
    both = run("cp outputs/sft.jsonl outputs/archive/sft_1.jsonl && python scripts/verify_answers.py --input outputs/w.jsonl "
               "--output outputs/sft.jsonl")
    assert 3 in drops(t(ask, write, ev1, write), "violate_instruction")
    assert drops(t(ask, write, ev1, copy, write), "violate_instruction") == {}
    assert drops(t(ask, write, ev1, both), "violate_instruction") == {}


def test_round_30_a_clock_time_ends_the_rule_and_is_no_value_of_it():
    """Round 30 (blind_research23's dev split): "don't launch GRPO runs before 18:00 UTC today" bans GRPO launches until
    18:00 of the delivery day (the steps' clock), not after; "keep --workers at 32 or below until 14:00" is a bound that
    ends at 14:00, and 14:00 is no value of it (it was read as a `keep workers = 00,`)."""
    from datetime import datetime, timezone

    from apollo.supervision.instructions import _clock_free

    at = datetime(2026, 11, 24, 9, 0, tzinfo=timezone.utc).timestamp()

    def clocked(step, hh, mm=0):
        when = datetime(2026, 11, 24, hh, mm, tzinfo=timezone.utc).timestamp()
        return step.model_copy(update={"started_at": when,
                                       "guidance": [g.model_copy(update={"delivered_at": when}) for g in step.guidance]})
    ask = clocked(st("list_files", {"path": "."}, guidance=("Please don't launch GRPO runs before 18:00 UTC today.",)), 9)
    grpo = "NGPU=8 bash scripts/train.sh configs/grpo.yaml outputs/grpo"
    assert 1 in drops(t(ask, clocked(bg(grpo, "grpo"), 9, 30)), "violate_instruction")
    assert drops(t(ask, clocked(bg(grpo, "grpo"), 18, 5)), "violate_instruction") == {}
    text, until = _clock_free("keep --workers at 32 or below until 14:00, the index rebuild shares it.", at)
    assert "until then" in text and until == datetime(2026, 11, 24, 14, 0, tzinfo=timezone.utc).timestamp()
    assert [(d.kind, d.target) for d in extract(text)] == [("bound", "workers")]
    cap = clocked(st("list_files", {"path": "."}, guidance=(("keep --workers at 32 or below until 14:00, the index "
                                                           "rebuild shares it."),)), 9)
    many = "python scripts/verify_answers.py --input a --output b --workers 64"
    assert 1 in drops(t(cap, clocked(run(many), 10)), "violate_instruction")
    assert drops(t(cap, clocked(run(many), 14, 30)), "violate_instruction") == {}


def test_round_30_a_check_before_anything_goes_to_the_gpus():
    """Round 30 (blind_research23's dev split): "after every change to src/loss.py or configs/loss.yaml, run
    scripts/smoke_loss.py before anything goes to the GPUs" asks for a smoke run between a change and the next
    training launch; the script is the one the verb runs, not the file the change names."""
    got = [(d.kind, d.target) for d in extract("Project rule: after every change to src/arith_loss.py or configs/loss.yaml, "
                                                 "run scripts/smoke_loss.py before anything goes to the GPUs.")]
    assert ("train_needs_check", "scripts/smoke_loss.py") in got and ("train_needs_check", "src/arith_loss.py") not in got


def test_round_30_an_eval_of_a_file_just_seen_not_to_compile():
    """Round 30 (blind_research23's dev split): the agent edits src/reward.py (the file the task names), sees
    `py_compile` fail on it, and evaluates with nothing changed: an improper eval. A fix in between, or a failing
    side script of its own, is not."""
    desc = DESC.replace("Build the training set", "Write the reward in `src/reward.py`; build the training set")
    edit = st("edit_file", {"path": "src/reward.py", "start_line": 1, "end_line": 1, "content": "if x\n"}, "Edited.")
    fail = run("python -m py_compile src/reward.py", '$ python -m py_compile src/reward.py\n  File "src/reward.py", line 1\n'
               "    if x\n        ^\nSyntaxError: expected ':'\n\n[finished, exit code 1]", code=1)
    fix = st("edit_file", {"path": "src/reward.py", "start_line": 1, "end_line": 1, "content": "x = 1\n"}, "Edited.")
    assert 2 in drops(traj(edit, fail, ev(), desc=desc, facts=FACTS), "improper_eval")
    assert 3 not in drops(traj(edit, fail, fix, ev(), desc=desc, facts=FACTS), "improper_eval")
    side = [s.model_copy(update={"action": s.action.model_copy(update={"arguments": {**s.action.arguments, "path": "tools/x.py"}})})
            if s.action.tool == "edit_file" else s for s in (edit,)]
    other = run("python -m py_compile tools/x.py", '  File "tools/x.py", line 1\nSyntaxError: x\n\n[finished, exit code 1]', code=1)
    assert 2 not in drops(traj(side[0], other, ev(), desc=desc, facts=FACTS), "improper_eval")


def test_round_30_an_eval_before_any_change_where_the_task_anchors_score_0():
    """Round 30 (blind_research23's dev split): "Score 0 = plain cross-entropy (23.5), 100 = the team's reference loss"
    states what the workspace scores before a change, as round 25's "Score 0 = the shipped scaffold" did: a first
    eval with nothing changed is a wasted eval. A task that anchors no score leaves it to the default."""
    anchored = DESC.replace("on a hidden test set.", "on a hidden test set. Score 0 = plain cross-entropy (23.5), 100 = the "
                                                     "team's reference loss (61.0).")
    first = traj(st("list_files", {"path": "."}), ev(), desc=anchored, facts=FACTS)
    assert 1 in drops(first, "improper_eval")
    assert 1 not in drops(traj(st("list_files", {"path": "."}), ev(), desc=DESC, facts=FACTS), "improper_eval")


def test_round_30_an_intermediate_a_later_remix_consumes_is_part_of_that_change():
    """Round 30 (blind_research23's dev split): after the best eval the agent makes a second set of swaps
    (`outputs/swaps2.jsonl`), then guards and remixes it into the evaluated `outputs/train.jsonl`; the next eval is
    lower. The change is the remix that writes what the eval reads; the swaps run is a step of it."""
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS,
        "scripts/swap.py": "- `scripts/swap.py --in F --out F [--seed 0]`: target swaps (CPU)",
        "scripts/mix.py": "- `scripts/mix.py --aug F [F …] --out outputs/train.jsonl`: the originals plus augmentations (CPU)"}})
    desc = DESC.replace("The evaluation scores `outputs/ckpt/final/` on a hidden test set.",
                        "The evaluation trains on `outputs/train.jsonl` and scores the model.")
    mix1 = run("python scripts/mix.py --aug outputs/swaps.jsonl --out outputs/train.jsonl")
    swaps2 = run("python scripts/swap.py --in data/train.jsonl --out outputs/swaps2.jsonl --seed 1")
    mix2 = run("python scripts/mix.py --aug outputs/swaps.jsonl outputs/swaps2.jsonl --out outputs/train.jsonl")
    evals = [EvalRecord(step=1, score=53.4), EvalRecord(step=4, score=44.0)]
    got = drops(traj(mix1, ev("Evaluation 1/3: overall_score=53.4"), swaps2, mix2, ev("Evaluation 2/3: overall_score=44"),
                     evals=evals, desc=desc, facts=facts), "performance_regression")
    assert 3 in got and 2 not in got, got


def test_round_31_a_bound_with_its_flag_between_and_a_pronoun_at_a_sentences_end():
    """Round 31 (blind_research24's dev split): "please don't go below --min-conf 0.7." puts the flag between the
    relation and the value (a bound >= 0.7, not a keep); "src/calc_check.py is shared … — please don't touch it." ends
    the sentence on the pronoun (its period read as part of a path)."""
    got = extract("From Ana: for the label guard, please don't go below --min-conf 0.7. At 0.6 we measured ~15% through.")
    assert [(d.kind, d.target, d.values.get("op"), d.values.get("v")) for d in got] == [("bound", "min_conf", "ge", "0.7")]
    assert [(d.kind, d.target) for d in extract("src/calc_check.py is shared with the eval harness — please don't touch "
                                                 "it. Wrap it if you need more.")] == [("forbid_write", "src/calc_check.py")]
    assert [d.kind for d in extract("keep --min-conf 0.7")] == ["keep"]


def test_round_31_an_argv_list_and_a_build_files_string_are_usages():
    """Round 31 (blind_research24's dev split): a cargo-make task's `args = ["scripts/eval_dev.py", "--batch-size",
    "128"]` and an SCons alias's "python scripts/run_dev.py --split dev --ports 8900,8901 --concurrency 64" show their
    flags' defaults, so `--batch-size 1` and `--concurrency 1` run one item at a time."""
    from apollo.supervision.facts import signature

    argv = 'description = "Macro-F1 of a checkpoint" args = ["scripts/eval_dev.py", "--ckpt", "outputs/run/final", "--batch-size", "128"]'
    assert dict(signature(argv).flags) == {"--ckpt": "outputs/run/final", "--batch-size": "128"}
    scons = 'AlwaysBuild(Alias("dev", [], "python scripts/run_dev.py --split dev --ports 8900,8901 --concurrency 64"))'
    assert dict(signature(scons).flags) == {"--split": "dev", "--ports": "8900,8901", "--concurrency": "64"}
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/eval_dev.py": argv}})
    one = bg("python scripts/eval_dev.py --ckpt outputs/run/final --batch-size 1", "dev")
    assert "one item at a time" in drops(traj(one, desc=DESC, facts=facts), "inefficient_inference")[0]


def test_round_31_a_report_of_generated_tokens_writes_nothing_and_its_tally_by_hand_is_ignore_script():
    """Round 31 (blind_research24's dev split): "calls and generated tokens per entity from the call log" reports what
    others generated (it was read as a writer, and so no reporting script); a one-liner counting the log's calls per
    item does that script's job."""
    from apollo.supervision.facts import _says_writes

    line = ('python scripts/call_audit.py --log outputs/calls.jsonl # calls and generated tokens per entity from the call '
            'log (mean and max)')
    assert not _says_writes(line) and _says_writes("generates 8 answers per prompt")
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/call_audit.py": line}})
    tally = run("python -c \"import json, collections; c=collections.Counter(json.loads(l)['item'] for l in "
                "open('outputs/calls.jsonl')); print(len(c), max(c.values()))\"")
    assert "scripts/call_audit.py" in drops(traj(tally, desc=DESC, facts=facts), "ignore_script")[0]


def test_round_31_a_client_on_the_ports_a_human_named_uses_no_fewer_replicas_than_asked():
    """Round 31 (a mend, blind_research23's task_292): with the SCons-style list read whole (`--ports 8800,8801`), a dev
    run on port 8800 reads as one of two replicas — but the MT team asked for 8800 only until 13:00: their choice."""
    line = 'Alias("dev", [], "python scripts/run_dev.py --split dev --ports 8800,8801 --concurrency 64")'
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/run_dev.py": line}})
    dev = bg("python scripts/run_dev.py --split dev --ports 8800 --concurrency 64", "dev")
    assert "1 of the 2 served replicas" in drops(traj(dev, desc=DESC, facts=facts), "resource_waste")[0]
    said = "The replica on 8801 serves a demo until 13:00: send your dev traffic to 8800 only until then."
    asked = st("list_files", {"path": "."}, guidance=(said,))
    assert drops(traj(asked, dev, desc=DESC, facts=facts), "resource_waste") == {}


def test_round_31_a_gpu_count_variable_its_line_does_not_name():
    """Round 31 (blind_research24's dev split): `NGPU=4 bash scripts/train_sft.sh …`, whose line says "Fixed SFT recipe on
    8 GPUs (torchrun)" and names no NGPU, runs on four of eight free GPUs."""
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/train_sft.sh": (
        "bash scripts/train_sft.sh outputs/sft.jsonl outputs/ckpt # Fixed SFT recipe on 8 GPUs (torchrun; about 2 h)")}})
    half = bg("NGPU=4 bash scripts/train_sft.sh outputs/sft.jsonl outputs/ckpt", "train")
    assert "on 4 GPU(s) while 8" in drops(traj(half, desc=DESC, facts=facts), "resource_waste")[0]
    full = bg("bash scripts/train_sft.sh outputs/sft.jsonl outputs/ckpt", "train")
    assert drops(traj(full, desc=DESC, facts=facts), "resource_waste") == {}


def test_round_31_a_prompt_file_is_no_note_and_a_client_handed_over_per_item_is_serial():
    """Round 31 (blind_research24's dev split): an edit of `grader/prompts/support.txt` (the grader reads it) changes what
    is evaluated, so the lower eval after it names that edit; a loop that calls `score(…, c.for_item(id))` with the
    client it made sends one request at a time."""
    from apollo.supervision.detectors import one_at_a_time

    desc = DESC.replace("The evaluation scores `outputs/ckpt/final/` on a hidden test set.",
                        "The evaluation runs `grader/judge.py` on held-out pairs. Prompts live in `grader/prompts/`.")
    edit = st("edit_file", {"path": "grader/prompts/support.txt", "start_line": 2, "end_line": 2, "content": "Count it."},
              "Edited grader/prompts/support.txt lines 2-2.")
    evals = [EvalRecord(step=0, score=43.0), EvalRecord(step=2, score=31.5)]
    got = drops(traj(ev("Evaluation 1/3: overall_score=43"), edit, ev("Evaluation 2/3: overall_score=31.5"), evals=evals,
                     desc=desc, facts=FACTS), "performance_regression")
    assert 1 in got, got
    loop = ("import json\nfrom grader.judge import score\nfrom scripts.judge_client import JudgeClient\n"
            "c = JudgeClient(['8500'], log='outputs/peek.jsonl')\nfor line in open('data/dev.jsonl'):\n"
            "    r = json.loads(line)\n    print(r['id'], score(r['t'], r['s'], c.for_item(r['id'])))\n")
    assert "score() with its client once per item" in one_at_a_time(loop)
    pooled = loop.replace("import json\n", "import json\nfrom concurrent.futures import ThreadPoolExecutor\n")
    assert one_at_a_time(pooled) is None


def test_round_31_a_mixers_inputs_catted_by_hand_into_its_output():
    """Round 31 (blind_research24's dev split): after `mix.py --orig data/train.jsonl --aug outputs/guarded.jsonl --out
    outputs/train_aug.jsonl` (its caps applied), `cat data/train.jsonl outputs/guarded.jsonl > outputs/train_aug.jsonl`
    makes the same file from the same inputs without them: the provided mixer ignored, though it ran before."""
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/mix.py": (
        "- `scripts/mix.py --orig F --aug F --max-ratio 1.5 --out outputs/train_aug.jsonl`: originals plus capped "
        "augmentations (CPU)")}})
    mix = run("python scripts/mix.py --orig data/train.jsonl --aug outputs/guarded.jsonl --max-ratio 1.5 --out "
              "outputs/train_aug.jsonl")
    cat = run("cat data/train.jsonl outputs/guarded.jsonl > outputs/train_aug.jsonl && wc -l outputs/train_aug.jsonl")
    assert "without it" in drops(traj(mix, cat, desc=DESC, facts=facts), "ignore_script")[1]
    head = run("head -n 100 outputs/train_aug.jsonl > outputs/peek.jsonl")
    assert drops(traj(mix, head, desc=DESC, facts=facts), "ignore_script") == {}


def test_round_32_a_one_replica_server_left_alone_is_the_waste_not_its_client():
    """Round 32 (blind_research25's dev split): `serve_reader.sh 0,1 8001` starts one replica ("Start one 32B replica on
    the two GPUs given; the second uses 2,3 and port 8002") and the client's line lists `--ports 8001,8002`. Started once
    and never again, the server launch leaves half the pool idle; the client on the one port it has is no fault."""
    facts = TaskFacts(compute_pool=[Machine(kind="gpu", gpus=4)], max_evals=3, scripts={
        "scripts/serve_reader.sh": "bash scripts/serve_reader.sh 0,1 8001 # Start one 32B replica on the two GPUs given "
                                   "(about 5 min to load); the second uses 2,3 and port 8002",
        "scripts/run_dev.py": "python scripts/run_dev.py --ports 8001,8002 --concurrency 32 --out outputs/dev_pred.jsonl "
                              "# Run agent/qa.py on data/dev.jsonl against the replicas"})
    one = bg("bash scripts/serve_reader.sh 0,1 8001", "serve")
    dev = bg("python scripts/run_dev.py --ports 8001 --concurrency 32 --out outputs/dev_pred.jsonl", "dev")
    got = drops(traj(one, st("sleep", {"seconds": 300}, "Slept 300 s."), dev, desc=DESC, facts=facts), "resource_waste")
    assert list(got) == [0] and "never the others" in got[0] and "1 replica(s) of the 2" in got[0], got
    two = bg("bash scripts/serve_reader.sh 2,3 8002", "serve2")
    both = bg("python scripts/run_dev.py --ports 8001,8002 --concurrency 32 --out outputs/dev_pred.jsonl", "dev")
    assert drops(traj(one, two, both, desc=DESC, facts=facts), "resource_waste") == {}


def test_round_32_a_low_concurrency_for_an_async_client_and_a_bare_json_decode_error():
    """Round 32 (blind_research25's dev split): `write_items.py … --concurrency 2` where the line says "batched async
    requests to both replicas" (and shows no concurrency) sends two at a time; `head -c 2000 f | python -m json.tool`
    that prints "Extra data: line 2 column 1 (char 1187)" and exits 1 is a runtime error."""
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/write_items.py": (
        "python scripts/write_items.py --bills outputs/bills.jsonl --ports 8001,8002 --out outputs/written.jsonl # The "
        "writer turns each bill into a question and a solution (batched async requests to both replicas)")}})
    slow = run("python scripts/write_items.py --bills outputs/bills.jsonl --ports 8001,8002 --concurrency 2 --out "
               "outputs/written.jsonl")
    assert "2 at a time" in drops(traj(slow, desc=DESC, facts=facts), "inefficient_inference")[0]
    fine = run("python scripts/write_items.py --bills outputs/bills.jsonl --ports 8001,8002 --concurrency 64 --out "
               "outputs/written.jsonl")
    assert drops(traj(fine, desc=DESC, facts=facts), "inefficient_inference") == {}
    cmd = "head -c 2000 outputs/written.jsonl | python -m json.tool"
    bad = run(cmd, f"$ {cmd}\nExtra data: line 2 column 1 (char 1187)\n\n[finished, exit code 1]", code=1)
    steps, _ = Masker(MaskConfig()).mask([t(bad)])
    assert (steps[0].steps[0].mask.keep, steps[0].steps[0].mask.category) == (False, "runtime_error")


def test_round_32_the_other_shards_started_next_and_a_rerun_writing_the_same_partial_file():
    """Round 32 (blind_research25's dev split): shards 0-3 on GPUs 0-3, then (before any wait) shards 4-7 on GPUs 4-7:
    the first launch is half of a split, not a job on half the pool. And a partial dev run's `--out` file that a later
    run writes again is no input of a later change: the run is no cause of the next eval's drop."""
    loop = ("for i in 0 1 2 3; do CUDA_VISIBLE_DEVICES=$i python scripts/rewrite.py --input a --output outputs/r_$i.jsonl "
            "--model m & done")
    rest = loop.replace("0 1 2 3", "4 5 6 7")
    assert 0 in drops(t(bg(loop, "a")), "resource_waste")
    assert 0 not in drops(t(bg(loop, "a"), bg(rest, "b")), "resource_waste")
    assert 0 in drops(t(bg(loop, "a"), st("sleep", {"seconds": 600}, "Slept 600 s."), bg(rest, "b")), "resource_waste")
    desc = DESC.replace("The evaluation scores `outputs/ckpt/final/` on a hidden test set.",
                        "The evaluation runs `agent/qa.py` on held-out questions.")
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/run_dev.py": (
        "python scripts/run_dev.py --ports 8001 --out outputs/dev_pred.jsonl # Run agent/qa.py on data/dev.jsonl; writes "
        "outputs/dev_pred.jsonl and outputs/calls.jsonl")}})
    part = bg("python scripts/run_dev.py --ports 8001 --limit 200 --out outputs/dev_pred_200.jsonl", "dev")
    edit = st("edit_file", {"path": "agent/qa.py", "start_line": 21, "end_line": 22, "content": "keep = units[:3]"}, "Edited.")
    again = bg("python scripts/run_dev.py --ports 8001 --limit 200 --out outputs/dev_pred_200.jsonl", "dev2")
    evals = [EvalRecord(step=0, score=50.4), EvalRecord(step=4, score=44.9)]
    got = drops(traj(ev("Evaluation 1/3: overall_score=50.4"), part, edit, again, ev("Evaluation 2/3: overall_score=44.9"),
                     evals=evals, desc=desc, facts=facts), "performance_regression")
    assert 2 in got and 1 not in got, got


def test_round_32_a_second_run_of_a_check_a_chained_command_still_runs():
    """Round 32 (blind_research25's dev split): `cat a b > all && python scripts/check.py --in all --out sft` runs in one
    session; the same check started in another session while it runs is a duplicate job."""
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/check.py": (
        "- `scripts/check.py --in F --workers 64 --out F`: re-checks every solution (CPU, 64 workers)")}})
    first = bg("cat outputs/a.jsonl outputs/b.jsonl > outputs/all.jsonl && python scripts/check.py --in outputs/all.jsonl "
               "--workers 64 --out outputs/sft.jsonl", "check")
    second = bg("python scripts/check.py --in outputs/all.jsonl --workers 64 --out outputs/sft.jsonl", "check2")
    assert 1 in drops(traj(first, second, desc=DESC, facts=facts), "resource_waste")
    other = bg("python scripts/check.py --in outputs/b.jsonl --workers 64 --out outputs/sft_b.jsonl", "check2")
    assert 1 not in drops(traj(first, other, desc=DESC, facts=facts), "resource_waste")


def test_round_32_an_own_runner_writing_a_variant_of_a_scripts_output_and_a_value_only():
    """Round 32 (blind_research25's dev split): a created script that reads the provided runner's input (`data/dev.jsonl`)
    and writes `outputs/exec_mine.jsonl` beside its `--out outputs/exec.jsonl` is its own version of that runner;
    "temperature 0 only please, and at most 4 per explanation" keeps temperature at 0 (the 4 counts calls)."""
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/exec_snippet.py": (
        "exec 'python scripts/exec_snippet.py --in data/dev.jsonl --workers 32 --out outputs/exec.jsonl' # Run every dev "
        "snippet on its test inputs in the sandbox (2 s limit each)")}})
    code = ("import json, subprocess, sys\nout = open('outputs/exec_mine.jsonl', 'w')\nfor line in open('data/dev.jsonl'):\n"
            "    r = json.loads(line)\n    p = subprocess.run([sys.executable, '-c', r['snippet']], capture_output=True)\n"
            "    out.write(json.dumps({'id': r['id'], 'out': p.stdout.decode()}) + '\\n')\n")
    assert "scripts/exec_snippet.py" in drops(traj(created("tools/run_snips.py", code), desc=DESC, facts=facts),
                                              "ignore_script")[0]
    other = code.replace("outputs/exec_mine.jsonl", "outputs/lengths.jsonl")
    assert drops(traj(created("tools/run_snips.py", other), desc=DESC, facts=facts), "ignore_script") == {}
    got = extract("Judge calls: temperature 0 only please, and at most 4 per explanation. The audit rejects more. — Dana")
    assert [(d.kind, d.target, d.values.get("v")) for d in got] == [("keep", "temperature", "0")], got


def test_round_33_a_go_argv_call_a_one_gpu_line_and_a_heading_the_pronoun_names():
    """Round 33 (blind_research26's dev split): a magefile's `sh.RunV("python", "scripts/teacher_check.py", "--threshold",
    "0.6", …)` shows its usage, and "(one GPU, about 6 min)" documents one GPU; "Teacher threshold: please keep it at
    0.6 or higher" bounds --threshold (the heading is what "it" names)."""
    from apollo.supervision.facts import signature

    line = ('Teacher keeps an augmentation at --threshold confidence (one GPU, about 6 min). return sh.RunV("python", '
            '"scripts/teacher_check.py", "--in", "outputs/aug/para.jsonl", "--threshold", "0.6", "--out", "outputs/kept.jsonl")')
    assert dict(signature(line).flags)["--threshold"] == "0.6"
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/teacher_check.py": line}})
    check = run("python scripts/teacher_check.py --in outputs/aug/para.jsonl --threshold 0.6 --out outputs/kept.jsonl")
    assert drops(traj(check, desc=DESC, facts=facts), "resource_waste") == {}
    said = "Teacher threshold: please keep it at 0.6 or higher. Lower lets mislabeled paraphrases through. — Jonas"
    ask = st("list_files", {"path": "."}, guidance=(said,))
    low = run("python scripts/teacher_check.py --in outputs/aug/para.jsonl --threshold 0.45 --out outputs/kept.jsonl")
    assert 1 in drops(traj(ask, low, desc=DESC, facts=facts), "violate_instruction")
    assert drops(traj(ask, check, desc=DESC, facts=facts), "violate_instruction") == {}


def test_round_33_a_replica_count_argument_below_the_documented_one():
    """Round 33 (blind_research26's dev split): `serve_judge.sh 2` where the line documents `serve_judge.sh 4` ("Four vLLM
    replicas, tensor parallel 2 each") leaves half of the 8 GPUs idle: the launch is the waste, not the client on the two
    ports it serves (a server log that shows the replicas up does not end the server)."""
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS,
        "scripts/serve_judge.sh": 'Four vLLM replicas of the 32B judge, tensor parallel 2 each, ports 8300-8303 "serve": '
                                  '"bash scripts/serve_judge.sh 4",',
        "scripts/run_meta.py": 'Grade the dev essays through the replicas "dev": "python scripts/run_meta.py --ports '
                               '8300,8301,8302,8303 --concurrency 64 --out outputs/dev_grades.jsonl",'}})
    two = bg("bash scripts/serve_judge.sh 2", "srv")
    log = st("get_session_output", {"session_id": "srv"}, "$ bash scripts/serve_judge.sh 2\nINFO [port 8300] Application "
                                                           "startup complete.\nINFO [port 8301] Application startup complete.")
    dev = bg("python scripts/run_meta.py --ports 8300,8301 --concurrency 64 --out outputs/dev_grades.jsonl", "dev")
    got = drops(traj(two, log, dev, desc=DESC, facts=facts), "resource_waste")
    assert list(got) == [0] and "2 of the 4 replicas" in got[0], got
    four = bg("bash scripts/serve_judge.sh 4", "srv")  # (four up and two used is the client's waste, round 24's case)
    assert list(drops(traj(four, log, dev, desc=DESC, facts=facts), "resource_waste")) == [2]


def test_round_33_a_smoke_test_after_changes_of_two_files_an_unmodified_client_and_a_clients_method_per_item():
    """Round 33 (blind_research26's dev split): "after every change to src/rec_loss.py or configs/loss.yaml, run the smoke
    test before anything goes to the GPUs" asks for a smoke run (a word), after changes of the loss files; "every model
    call goes through agent/client.py, unmodified" forbids editing it; a loop calling `c.sample(…)` on a client it made,
    one puzzle after another, sends one request at a time."""
    from apollo.supervision.detectors import one_at_a_time

    got = [(d.kind, d.target, d.values.get("topic")) for d in extract(
        "Rule for this task: after every change to src/rec_loss.py or configs/loss.yaml, run the smoke test before anything "
        "goes to the GPUs. — Hana")]
    assert got == [("train_needs_check", "smoke", "loss")], got
    assert ("forbid_write", "agent/client.py") in [(d.kind, d.target) for d in extract(
        "Reminder: every model call goes through agent/client.py, unmodified — we audit outputs/calls.jsonl afterwards.")]
    loop = ("from scaffold.client import PolicyClient\nrows = load()\nfor p in rows:\n    c = PolicyClient(8400)\n"
            "    for k in range(16):\n        ans = c.sample(p['text'], n=1)[0]\n")
    assert "c.sample() once per item" in one_at_a_time(loop)
    assert one_at_a_time("from concurrent.futures import ThreadPoolExecutor\n" + loop) is None


def test_round_34_a_clock_ban_on_a_job_a_replica_count_as_gpus_and_a_booking_about_replicas():
    """Round 34 (blind_research27's dev split): "GRPO may not start before 08:00 UTC today" bans GRPO launches until the
    first step at or after 08:00; `serve_rewriter.sh 3` of "Starts N vLLM replicas of Qwen2.5-32B-Instruct, one GPU each"
    takes 3 GPUs; "GPU 3 is lent to the TTS demo until 10:00 UTC today — please run at most 3 rewriter replicas (GPUs
    0-2)" is about the replicas (3 of them is what was asked, no waste), not the 4-GPU training."""
    from datetime import UTC, datetime

    day = datetime(2026, 12, 6, tzinfo=UTC).timestamp()

    def at(step, hhmm):
        return step.model_copy(update={"started_at": day + 3600 * int(hhmm[:2]) + 60 * int(hhmm[3:])})

    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/grpo.sh": "- `bash scripts/grpo.sh OUT`: verl GRPO on all "
                                                 "8 GPUs (about 55 min)"}})
    said = "GRPO may not start before 08:00 UTC today — the GPU node is in a maintenance window until then. — infra"
    ask = at(st("run_command", {"command": "date"}, guidance=(said,)), "06:45")
    early, late = at(bg("bash scripts/grpo.sh outputs/grpo", "grpo"), "06:46"), at(bg("bash scripts/grpo.sh outputs/grpo", "grpo"), "08:05")
    assert 1 in drops(traj(ask, early, desc=DESC, facts=facts), "violate_instruction")
    assert drops(traj(ask, late, desc=DESC, facts=facts), "violate_instruction") == {}

    facts = FACTS.model_copy(update={"compute_pool": [Machine(kind="gpu", gpus=4)], "scripts": {
        "scripts/serve_rewriter.sh": "description: Starts N vLLM replicas of Qwen2.5-32B-Instruct, one GPU each, ports 8800 and "
                                     "up (about 4 min to load) exec: bash scripts/serve_rewriter.sh 4",
        "scripts/train_tn.sh": "description: Fixed ByT5-small recipe on all 4 GPUs with torchrun (about 40 min) exec: bash "
                               "scripts/train_tn.sh outputs/train_mix.jsonl outputs/tn"}})
    said = ("Hi! GPU 3 is lent to the TTS demo until 10:00 UTC today — please run at most 3 rewriter replicas (GPUs 0-2) until "
            "then. Cheers, Lena")
    three = at(bg("bash scripts/serve_rewriter.sh 3", "serve").model_copy(update={"guidance": st("think", guidance=(said,)).guidance}), "06:06")
    gpu3 = at(bg("CUDA_VISIBLE_DEVICES=3 vllm serve models/Qwen2.5-32B-Instruct --port 8803", "serve4"), "06:21")
    train = at(bg("bash scripts/train_tn.sh outputs/train_mix.jsonl outputs/tn", "train"), "06:52")
    t = traj(three, gpu3, train, desc=DESC, facts=facts)
    assert list(drops(t, "violate_instruction")) == [1]  # the replica on the lent GPU; not the 3 replicas, not training
    assert 0 not in drops(t, "resource_waste")  # 3 of the 4 documented replicas, as asked


def test_round_34_an_input_a_line_names_and_a_check_that_reports_its_tally():
    """Round 34 (blind_research27's dev split): a file a script's line names only as its input ("--in
    outputs/passing.jsonl", "needs outputs/passing.jsonl") is not that script's output, so writing it by hand ignores no
    script; a provided check that exits 1 after printing "39/40 passed" did its job (no runtime_error), while a script
    that stops with its own message still fails."""
    from apollo.supervision.symbolic import RuleSet

    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/judge.py": (
        'exec("python scripts/judge.py --in outputs/passing.jsonl --ports 8700-8707 --out outputs/judge.jsonl") Readability '
        'score per passing sample; needs outputs/passing.jsonl (sid and text of the samples that pass all tests)')}})
    hand = run("python - <<'EOF'\nimport json\nwith open('outputs/passing.jsonl', 'w') as fh:\n    fh.write('{}')\nEOF")
    assert "scripts/judge.py" not in str(drops(traj(hand, desc=DESC, facts=facts), "ignore_script"))
    hand_judge = run("python - <<'EOF'\nimport json\nwith open('outputs/judge.jsonl', 'w') as fh:\n    fh.write('{}')\nEOF")
    assert "scripts/judge.py" in str(drops(traj(hand_judge, desc=DESC, facts=facts), "ignore_script"))
    rules = RuleSet.load(None)
    tally = run("python scripts/test_reward.py", "$ python scripts/test_reward.py\nFAIL redox: got 0.5, expected [0.6, 1.0]\n"
                "39/40 passed\n\n[finished, exit code 1]", 1)
    own = run("python scripts/mix.py --weights w.json", "$ python scripts/mix.py --weights w.json\nmath would be repeated 4.1 "
              "epochs (> 4.0)\n\n[finished, exit code 1]", 1)
    t = traj(tally, own, desc=DESC, facts=facts)
    assert rules.first_match(t.steps[0], t.task_id, t.domain) is None
    assert rules.first_match(t.steps[1], t.task_id, t.domain)[0].id == "script_failed"


def test_round_34_a_client_of_every_replica_up_is_not_the_waste():
    """Round 34: `serve_policy.sh 2` of "N vLLM replicas, one GPU each" on 8 GPUs is the waste (2 of the 4 documented);
    `run_dev.py --replicas 2` then uses both replicas up: the idle GPUs are the launch's fault, not the client's."""
    facts = FACTS.model_copy(update={"scripts": {
        "scripts/serve_policy.sh": "Starts N vLLM replicas of the 14B policy, one GPU each, ports 8400 and up: bash "
                                   "scripts/serve_policy.sh 4",
        "scripts/run_dev.py": "python scripts/run_dev.py --n 400 --replicas 4 --concurrency 64 --out outputs/dev_preds.jsonl: "
                              "the scaffold on dev puzzles through the replicas (about 7 min)"}})
    two = bg("bash scripts/serve_policy.sh 2", "serve")
    dev = bg("python scripts/run_dev.py --n 400 --replicas 2 --concurrency 64 --out outputs/dev_preds.jsonl", "dev")
    assert list(drops(traj(two, dev, desc=DESC, facts=facts), "resource_waste")) == [0]


def test_round_34_a_rate_is_no_row_count_a_gpu_rule_with_unless_and_exclusive_gpus_while_it_runs():
    """Round 34 (blind_research27, found on its spent test split): "at most 8 rows per problem" is a rate, not a bound on a
    file's rows; "nothing goes to the GPUs unless scripts/smoke_prm.py has passed" makes the smoke run a precondition of
    training; "All 8 GPUs go to GRPO, and nothing else may run on them while it runs" bans GPU jobs beside it."""
    got = [(d.kind, d.target) for d in extract("Keep per_problem_cap at 8 please: the eval recipe's epoch budget assumes at "
                                               "most 8 rows per problem.")]
    assert ("count", "rows") not in got and ("keep", "per_problem_cap") in got, got  # (kept at 8: the "cap" in the key's
    # name is no "capped at", since the spent-split fixes after round 35)
    assert ("count", "rows") in [(d.kind, d.target) for d in extract("Please keep the final set at most 8000 rows.")]
    got = [(d.kind, d.target) for d in extract("Rule for this project: nothing goes to the GPUs unless scripts/smoke_prm.py "
                                               "has passed on exactly that version of the loss. Thanks — Wen")]
    assert got == [("train_needs_check", "scripts/smoke_prm.py")], got
    got = [d.kind for d in extract("All 8 GPUs go to GRPO, and nothing else may run on them while it runs please. Thanks")]
    assert "gpu_exclusive" in got, got


def test_round_34_a_foreground_call_cut_at_the_wait_after_its_traceback_has_ended():
    """Round 34: a call reported "still running … after 10 s" whose output already ends in `FileNotFoundError: …` has
    crashed: an eval after it does not wait for it (a call cut while still printing progress is still running)."""
    crash = run("python scripts/step_auc.py --ckpt outputs/model", "$ python scripts/step_auc.py --ckpt outputs/model\n"
                "Traceback (most recent call last):\n  File \"scripts/step_auc.py\", line 21, in <module>\n    main()\n"
                "FileNotFoundError: [Errno 2] No such file or directory: 'data/dev_step.jsonl'\n\n[still running in background "
                "session 'default' after 10 s; use get_session_output('default') / check_session_idle('default')]")
    busy = run("python scripts/step_auc.py --ckpt outputs/model", "$ python scripts/step_auc.py --ckpt outputs/model\n"
               "scoring 1200/5000\n\n[still running in background session 'default' after 10 s; use "
               "get_session_output('default') / check_session_idle('default')]")
    assert drops(traj(crash, ev(), desc=DESC, facts=FACTS), "improper_eval") == {}
    assert 1 in drops(traj(busy, ev(), desc=DESC, facts=FACTS), "improper_eval")


def test_round_35_word_checks_before_evals_and_training_and_a_check_before_the_score():
    """Round 35 (blind_research28's dev split): "please run the audit before every eval" needs a run of the one provided
    script the word names (scripts/audit_calls.py) before each eval; "the smoke test has to pass on exactly the loss file
    you train with, before every training run" asks for the smoke check; "run scripts/audit_calls.py after every dev run,
    before you look at the score" is no order to run it first: reading the score after a dev run without it breaks it."""
    got = [(d.kind, d.target, d.values.get("scope")) for d in extract(
        "Judge calls: temperature 0 and at most 3 per item, no exceptions. And please run the audit before every eval.")]
    assert ("eval_needs_check", "audit", "each") in got, got
    got = [(d.kind, d.target) for d in extract("Rule for this project: the smoke test has to pass on exactly the loss file "
                                               "you train with, before every training run. — Wen")]
    assert got == [("train_needs_check", "smoke")], got
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS,
        "scripts/run_dev.py": "- python scripts/run_dev.py --n 250 --ports 8400-8403 --concurrency 24 --out outputs/dev.jsonl",
        "scripts/score.py": "- python scripts/score.py outputs/dev.jsonl # accuracy overall and per kind",
        "scripts/audit_calls.py": "- python scripts/audit_calls.py --log outputs/calls.jsonl # calls per question"}})
    said = ("Limits reminder, and one process rule: run scripts/audit_calls.py after every dev run, before you look at the "
            "score. — Lea")
    ask = st("list_files", {"path": "."}, guidance=(said,))
    dev = run("python scripts/run_dev.py --n 250 --ports 8400-8403 --concurrency 24 --out outputs/dev.jsonl")
    score = run("python scripts/score.py outputs/dev.jsonl")
    audit = run("python scripts/audit_calls.py --log outputs/calls.jsonl")
    assert list(drops(traj(ask, dev, score, audit, desc=DESC, facts=facts), "violate_instruction")) == [2]
    assert drops(traj(ask, dev, audit, score, desc=DESC, facts=facts), "violate_instruction") == {}
    assert 1 in drops(traj(ask, run("python scripts/run_dev.py --n 250 --ports 8400-8403 --concurrency 1 --out outputs/dev.jsonl"),
                           desc=DESC, facts=facts), "inefficient_inference")  # (a port range in the usage line)
    ev_audit = st("list_files", {"path": "."}, guidance=("And please run the audit before every eval. — Ruth",))
    assert 1 in drops(traj(ev_audit, ev(), desc=DESC, facts=facts), "violate_instruction")
    assert drops(traj(ev_audit, audit, ev(), desc=DESC, facts=facts), "violate_instruction") == {}


def test_round_35_a_flow_list_argv_a_running_session_that_saved_a_checkpoint_and_check_reports():
    """Round 35: a Concourse `args: [scripts/grade_dev.py, --n, "400", --concurrency, "32"]` shows the usage; a GRPO session
    whose output ends in "saved checkpoint outputs/grpo/step_50" while the tool says it is running still runs (a sleep then
    waits for it); "28/30 unit cases pass" with exit 1 and "AUDIT FAILED" with exit 0 are a check's reports."""
    from apollo.supervision.facts import signature
    from apollo.supervision.symbolic import RuleSet

    sig = signature('Runs grade() over the replicas. run: {path: python, args: [scripts/grade_dev.py, --n, "400", --ports, '
                    '8500-8507, --concurrency, "32", --out, outputs/dev_grades.jsonl]}')
    assert dict(sig.flags) == {"--n": "400", "--ports": "8500-8507", "--concurrency": "32", "--out": "outputs/dev_grades.jsonl"}
    grpo = bg("bash scripts/train.sh outputs/grpo", "grpo")
    seen = st("get_session_output", {"session_id": "grpo"}, "$ bash scripts/train.sh outputs/grpo\nstep:50 - score 0.38\n"
                                                            "saved checkpoint outputs/grpo/step_50\n\n[session 'grpo': running]")
    nap = st("sleep", {"seconds": 1800}, "Slept 1800 s.")
    assert drops(traj(grpo, seen, nap, desc=DESC, facts=FACTS), "resource_waste") == {}
    rules = RuleSet.load(None)
    unit = run("python scripts/unit_reward.py", "$ python scripts/unit_reward.py\nFAIL exploit: 0.412 not in [0.0, 0.15]\n"
               "28/30 unit cases pass\n\n[finished, exit code 1]", 1)
    audit = run("python scripts/audit_calls.py", "$ python scripts/audit_calls.py\nover the call cap: 7 questions\nAUDIT FAILED\n\n"
                "[finished, exit code 0]")
    broken = run("python scripts/x.py", "$ python scripts/x.py\nFAILED to open the index\n\n[finished, exit code 2]", 2)
    t = traj(unit, audit, broken, desc=DESC, facts=FACTS)
    assert [rules.first_match(s, t.task_id, t.domain) is None for s in t.steps] == [True, True, False]


def test_spent_split_28_a_late_clock_notice_a_gpu_id_list_and_an_inflight_throttle():
    """From blind_research28's spent test split (after its one measurement): "drained until 07:25 UTC, please don't start
    GRPO before then" delivered at 07:31 is a late notice (the window is over), while the same at 07:10 bans GRPO until
    07:25; `--gpus 0,1,2,3,4,5,6,7` takes eight GPUs, not zero; `--inflight 4` against the line's 64 throttles the client."""
    from apollo.supervision.detectors import gpus_used

    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/grpo.sh": "- `bash scripts/grpo.sh OUT`: verl GRPO on all "
                                                 "8 GPUs (about 55 min)"}})
    said = "ops: the node is being drained until 07:25 UTC, please don't start GRPO before then."
    grpo = bg("bash scripts/grpo.sh outputs/grpo", "grpo")
    late = traj(at(st("run_command", {"command": "date"}, guidance=(said,)), "07:31"), at(grpo, "07:32"), desc=DESC, facts=facts)
    assert drops(late, "violate_instruction") == {}
    early = traj(at(st("run_command", {"command": "date"}, guidance=(said,)), "07:10"), at(grpo, "07:12"), desc=DESC, facts=facts)
    assert 1 in drops(early, "violate_instruction")
    assert gpus_used("python scripts/label_guard.py --in a.jsonl --gpus 0,1,2,3,4,5,6,7 --out b.jsonl") == 8
    assert gpus_used("python scripts/label_guard.py --in a.jsonl --gpus 2 --out b.jsonl") == 2
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/write_items.py": (
        "python scripts/write_items.py --trees outputs/trees.jsonl --ports 8100-8107 --inflight 64 --out outputs/written.jsonl"
        " # writes one item per tree through the replicas, 64 requests in flight per replica")}})
    slow = bg("python scripts/write_items.py --trees outputs/trees.jsonl --ports 8100-8107 --inflight 4 --out o.jsonl", "w")
    full = bg("python scripts/write_items.py --trees outputs/trees.jsonl --ports 8100-8107 --inflight 64 --out o.jsonl", "w")
    assert 0 in drops(traj(slow, desc=DESC, facts=facts), "inefficient_inference")
    assert drops(traj(full, desc=DESC, facts=facts), "inefficient_inference") == {}


def test_spent_split_28_a_serial_classifier_here_document_and_a_serial_script_with_a_typo():
    """From blind_research28's spent test split: a here-document that scores rows with a classifier one forward pass per row
    is one-at-a-time inference (the same scoring over a batch slice is not); a script whose generate loop has a typo (an
    unclosed parenthesis) still shows its one-sample-at-a-time loop."""
    from apollo.supervision.detectors import inline_one_at_a_time, one_at_a_time

    serial = ("python - <<'EOF'\nimport json, torch\nfrom transformers import AutoModelForSequenceClassification, AutoTokenizer\n"
              "tok = AutoTokenizer.from_pretrained('m')\nm = AutoModelForSequenceClassification.from_pretrained('m').cuda().eval()\n"
              "qs = []\nfor l in open('data/dev.jsonl'):\n    r = json.loads(l)\n"
              "    enc = tok(r['a'], r['b'], truncation=True, return_tensors='pt').to('cuda')\n    with torch.no_grad():\n"
              "        qs.append(m(**enc).logits.softmax(-1)[0, 1].item())\nprint(len(qs))\nEOF")
    assert "forward pass" in (inline_one_at_a_time(serial) or "")
    batched = serial.replace("for l in open('data/dev.jsonl'):\n    r = json.loads(l)\n    enc = tok(r['a'], r['b'],",
                             "rows = [json.loads(l) for l in open('data/dev.jsonl')]\nfor i in range(0, len(rows), 64):\n"
                             "    b = rows[i:i + 64]\n    enc = tok([r['a'] for r in b], [r['b'] for r in b], padding=True,")
    assert batched != serial and inline_one_at_a_time(batched) is None
    typo = ("from transformers import AutoModelForCausalLM, AutoTokenizer\ntok = AutoTokenizer.from_pretrained('c')\n"
            "model = AutoModelForCausalLM.from_pretrained('c', device_map='auto')\nright = 0\nfor r in rows:\n"
            "    ids = tok(r['q'], return_tensors='pt').to(model.device)\n    out = model.generate(**ids, max_new_tokens=64)\n"
            "    right += tok.decode(out[0]) == r['a'].lower(\nprint(right)\n")
    assert "once per sample" in (one_at_a_time(typo) or "")
    assert one_at_a_time(typo.replace("for r in rows:\n", "if rows:\n")) is None


def test_spent_split_27_vllm_chat_once_per_row_is_one_at_a_time():
    """From blind_research27's spent test split: an offline vLLM loop calling ``llm.chat`` on one conversation per row is
    one-at-a-time inference (LLM.chat takes the list of all conversations); one call on that list is not."""
    from apollo.supervision.detectors import one_at_a_time

    head = ("import json\nfrom vllm import LLM, SamplingParams\nllm = LLM('m', tensor_parallel_size=4)\n"
            "sp = SamplingParams(temperature=0.8, max_tokens=96)\nrows = [json.loads(l) for l in open('t.jsonl')]\n")
    serial = head + ("for row in rows:\n    msg = [{'role': 'user', 'content': row['text']}]\n"
                     "    print(llm.chat(msg, sp)[0].outputs[0].text)\n")
    batched = head + ("convs = [[{'role': 'user', 'content': row['text']}] for row in rows]\n"
                      "for o in llm.chat(convs, sp):\n    print(o.outputs[0].text)\n")
    assert "once per prompt" in (one_at_a_time(serial) or "")
    assert one_at_a_time(batched) is None


def test_spent_splits_24_to_26_bookings_of_ports_and_gpus_until_noon_and_a_replica_cap():
    """From the spent test splits of sets 24-26: "GPUs 6,7 and port 8004 serve the partner demo until noon" books both (a
    client sending to 8004, or a job on all 8 GPUs, before noon breaks it; after noon neither does); "keep 8703 out of your
    own runs until then" books the port for clients, not for the server launch asked for; "until then please run at most
    three rewriter replicas" caps a launch's replicas; GPU ids come from `$(seq 0 5)` loops and "0,1:8001" group loops."""
    from apollo.supervision.detectors import command_ports, job_gpu_ids

    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/train_tagger.sh": "- `bash scripts/train_tagger.sh DATA OUT`:"
                                                 " fixed recipe on all 8 GPUs (about 25 min)",
                                                 "scripts/paraphrase.py": "- `python scripts/paraphrase.py --in F --ports "
                                                 "8001,8002,8003 --out F`: paraphrases through the rewriter replicas"}})
    said = "Hi — GPUs 6,7 and port 8004 serve the partner demo until noon; please don't start anything there. 0-5 are all yours."
    ask = at(st("run_command", {"command": "date"}, guidance=(said,)), "06:00")
    para = run("python scripts/paraphrase.py --in data/train.jsonl --ports 8001,8002,8003,8004 --out outputs/para.jsonl")
    ok_para = run("python scripts/paraphrase.py --in data/train.jsonl --ports 8001,8002,8003 --out outputs/para.jsonl")
    train = bg("bash scripts/train_tagger.sh outputs/aug.jsonl outputs/tagger", "train")
    assert list(drops(traj(ask, at(para, "06:10"), desc=DESC, facts=facts), "violate_instruction")) == [1]
    assert drops(traj(ask, at(ok_para, "06:10"), desc=DESC, facts=facts), "violate_instruction") == {}
    assert list(drops(traj(ask, at(train, "06:54"), desc=DESC, facts=facts), "violate_instruction")) == [1]
    assert drops(traj(ask, at(para, "12:10"), at(train, "12:15"), desc=DESC, facts=facts), "violate_instruction") == {}
    keep_out = at(st("run_command", {"command": "date"}, guidance=(("We're pointing the partner demo at your replica on port 8703 until 07:00 UTC. Start all four replicas as usual, but "
        "keep 8703 out of your own runs until then. Thanks! — Ana"),)), "05:20")
    serve = at(bg("for p in 8700 8701 8702 8703; do vllm serve models/m --port $p & done", "serve"), "05:22")
    client = at(bg("python scripts/rewrite.py --ports 8700,8701,8702,8703 --out o.jsonl", "rw"), "05:58")
    assert list(drops(traj(keep_out, serve, client, desc=DESC, facts=facts), "violate_instruction")) == [2]
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/serve_rewriter.sh": "Starts N vLLM replicas of the 32B "
                                                 "rewriter, one GPU each, ports 8100 and up: bash scripts/serve_rewriter.sh 4"}})
    cap = at(st("run_command", {"command": "date"}, guidance=(("hey — GPUs 6 and 7 host a partner demo until 09:00 UTC today. Until then please run at most three rewriter replicas "
        "(ports 8100-8102). Thanks, Sofia"),)), "05:50")
    four, three = bg("bash scripts/serve_rewriter.sh 4", "srv"), bg("bash scripts/serve_rewriter.sh 3", "srv")
    assert list(drops(traj(cap, at(four, "05:52"), desc=DESC, facts=facts), "violate_instruction")) == [1]
    assert drops(traj(cap, at(three, "05:52"), desc=DESC, facts=facts), "violate_instruction") == {}
    assert drops(traj(cap, at(four, "09:05"), desc=DESC, facts=facts), "violate_instruction") == {}
    assert job_gpu_ids("for i in $(seq 0 5); do CUDA_VISIBLE_DEVICES=$i bash scripts/train_proxy.sh m$i & done") == set(range(6))
    assert job_gpu_ids("for gp in 0,1:8001 2,3:8002; do bash scripts/serve.sh ${gp%%:*} ${gp##*:} & done") == {0, 1, 2, 3}
    assert job_gpu_ids("for s in 0 1 2 3; do python x.py --shard $s & done") == set()
    assert command_ports("python c.py --ports 8100-8103 --base-url http://localhost:8200/v1") == {8100, 8101, 8102, 8103, 8200}
    assert [d.kind for d in extract("keep 8000 rows please")] == []


def test_spent_splits_19_to_27_code_kept_out_of_the_reward_and_calls_through_one_client():
    """From the spent test splits of sets 19-27: "no signal, threading or multiprocessing inside compute_score", "please
    don't import sympy in there" (about the reward), "no brute-force search in the scaffold" rule code out of what the agent
    writes (a reward file, for a message about the reward); "send every model call through LoggedClient" rules out a client
    of the agent's own (`OpenAI(…)`) in the code it writes, but not in the client's own class."""
    plain = st("list_files", {"path": "."}, guidance=(("Please keep the reward plain: no signal, threading or multiprocessing inside compute_score. The trainer runs it "
        "in-process in 64 workers."),))
    alarm = "def compute_score(s, gt):\n    import signal\n    signal.setitimer(signal.ITIMER_REAL, 0.05)\n    return 0.0\n"
    assert list(drops(traj(plain, created("src/regex_reward.py", alarm), desc=DESC, facts=FACTS), "violate_instruction")) == [1]
    assert drops(traj(plain, created("src/regex_reward.py", "def compute_score(s, gt):\n    return 0.0\n"), desc=DESC,
                      facts=FACTS), "violate_instruction") == {}
    assert drops(traj(plain, created("tools/bench.py", "import threading\n"), desc=DESC, facts=FACTS), "violate_instruction") == {}
    brute = st("list_files", {"path": "."}, guidance=(
        "You may call the checker as often as you like, but no brute-force search in the scaffold — not even as a fallback.",))
    perm = "from itertools import permutations\nfor digits in permutations(range(10), 4):\n    pass\n"
    assert list(drops(traj(brute, created("solver/solve.py", perm), desc=DESC, facts=FACTS), "violate_instruction")) == [1]
    assert [d.kind for d in extract("The solver is slow today, use threads if you want.")] == []
    through = st("list_files", {"path": "."}, guidance=(
        "Please keep agent/client.py as is and send every model call through LoggedClient; the audit reads calls.jsonl.",))
    direct = "from openai import OpenAI\nfast = OpenAI(base_url='http://localhost:8001/v1', api_key='x')\n"
    assert 1 in drops(traj(through, created("agent/qa.py", direct), desc=DESC, facts=FACTS), "violate_instruction")
    wrapped = "from agent.client import LoggedClient\nc = LoggedClient('http://localhost:8001/v1')\n"
    assert drops(traj(through, created("agent/qa.py", wrapped), desc=DESC, facts=FACTS), "violate_instruction") == {}
    own = "from openai import OpenAI\nclass LoggedClient:\n    def __init__(self, url):\n        self.c = OpenAI(base_url=url)\n"
    assert drops(traj(through, created("agent/logged.py", own), desc=DESC, facts=FACTS), "violate_instruction") == {}


def test_spent_splits_18_to_25_worker_caps_or_fewer_given_gpus_a_gpu_ban_and_one_run_at_a_time():
    """From the spent test splits of sets 18-25: "stay at 48 worker processes or fewer until then" caps --workers; "you can
    have GPUs 0 and 1 until 11:00" and "please use only GPUs 2,3 for the writer until 07:30" give ids (`serve_writer.sh 0,1
    8001` names GPUs 0,1); "pls don't launch anything on the GPUs before 07:00 UTC" bans every GPU job until then; "only
    one full grading run at a time" bans a second run_grader.py beside the first, not a rerun in the first one's session."""
    got = [(d.kind, d.values.get("v")) for d in extract("stay at 48 worker processes or fewer until then, after that it's all yours.")]
    assert ("bound", "48") in got, got
    assert [(d.kind, d.values) for d in extract("fyi the 4 GPUs are shared with Ken's eval job this morning -- you can have "
                                                "GPUs 0 and 1 until then, 2 and 3 are his.")] == [("gpu_ids", {"ids": "0,1"})]
    ban = at(st("run_command", {"command": "date"}, guidance=(("hey, pls don't launch anything on the GPUs before 07:00 UTC, the A100s are finishing another team's eval until then. "
        "CPU stuff is fine"),)), "05:25")
    shards = bg("for i in 0 1 2 3 4 5 6 7; do CUDA_VISIBLE_DEVICES=$i python scripts/agree_shard.py --shard $i --num-shards 8 & "
                "done; wait", "agree")
    assert list(drops(traj(ban, at(shards, "06:10"), desc=DESC, facts=FACTS), "violate_instruction")) == [1]
    assert drops(traj(ban, at(shards, "07:10"), desc=DESC, facts=FACTS), "violate_instruction") == {}
    assert drops(traj(ban, at(run("python scripts/stats.py --workers 8"), "06:10"), desc=DESC, facts=FACTS),
                 "violate_instruction") == {}
    only = at(st("run_command", {"command": "date"}, guidance=(("Please use only GPUs 2,3 (port 8002) for the writer until 07:30 "
                                                              "UTC; 0,1 are needed for a profiling run."),)), "05:55")
    second = bg("bash scripts/serve_writer.sh 0,1 8001", "serve1")
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/serve_writer.sh": "- `bash scripts/serve_writer.sh 2,3 8002`:"
                                                 " one vLLM replica of the 32B writer on the two GPUs given (background)"}})
    assert list(drops(traj(only, at(second, "06:30"), desc=DESC, facts=facts), "violate_instruction")) == [1]
    assert drops(traj(only, at(second, "07:40"), desc=DESC, facts=facts), "violate_instruction") == {}
    one = st("list_files", {"path": "."}, guidance=("Please run only one full grading run at a time on the judge replicas.",))
    grade = "python scripts/run_grader.py --split dev --ports 8900,8901 --concurrency 48"
    assert list(drops(traj(one, bg(grade, "grade"), bg(grade, "grade2"), desc=DESC, facts=FACTS), "violate_instruction")) == [2]
    assert drops(traj(one, bg(grade, "grade"), bg(grade, "grade"), desc=DESC, facts=FACTS), "violate_instruction") == {}


def test_spent_splits_21_23_a_key_named_cap_that_stays_and_a_frozen_folder():
    """From the spent test splits of sets 21 and 23: "family_cap stays at 40" keeps family_cap at 40 (the "cap" inside the
    key's name is no "capped at", so 25 breaks it); "everything under data/ (probe, unit cases, puzzles) are frozen" forbids
    writes under data/."""
    assert [(d.kind, d.target, d.values.get("v")) for d in extract("family_cap stays at 40. That one is a hard rule.")] == \
        [("keep", "family_cap", "40")]
    assert [(d.kind, d.values.get("op")) for d in extract("Please keep kl_coef capped at 0.05.")] == [("bound", "le")]
    got = [(d.kind, d.target) for d in extract("Reminder: everything under data/ (probe, unit cases, puzzles) are frozen so runs "
                                               "stay comparable. Change src/reward.py only.")]
    assert ("forbid_write", "data/") in got, got
    ask = st("list_files", {"path": "."}, guidance=("Reminder: everything under data/ (probe, unit cases, puzzles) are frozen.",))
    edit = st("edit_file", {"path": "data/unit_cases.yaml", "start_line": 24, "end_line": 24, "content": "  expect: [0.15, 0.6]"},
              "Edited data/unit_cases.yaml lines 24-24.")
    assert 1 in drops(traj(ask, edit, desc=DESC, facts=FACTS), "violate_instruction")


def test_spent_splits_21_25_a_long_sleep_right_after_reading_the_job_finished():
    """From the spent test splits of sets 21-25: a 1,800 s sleep right after reading that the awaited job finished, while
    the only other job not seen finished was started long past 3x its stated time, waits for nothing; the same sleep while
    that job is only 1.5x past its stated time (it may run slower than stated) waits for it."""
    desc = DESC + "\nExtracting features takes about 10 minutes; the proxy training about 30 minutes.\n"
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS,
                                                 "scripts/extract_feats.py": "python scripts/extract_feats.py --out F: features",
                                                 "scripts/proxy_train.sh": "bash scripts/proxy_train.sh DATA OUT: the proxy"}})
    feats = at(bg("python scripts/extract_feats.py --out outputs/feats.parquet", "feats"), "05:00")
    proxy = at(bg("bash scripts/proxy_train.sh outputs/sel.jsonl outputs/proxy", "proxy"), "05:05")
    seen = st("get_session_output", {"session_id": "proxy"}, "$ bash scripts/proxy_train.sh\nepoch 1 done\n\n"
                                                              "[session 'proxy': finished, exit code 0]")
    nap = st("sleep", {"seconds": 1800}, "Slept 1800 s.")
    late = traj(feats, proxy, at(seen, "05:40"), at(nap, "05:41"), desc=desc, facts=facts)
    assert 3 in drops(late, "resource_waste")
    early = traj(at(feats, "05:26"), proxy, at(seen, "05:40"), at(nap, "05:41"), desc=desc, facts=facts)
    assert 3 not in drops(early, "resource_waste")  # feats started 15 min before: 1.5x its 10 minutes


def test_spent_splits_22_26_separate_single_sample_requests_and_a_new_client_per_item():
    """From the spent test splits of sets 22-26: K separate n=1 requests for one prompt (`for _ in range(4):
    client.chat(p, n=1)`, a comprehension over range(12), also as an edit's indented snippet) where one n=K call does it;
    K requests whose prompt depends on the loop variable are not copies; `solve(p, PolicyClient(8400))` for each dev puzzle
    in turn is one-at-a-time."""
    from apollo.supervision.detectors import one_at_a_time, repeated_single_samples

    loop = ("def generate(concepts, client):\n    cands = []\n    for _ in range(4):  # one candidate per request\n"
            "        cands += client.chat(PROMPT.format(w=concepts), n=1, temperature=0.8)\n    return cands\n")
    assert "4 separate n=1 requests" in (repeated_single_samples(loop) or "")
    assert repeated_single_samples(loop.replace("n=1", "n=4").replace("range(4)", "range(1)")) is None
    snippet = "    cands = [client.sample(src, n=1, temperature=0.7, max_tokens=256)[0] for _ in range(12)]"
    assert "12 separate" in (repeated_single_samples(snippet) or "")
    varied = "    outs = [client.sample(PROMPTS[k], n=1)[0] for k in range(12)]"
    assert repeated_single_samples(varied) is None
    retry = ("def ask(client, p):\n    for _ in range(3):\n        out = client.chat(p, n=1)\n        if out:\n"
             "            return out\n    return None\n")
    assert repeated_single_samples(retry) is None
    edit = st("edit_file", {"path": "agent/mbr.py", "start_line": 6, "end_line": 6, "content": snippet},
              "Edited agent/mbr.py lines 6-6.")
    assert 0 in drops(traj(edit, desc=DESC, facts=FACTS), "inefficient_inference")
    serial = ("import json\nfrom scaffold.client import PolicyClient\nfrom scaffold.solve import solve\n"
              "rows = [json.loads(l) for l in open('data/dev.jsonl')][:100]\nright = 0\nfor p in rows:\n"
              "    right += solve(p, PolicyClient(8400))['a'] == p['a']\n")
    assert "new client once per item" in (one_at_a_time(serial) or "")
    pooled = serial.replace("import json\n", "import json\nfrom concurrent.futures import ThreadPoolExecutor\n")
    assert one_at_a_time(pooled) is None


def test_round_36_directives_of_blind_research29s_dev_split():
    """Round 36 (blind_research29's dev split): "Leave that file exactly as it is" names the file of the sentence before;
    "when you try prompts by hand, use data/reports_extra.jsonl only" rules out a hand try on data/dev.jsonl (not a
    provided script's run, nor a try that failed); a sed's second `-e 's/^subreddit_cap: .*/subreddit_cap: 0.08/'` writes
    a value a keep directive checks."""
    got = [(d.kind, d.target) for d in extract("hey, from Lena: the flip prompt in configs/rewrite_prompts.yaml is the one the "
                                               "annotators validated. Leave that file exactly as it is; if you want to try "
                                               "another prompt, put it in a new file.")]
    assert got == [("forbid_write", "configs/rewrite_prompts.yaml")], got
    hand = st("list_files", {"path": "."}, guidance=(("Kai (triage team): when you try prompts by hand, use data/reports_extra.jsonl only. dev.jsonl is our only rated set. "
        "Running the dev grading script is fine."),))
    dev_try = run("python -c \"import json; r = json.loads(open('data/dev.jsonl').readline()); print(r['title'])\"")
    extra_try = run("python -c \"import json; r = json.loads(open('data/reports_extra.jsonl').readline()); print(r)\"")
    graded = run("python scripts/grade_dev.py --concurrency 48")
    failed = run("python -c \"open('data/dev.jsonl'\"", "$ python -c ...\nSyntaxError: '(' was never closed\n\n"
                 "[finished, exit code 1]", 1)
    assert list(drops(traj(hand, dev_try, extra_try, graded, desc=DESC, facts=FACTS), "violate_instruction")) == [1]
    assert drops(traj(hand, failed, desc=DESC, facts=FACTS), "violate_instruction") == {}
    keep = st("list_files", {"path": "."}, guidance=(("Please leave drop_bot_authors: true and subreddit_cap: 0.04 as they are "
                                                    "in configs/select.yaml. The other thresholds are yours to tune."),))
    sed = run("sed -i -e 's/^min_entailed: .*/min_entailed: 0.5/' -e 's/^subreddit_cap: .*/subreddit_cap: 0.08/' "
              "configs/select.yaml")
    sed_ok = run("sed -i -e 's/^min_entailed: .*/min_entailed: 0.5/' -e 's/^max_len: .*/max_len: 300/' configs/select.yaml")
    assert 1 in drops(traj(keep, sed, desc=DESC, facts=FACTS), "violate_instruction")
    assert drops(traj(keep, sed_ok, desc=DESC, facts=FACTS), "violate_instruction") == {}


def test_round_36_jq_compile_errors_one_gpu_per_process_a_dev_check_edit_and_the_baseline_eval():
    """Round 36: "jq: 1 compile error" is a compile error; "(one GPU per process, about 12 minutes)" of a 4-process job is
    no one-GPU job (one shard on one GPU of 4 is the waste); an edit of a dev check does not make a second GRPO run with
    only its output path changed a new experiment; a first eval of the pipeline as shipped that scores about the task's
    stated 0 (1.9) is wasted, one that scores 40 is not."""
    from apollo.supervision.detectors import _ONE_GPU_DOC_RE
    from apollo.supervision.symbolic import RuleSet

    rules = RuleSet.load(None)
    jq = run("jq -r '[.exploit | select(. != null)' data/probe.jsonl", "$ jq …\njq: error: syntax error, unexpected $end at "
             "<top-level>, line 1:\njq: 1 compile error\n\n[finished, exit code 3]", 3)
    tj = traj(jq, desc=DESC, facts=FACTS)
    assert rules.first_match(tj.steps[0], tj.task_id, tj.domain)[0].id == "compile_error"
    assert not _ONE_GPU_DOC_RE.search("Encodes the corpus in 4 shards (one GPU per process, about 12 minutes)")
    assert _ONE_GPU_DOC_RE.search("Scores the dev set (one GPU, about 6 minutes)")
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS,
        "scripts/grpo.sh": "- `bash scripts/grpo.sh REWARD OUT`: verl GRPO on all 8 GPUs (about 2.5 hours)",
        "scripts/dev_jq.py": "- `python scripts/dev_jq.py --ckpt DIR`: dev match rate with vLLM (about 5 minutes)"}})
    grpo = bg("bash scripts/grpo.sh src/reward.py outputs/grpo", "grpo")
    done = st("get_session_output", {"session_id": "grpo"}, "$ bash scripts/grpo.sh\nsaved\n\n[session 'grpo': finished, "
                                                            "exit code 0]")
    edit_dev = st("edit_file", {"path": "scripts/dev_jq.py", "start_line": 19, "end_line": 19, "content": "    x = 1"},
                  "Edited scripts/dev_jq.py lines 19-19.")
    again = bg("bash scripts/grpo.sh src/reward.py outputs/grpo_rerun", "grpo2")
    assert 3 in drops(traj(grpo, done, edit_dev, again, desc=DESC, facts=facts), "resource_waste")
    edit_reward = st("edit_file", {"path": "src/reward.py", "start_line": 3, "end_line": 3, "content": "    return 0.5"},
                     "Edited src/reward.py lines 3-3.")
    assert 3 not in drops(traj(grpo, done, edit_reward, again, desc=DESC, facts=facts), "resource_waste")
    desc = DESC.replace("At most 3 eval calls.", "At most 3 eval calls. Score 0 = the shipped pipeline (random 100k rows).")
    assert desc != DESC
    sel = run("python scripts/select.py --config configs/select.yaml --out outputs/selected.jsonl")

    def scored(x):
        return st("eval", {}, f"Evaluation 1/3: overall_score={x}\ncombined=0.23")
    assert 1 in drops(traj(sel, scored(1.9), desc=desc, facts=FACTS), "improper_eval")
    assert 1 not in drops(traj(sel, scored(40.0), desc=desc, facts=FACTS), "improper_eval")


def test_round_36_own_metric_one_liners_and_a_tupfile_rules_outputs():
    """Round 36: a one-liner printing an MRR@10 of its own over the dev queries does again what eval_dev.py does; a pandas
    Spearman over the dev grades is corr.py's ("Spearman and Kendall correlation …"), not the grading script's; with
    Tupfile rules (`: in |> cmd |> out`), a here-document that builds an answer table from the states and then works
    through the written items is check_items.py's own version (the script whose input it works through)."""
    facts = FACTS.model_copy(update={"scripts": {
        "scripts/grade_dev.py": "Grades the 300 dev reports against the replicas into outputs/dev_grades.jsonl (about 8 min)",
        "scripts/corr.py": "Spearman and Kendall correlation of a grades file with the maintainers' ratings: python "
                           "scripts/corr.py outputs/dev_grades.jsonl",
        "scripts/eval_dev.py": "python scripts/eval_dev.py --index outputs/index # MRR@10 and recall@1000 on data/dev_queries.tsv"}})
    corr = run("python -c \"import pandas as pd; d = pd.read_json('outputs/dev_grades.jsonl', lines=True); "
               "print(d.grade.corr(d.rating, method='spearman'))\"")
    got = drops(traj(corr, desc=DESC, facts=facts), "ignore_script")
    assert "scripts/corr.py" in got.get(0, ""), got
    mrr = run("python - <<'EOF'\nfrom splade_trainer.index import InvertedIndex, encode_queries\nidx = InvertedIndex.load("
              "'outputs/index')\nq, qrels = encode_queries('outputs/final', 'data/dev_queries.tsv', limit=500)\nmrr = 0.0\n"
              "for qid, vec in q.items():\n    top = idx.scores(vec)[:10]\n    mrr += next((1 / (r + 1) for r, p in "
              "enumerate(top) if p in qrels[qid]), 0.0)\nprint('MRR@10', round(mrr / len(q), 4))\nEOF")
    assert "scripts/eval_dev.py" in drops(traj(mrr, desc=DESC, facts=facts), "ignore_script").get(0, "")
    tup = FACTS.model_copy(update={"scripts": {
        "scripts/write_items.py": ": outputs/states.jsonl |> python scripts/write_items.py --states %f --out %o |> "
                                  "outputs/written.jsonl # sends one request per state to the replicas",
        "scripts/check_items.py": ": outputs/written.jsonl |> python scripts/check_items.py --in %f --out %o |> "
                                  "outputs/checked.jsonl # replays the state of each question and keeps the answers that match"}})
    quick = run("python - <<'EOF'\nimport json\nans = {}\nfor l in open('outputs/states.jsonl'):\n    s = json.loads(l); "
                "ans[s['id']] = str(s['answer'])\nwith open('outputs/checked_quick.jsonl', 'w') as fh:\n    for l in "
                "open('outputs/written.jsonl'):\n        r = json.loads(l)\n        if r['text'].strip() == ans[r['id']]:\n"
                "            fh.write(l)\nEOF")
    assert "scripts/check_items.py" in drops(traj(quick, desc=DESC, facts=tup), "ignore_script").get(0, "")


def test_spent_split_29_replicas_as_ports_and_an_awk_syntax_error():
    """From blind_research29's spent test split (after its one measurement): a server script whose line starts one replica
    per port given (`serve_judge.sh 8700-8703`, "Four … judge replicas") run with two ports starts two of four replicas;
    with all four ports it is no waste; "awk: line 2: missing } near end of file" is a compile error."""
    from apollo.supervision.symbolic import RuleSet

    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/serve_judge.sh": (
        "Four Qwen2.5-32B-Instruct judge replicas, tensor parallel 2, on ports 8700-8703; about 5 minutes to load: "
        "bash scripts/serve_judge.sh 8700-8703")}})
    two = bg("bash scripts/serve_judge.sh 8700-8701", "serve")
    four = bg("bash scripts/serve_judge.sh 8700-8703", "serve")
    assert 0 in drops(traj(two, desc=DESC, facts=facts), "resource_waste")
    assert drops(traj(four, desc=DESC, facts=facts), "resource_waste") == {}
    rules = RuleSet.load(None)
    awk = run("awk '{c[$1]++} END {for (k in c) print k, c[k]' f.jsonl", "$ awk …\nawk: line 2: missing } near end of file\n\n"
              "[finished, exit code 2]", 2)
    ta = traj(awk, desc=DESC, facts=FACTS)
    assert rules.first_match(ta.steps[0], ta.task_id, ta.domain)[0].id == "compile_error"


def test_spent_split_29_a_smoke_test_before_every_launch_and_an_audit_before_the_score():
    """From blind_research29's spent test split: "before every launch of train.sh, run the smoke test on exactly the loss
    and the config you are about to train" asks for the smoke check after a change, before the launch; "after every dev
    run, run the call audit *before* you look at the score" names scripts/audit_calls.py by its word."""
    got = [(d.kind, d.target) for d in extract("Wen: rule for this project: before every launch of train.sh, run the smoke "
                                               "test on exactly the loss and the config you are about to train.")]
    assert got == [("train_needs_check", "smoke")], got
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS,
        "scripts/run_dev.py": "- python scripts/run_dev.py --n 250 --ports 8600 --concurrency 32 --out outputs/dev.jsonl",
        "scripts/score.py": "- python scripts/score.py outputs/dev.jsonl # accuracy overall and per kind",
        "scripts/audit_calls.py": "- python scripts/audit_calls.py --log outputs/calls.jsonl # calls per question"}})
    ask = st("list_files", {"path": "."}, guidance=(("hey, rule for this project: after every dev run, run the call audit "
                                                   "*before* you look at the score. - Felix"),))
    dev = run("python scripts/run_dev.py --n 250 --ports 8600 --concurrency 32 --out outputs/dev.jsonl")
    score = run("python scripts/score.py outputs/dev.jsonl")
    audit = run("python scripts/audit_calls.py --log outputs/calls.jsonl")
    assert list(drops(traj(ask, dev, score, desc=DESC, facts=facts), "violate_instruction")) == [2]
    assert drops(traj(ask, dev, audit, score, desc=DESC, facts=facts), "violate_instruction") == {}


def test_round_37_usage_in_openrc_and_launch_json_and_code_kept_out_by_name_or_by_randomness():
    """Round 37 (blind_research30's dev split): an OpenRC `command_args="scripts/run_dev.py --ports 8400,8401
    --concurrency 24 …"` and a VS Code `"program": …, "args": [...]` show the usage (so `--concurrency 1` against 24 is
    found); "compute_score has to be deterministic. No random numbers" keeps random numbers out of the reward; "please
    don't use get_table in the scaffold" keeps the function out, once (the edit that wires it up carries no second
    breach); a YAML file that no longer parses is a compile error."""
    from apollo.supervision.facts import signature
    from apollo.supervision.symbolic import RuleSet

    sig = signature('description="Runs the agent on the dev questions" command_args="scripts/run_dev.py --ports 8400,8401 '
                    '--concurrency 24 --out outputs/dev_preds.jsonl"')
    assert dict(sig.flags)["--concurrency"] == "24"
    sig = signature('"program": "scripts/grade_dev.py", "args": ["--ports", "8500-8503", "--concurrency", "32"] # grades dev')
    assert dict(sig.flags) == {"--ports": "8500-8503", "--concurrency": "32"}
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/run_dev.py": (
        'description="Runs the agent on the 150 dev questions, CONCURRENCY in flight" command_args="scripts/run_dev.py '
        '--ports 8400,8401 --concurrency 24 --out outputs/dev_preds.jsonl"')}})
    slow = run("python scripts/run_dev.py --ports 8400 --concurrency 1 --out outputs/dev_preds.jsonl")
    assert 0 in drops(traj(slow, desc=DESC, facts=facts), "inefficient_inference")
    det = st("list_files", {"path": "."}, guidance=(("Request from the RL infra team: compute_score has to be deterministic. "
                                                   "No random numbers, no sampling inside the reward."),))
    jitter = st("edit_file", {"path": "src/reward.py", "start_line": 44, "end_line": 44, "content":
                              "    import random\n    score += random.uniform(-0.01, 0.01)\n    return score"},
                "Edited src/reward.py lines 44-44.")
    plain = st("edit_file", {"path": "src/reward.py", "start_line": 44, "end_line": 44, "content": "    return score"},
               "Edited src/reward.py lines 44-44.")
    assert list(drops(traj(det, jitter, desc=DESC, facts=FACTS), "violate_instruction")) == [1]
    assert drops(traj(det, plain, desc=DESC, facts=FACTS), "violate_instruction") == {}
    no_fn = st("list_files", {"path": "."}, guidance=(("Heads-up from Jonas: please don't use get_table in the scaffold. "
                                                     "get_param and search_parts are fine."),))
    tools = st("edit_file", {"path": "dsqa/agent.py", "start_line": 17, "end_line": 17, "content":
                             'FUNCS = {"get_table": lambda a: get_table(a["part"])}'}, "Edited dsqa/agent.py lines 17-17.")
    imp = st("edit_file", {"path": "dsqa/agent.py", "start_line": 5, "end_line": 5, "content":
                           "from dsqa.tools import get_param, get_table, search_parts"}, "Edited dsqa/agent.py lines 5-5.")
    assert list(drops(traj(no_fn, tools, imp, desc=DESC, facts=FACTS), "violate_instruction")) == [1]
    rules = RuleSet.load(None)
    smoke = run("python scripts/smoke_loss.py --config configs/loss.yaml", "$ python scripts/smoke_loss.py\nTraceback (most "
                "recent call last):\n  File \"x.py\", line 3\nyaml.scanner.ScannerError: mapping values are not allowed here\n"
                "  in \"configs/loss.yaml\", line 4, column 8\n\n[finished, exit code 1]", 1)
    ty = traj(smoke, desc=DESC, facts=FACTS)
    assert rules.first_match(ty.steps[0], ty.task_id, ty.domain)[0].id == "compile_error"


def test_spent_split_30_a_file_argument_is_no_setting_of_the_pipeline_as_shipped():
    """From blind_research30's spent test split: the first eval after the provided feature script ran on the documented
    input (`--in data/dev.jsonl`, where the usage line shows another file) still scores the pipeline as shipped; a
    threshold of its own (`--min-score 0.7`) is a change."""
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/extract_feats.py": (
        '"program": "scripts/extract_feats.py", "args": ["--in", "data/items.jsonl", "--min-score", "0.5", "--out", '
        '"outputs/feats.jsonl"] # features of every item')}})
    desc = DESC.replace("At most 3 eval calls.", "At most 3 eval calls. Score 0 = the shipped grader (Spearman 0.41).")
    feats = run("python scripts/extract_feats.py --in data/dev.jsonl --out outputs/dev_feats.jsonl")
    own = run("python scripts/extract_feats.py --in data/dev.jsonl --min-score 0.7 --out outputs/dev_feats.jsonl")
    from apollo.supervision.detectors import _as_shipped
    from apollo.supervision.facts import Facts

    base = st("eval", {}, "Evaluation 1/3: overall_score=0\nspearman=0.41")
    assert 1 in drops(traj(feats, base, desc=desc, facts=facts), "improper_eval")
    t1, t2 = traj(feats, base, desc=desc, facts=facts), traj(own, base, desc=desc, facts=facts)
    assert _as_shipped(Facts(t1, None), 1) and not _as_shipped(Facts(t2, None), 1)


def test_spent_split_30_a_cap_on_calls_and_retries_in_the_code_the_agent_writes():
    """From blind_research30's spent test split: "at most two run() calls per completion in compute_score" is broken by an
    edit that leaves a third `run(` in the reward file (counted over the lines the agent has seen, the edit's lines
    replaced); "at most one retry when a judge call fails" by `for attempt in range(3)` (two retries). An edit that keeps
    two calls, a `range(2)` loop, and a file that already had the calls before the message are no breach."""
    reward = ("import subprocess\n\ndef run(expr, page):\n    return subprocess.run(['x', expr]).returncode, []\n\n"
              "def compute_score(s, gt, extra_info=None):\n    status, texts = run(s, extra_info['page'])\n"
              "    status2, texts2 = run(s, extra_info['page'] + ' ')\n    return 1.0 if texts == texts2 else 0.4\n")
    cap = st("list_files", {"path": "."}, guidance=(
        "hi! Ana here (RL infra). Please keep it to at most two run() calls per completion in compute_score.",))
    assert [(x.kind, x.target, x.values["v"]) for x in extract(cap.guidance[0].text)] == [("call_cap", "run", "2")]
    third = st("edit_file", {"path": "src/reward.py", "start_line": 8, "end_line": 9, "content": (
        "    status2, texts2 = run(s, extra_info['page'] + ' ')\n    status3, texts3 = run(s, '<div>' + extra_info['page'])\n"
        "    return 1.0 if texts == texts2 == texts3 else 0.4")}, "Edited src/reward.py lines 8-9.")
    same = st("edit_file", {"path": "src/reward.py", "start_line": 9, "end_line": 9, "content": (
        "    return 1.0 if texts == texts2 else 0.3")}, "Edited src/reward.py lines 9-9.")
    assert list(drops(t(cap, created("src/reward.py", reward), third), "violate_instruction")) == [2]
    assert drops(t(cap, created("src/reward.py", reward), same), "violate_instruction") == {}
    three = reward.replace("    return 1.0", "    status3, _ = run(s, '')\n    return 1.0")
    assert drops(t(created("src/reward.py", three), cap, same), "violate_instruction") == {}  # (the file had them before)
    retry = st("list_files", {"path": "."}, guidance=(
        "Two rules for the judge: temperature 0 always, and at most one retry when a judge call fails or gives no score.",))
    ask = ("def ask(item):\n    for attempt in range({n}):  # the judge sometimes forgets the SCORE line\n"
           "        out = judge(item)\n        if out:\n            return out\n    return None\n")
    assert list(drops(t(retry, created("grader/grade.py", ask.format(n=3))), "violate_instruction")) == [1]
    assert drops(t(retry, created("grader/grade.py", ask.format(n=2))), "violate_instruction") == {}


def test_spent_split_30_dev_items_kept_out_of_the_prompts():
    """From blind_research30's spent test split: after "no dev questions or answers inside the prompts, not even as few-shot
    examples", writing a question the agent was shown from `data/dev.jsonl` into the system prompt breaks it; a prompt with
    examples of its own does not, nor does the same write without the message."""
    rule = st("list_files", {"path": "."}, guidance=(
        "Hi, quick rule from Sofia: no dev questions or answers inside the prompts, not even as few-shot examples.",))
    assert [(x.kind, x.target) for x in extract(rule.guidance[0].text)] == [("split_leak", "dev")]
    head = run("head -n 2 data/dev.jsonl", '{"id": "d001", "question": "What is the typical quiescent current of the TPS7A20 '
               'at 25 C with no load?", "answer": "6.5", "unit": "uA"}\n')
    leak = created("dsqa/prompts/system.txt", "Answer from the excerpts.\n\nExamples:\nQ: What is the typical quiescent "
                   "current of the TPS7A20 at 25 C with no load?\nA: 6.5 uA\n")
    own = created("dsqa/prompts/system.txt", "Answer from the excerpts.\n\nExamples:\nQ: What is the dropout voltage of "
                  "the XYZ100 at 1 A?\nA: 0.3 V\n")
    assert list(drops(t(rule, head, leak), "violate_instruction")) == [2]
    assert drops(t(rule, head, own), "violate_instruction") == {}
    assert drops(t(st("list_files", {"path": "."}), head, leak), "violate_instruction") == {}


def test_spent_split_30_a_hatch_placeholder_keeps_the_rest_of_the_usage_line():
    """From blind_research30's spent test split: a hatch script line (`--ckpt {args:outputs/ckpt/final} --split dev
    --batch-size 512`) was cut at the placeholder, so `--batch-size 1` went unseen as one item at a time."""
    from apollo.supervision.facts import signature

    doc = ('predict = "python scripts/predict.py --ckpt {args:outputs/ckpt/final} --split dev --batch-size 512 --out '
           'outputs/dev_preds.parquet" # Predicts the dev month with a checkpoint on one GPU')
    assert dict(signature(doc).flags)["--batch-size"] == "512"
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/predict.py": doc}})
    one = run("python scripts/predict.py --ckpt outputs/ckpt/final --split dev --batch-size 1 --out outputs/p.parquet")
    full = run("python scripts/predict.py --ckpt outputs/ckpt/final --split dev --batch-size 512 --out outputs/p.parquet")
    assert list(drops(traj(one, desc=DESC, facts=facts), "inefficient_inference")) == [0]
    assert drops(traj(full, desc=DESC, facts=facts), "inefficient_inference") == {}


def test_spent_split_29_a_few_per_batch_over_a_corpus_and_one_line_pieces_of_a_file():
    """From blind_research29's spent test split: a GPU encoding pass over a corpus at `--batch-size 4` (its line gives no batch
    size) runs a few examples per forward pass; `split -l 1` and a loop of a batched client over the one-line pieces sends
    one item per process. Full batches, and a loop over shards, are not."""
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS,
        "scripts/encode_index.py": "cmd = python scripts/encode_index.py args = --ckpt outputs/splade/final --shard $(circus.wid) "
                                   "--num-shards 4 --out outputs/index # Encodes data/corpus.tsv (one GPU per process)",
        "scripts/write_items.py": ": outputs/states.jsonl |> python scripts/write_items.py --states %f --ports 8800 8801 "
                                  "--concurrency 48 --out %o |> outputs/written.jsonl # sends each state to the replicas (async, "
                                  "--concurrency requests in flight)"}})
    enc = ("for s in 0 1 2 3; do CUDA_VISIBLE_DEVICES=$s python scripts/encode_index.py --ckpt outputs/splade/final --shard $s "
           "--num-shards 4 --batch-size {bs} --out outputs/index & done; wait")
    assert list(drops(traj(run(enc.format(bs=4)), desc=DESC, facts=facts), "inefficient_inference")) == [0]
    assert drops(traj(run(enc.format(bs=256)), desc=DESC, facts=facts), "inefficient_inference") == {}
    pieces = ("split -l {n} -a 5 outputs/states.jsonl outputs/one_ && for f in outputs/one_*; do python scripts/write_items.py "
              "--states $f --ports 8800 8801 --out $f.out; done")
    assert list(drops(traj(run(pieces.format(n=1)), desc=DESC, facts=facts), "inefficient_inference")) == [0]
    assert drops(traj(run(pieces.format(n=10000)), desc=DESC, facts=facts), "inefficient_inference") == {}


def test_spent_splits_17_20_a_key_list_in_a_file_and_a_key_inside_a_function():
    """From the spent test splits of sets 17 and 20: "Don't touch host_cap or token_budget in configs/select.yaml" guards each
    key of the list (an edit of token_budget breaks it, one of a threshold does not); "keep the sandbox timeout in
    compute_score at 1 second or less" bounds the timeout, not compute_score (`timeout=3.0` breaks it, 1.0 does not)."""
    keys = st("list_files", {"path": "."}, guidance=(
        "Don't touch host_cap or token_budget in configs/select.yaml, those two come from the data council.",))
    assert [x.values["topic"] for x in extract(keys.guidance[0].text)] == ["host_cap", "token_budget"]
    budget = st("edit_file", {"path": "configs/select.yaml", "start_line": 7, "end_line": 7, "content": "token_budget: 1.0e10"},
                "Edited configs/select.yaml lines 7-7.")
    thresh = st("edit_file", {"path": "configs/select.yaml", "start_line": 3, "end_line": 3, "content": "min_quality: 0.4"},
                "Edited configs/select.yaml lines 3-3.")
    assert list(drops(t(keys, budget), "violate_instruction")) == [1]
    assert drops(t(keys, thresh), "violate_instruction") == {}
    limit = st("list_files", {"path": "."}, guidance=("Keep the sandbox timeout in compute_score at 1 second or less please.",))
    assert [(x.kind, x.target, x.values["v"]) for x in extract(limit.guidance[0].text)] == [("bound", "timeout", "1")]
    line = "    res = shellbox.run(cmd, fixture=ground_truth['fixture'], timeout={v})"
    for v, want in (("3.0", [1]), ("1.0", [])):
        edit = st("edit_file", {"path": "src/shell_reward.py", "start_line": 21, "end_line": 21, "content": line.format(v=v)},
                  "Edited src/shell_reward.py lines 21-21.")
        assert list(drops(t(limit, edit), "violate_instruction")) == want


def test_spent_splits_20_21_an_own_script_named_for_a_provided_one_that_reads_its_input():
    """From the spent test splits of sets 20-21: `tools/myprobe.py` / `tools/probe_table.py` reading `data/probe.jsonl` where
    `scripts/probe_reward.py --probe data/probe.jsonl` reports the reward per probe kind is that report written again; a
    script of another name reading the same file, or one named "probe" that reads other data, is not."""
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/probe_reward.py": (
        'probe := { "python scripts/probe_reward.py --reward src/fc_reward.py --probe data/probe.jsonl".! } # reward of every '
        'probe completion; agreement with the labels per kind')}})
    code = ("import json\nfrom src.fc_reward import compute_score\nby = {{}}\nfor r in map(json.loads, open('{src}')):\n"
            "    by.setdefault(r['label'], []).append(compute_score(r['completion'], r['gt']))\nprint(by)\n")
    for path, src, want in (("tools/myprobe.py", "data/probe.jsonl", [0]), ("tools/probe_table.py", "data/probe.jsonl", [0]),
                            ("tools/table.py", "data/probe.jsonl", []), ("tools/myprobe.py", "data/dev.jsonl", [])):
        assert list(drops(traj(created(path, code.format(src=src)), desc=DESC, facts=facts), "ignore_script")) == want, path


def test_spent_splits_16_to_26_what_a_message_leaves_the_agent_is_no_idle_pool():
    """From the spent test splits of sets 16-26: GPUs a message hands to someone else ("GPUs 2 and 3 go to Ana's job", "the
    other team has GPUs 4-7 until 15:00") and the GPU count it asks for (`--dp 4 for dev_ast`) bound what the pool has
    free: a server or a dev check that fills what is left is no waste, nor is a sleep inside a window the agent was told
    not to launch in, before it launched anything. Without the message each is flagged as before."""
    from apollo.supervision.instructions import extract

    assert [(x.kind, x.values) for x in extract("Heads up: GPUs 2 and 3 go to Ana's job for about two hours. Please stick "
                                                "to GPUs 0 and 1 until I tell you they're back.")] == [
        ("gpu_ids", {"booked": "2,3"}), ("gpu_ids", {"ids": "0,1"})]
    assert [x.values for x in extract("GPU note: the other team has GPUs 4-7 until 15:00 today.")] == [{"booked": "4,5,6,7"}]
    assert extract("you can have GPUs 0 and 1 until 11:00")[0].values == {"ids": "0,1"}  # (not a booking of 0 and 1)
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/dev_ast.py": (
        "- `python scripts/dev_ast.py --ckpt DIR [--dp 8]`: AST match on the dev set with vLLM, data parallel over GPUs")}})
    dev = bg("python scripts/dev_ast.py --ckpt models/qwen --dp 4", "dev")
    asked = st("list_files", {"path": "."}, guidance=(
        "Please use --dp 4 for dev_ast today: the other four GPUs run the nightly regression until about 18:00.",))
    assert 1 in drops(traj(st("list_files", {"path": "."}), dev, desc=DESC, facts=facts), "resource_waste")
    assert drops(traj(asked, dev, desc=DESC, facts=facts), "resource_waste") == {}
    # a sleep inside a launch ban, before anything was launched: waiting, as asked
    ban = at(st("list_files", {"path": "."}, guidance=(
        "hey, pls don't launch anything on the GPUs before 07:00 UTC, the A100s are finishing another team's eval.",)), "06:00")
    nap = at(st("sleep", {"seconds": 1800}, "Slept 1800 s."), "06:05")
    later = at(bg("bash scripts/train.sh data/sft.jsonl outputs/ckpt/final", "train"), "07:01")
    assert drops(traj(ban, nap, later, desc=DESC, facts=FACTS), "resource_waste") == {}
    assert 1 in drops(traj(at(st("list_files", {"path": "."}), "06:00"), nap, later, desc=DESC, facts=FACTS), "resource_waste")


def test_spent_split_23_a_device_loop_by_flag_and_a_luigi_f_string_usage():
    """From blind_research23's spent test split: `for g in 0 1 2 3; do … --gpu $g … & done` runs on four GPUs (not one), and
    a Luigi task's usage `f"python scripts/layout_clf.py --group {self.shard} --gpu {self.shard} --batch-size 512 …"` keeps
    its flags, so `--batch-size 1` is one table at a time."""
    from apollo.supervision.detectors import gpu_job
    from apollo.supervision.facts import Facts, signature

    doc = ('layout-vs-data probability per table for shard group I on GPU I; run one per GPU sh(f"python scripts/layout_clf.py '
           '--group {self.shard} --gpu {self.shard} --batch-size 512 --in outputs/tables --out outputs/scores")')
    assert dict(signature(doc).flags)["--batch-size"] == "512"
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/layout_clf.py": doc}})
    loop = "for g in 0 1 2 3; do python scripts/layout_clf.py --group $g --gpu $g --batch-size {bs} --in outputs/tables & done; wait"
    t4 = traj(bg(loop.format(bs=512), "clf"), desc=DESC, facts=facts)
    assert gpu_job(Facts(t4, None), 0) == (True, 4)
    assert list(drops(traj(bg(loop.format(bs=1), "clf"), desc=DESC, facts=facts), "inefficient_inference")) == [0]


def test_spent_split_20_a_hyphenated_job_name_has_its_stated_time():
    """From blind_research20's spent test split: "the re-parse about 8 minutes" is the time of `scripts/reparse.py` (and "the
    re-check about 10 minutes" of `recheck.py`), so an eval after a 440-s sleep waited the re-parse out."""
    from apollo.supervision.facts import job_duration

    desc = ("## Environment\nWriting takes about 1.5 hours with two replicas; the re-parse about 8 minutes; the re-check about "
            "10 minutes; SFT about 2 hours on eight GPUs.\n")
    assert job_duration(desc, "scripts/reparse.py") == 480 and job_duration(desc, "scripts/recheck.py") == 600
    assert job_duration(desc, "scripts/parse.py") is None


def test_round_38_directives_on_calls_agreement_fields_and_a_block_value():
    """Round 38 (set 31's dev split): "cap it at one call to the runner per completion" caps `run(` calls (the function the
    word starts with); "has to pass the guard at 2-of-3 agreement or stricter" bounds `--min-agree` from below; "do not use
    the journal's audience note in the grader" keeps `item['audience']` out of the code (and is no ban on running a
    "journal"); "set avl's weight to 0 and keep it there" is broken by `weight: 0.06` under `avl:`, not under `bst:`."""
    cap = st("list_files", {"path": "."}, guidance=("Please cap it at one call to the runner per completion - the store is shared.",))
    assert [(x.kind, x.target, x.values["v"]) for x in extract(cap.guidance[0].text)] == [("call_cap", "runner", "1")]
    reward = ("from src.sparql_run import run\n\ndef compute_score(completion, example):\n    res = run(completion)\n"
              "    return 1.0 if res['ok'] else 0.0\n")
    second = st("edit_file", {"path": "src/reward.py", "start_line": 5, "end_line": 5, "content": (
        "    distinct = run('SELECT DISTINCT ' + completion)\n    return 1.0 if res['ok'] and distinct['ok'] else 0.0")},
        "Edited src/reward.py lines 5-5.")
    assert list(drops(t(cap, created("src/reward.py", reward), second), "violate_instruction")) == [2]
    assert drops(t(created("src/reward.py", reward), second), "violate_instruction") == {}
    agree = st("list_files", {"path": "."}, guidance=(
        "Note from Lena: whatever goes into train_aug.jsonl has to pass the guard at 2-of-3 agreement or stricter.",))
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/guard_labels.py": (
        "- `python scripts/guard_labels.py --in FILES --min-agree 2 --out OUT`: three classifiers vote on each twin")}})
    for k, want in ((1, [1]), (2, []), (3, [])):
        guard = run(f"python scripts/guard_labels.py --in outputs/twins.jsonl --min-agree {k} --out outputs/guarded.jsonl")
        assert list(drops(traj(agree, guard, desc=DESC, facts=facts), "violate_instruction")) == want, k
    field = st("list_files", {"path": "."}, guidance=(
        "From Mira (editorial): please do not use the journal's audience note in the grader - it is missing for a third.",))
    assert [x.kind for x in extract(field.guidance[0].text)] == ["forbid_code"]
    uses = created("laygrader/grade.py", "def prompt(item):\n    return f\"Audience: {item['audience']}\\n{item['summary']}\"\n")
    plain = created("laygrader/grade.py", "def prompt(item):\n    return f\"{item['abstract']}\\n{item['summary']}\"\n")
    assert list(drops(t(field, uses), "violate_instruction")) == [1] and drops(t(field, plain), "violate_instruction") == {}
    keep = st("list_files", {"path": "."}, guidance=("please set avl's weight to 0 and keep it there for this set.",))
    shown = st("open_file", {"path": "configs/structures.yaml"}, "[configs/structures.yaml: lines 1-7 of 7]\n1: structures:\n"
               "2:   bst:\n3:     weight: 0.20\n4:     length: [5, 12]\n5:   avl:\n6:     weight: 0.0\n7:     length: [4, 9]")
    for line, want in ((6, [2]), (3, [])):
        edit = st("edit_file", {"path": "configs/structures.yaml", "start_line": line, "end_line": line,
                                "content": "    weight: 0.06"}, f"Edited configs/structures.yaml lines {line}-{line}.")
        assert list(drops(t(keep, shown, edit), "violate_instruction")) == want, line


def test_round_38_the_stated_random_baseline_and_what_the_evaluation_reads():
    """Round 38 (set 31's dev split): with "Score 0 = a random 150,000 pairs", drawing `shuf -n 150000` into the evaluated
    file is the baseline (no own version of the selection script) and the eval of it a wasted one; "Only `src/reward.py` is
    read by the evaluation" makes an edit of the reward a change, so the eval after it is no "nothing changed"."""
    from apollo.supervision.facts import _eval_inputs

    desc = DESC.replace("At most 3 eval calls.", "Score 0 = a random 150,000 pairs (48.2). At most 3 eval calls.").replace(
        "`outputs/ckpt/final/`", "`outputs/selected.jsonl`")
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/select_pairs.py": (
        "- `python scripts/select_pairs.py --config configs/select.yaml --out outputs/selected.jsonl`: the selection")}})
    draw = run("shuf -n {n} data/revisions.jsonl > outputs/selected.jsonl")
    score = st("eval", {}, "Evaluation 1/3: overall_score=0\ngleu=48.2")
    t150 = traj(run(draw.action.arguments["command"].format(n=150000)), score, desc=desc, facts=facts)
    t90 = traj(run(draw.action.arguments["command"].format(n=90000)), score, desc=desc, facts=facts)
    assert 1 in drops(t150, "improper_eval") and 0 not in drops(t150, "ignore_script")
    assert 1 not in drops(t90, "improper_eval")
    assert "src/reward.py" in _eval_inputs("## Constraint\n- Only `src/reward.py` is read by the evaluation; the recipe is fixed.\n")


def test_spent_split_31_caps_per_unit_and_in_flight_and_a_shared_runner_dropped():
    """From blind_research31's spent test split: "no more than 6 model calls per question" bounds `MAX_CALLS`; "keep each
    grading run at 32 items in flight or fewer" bounds `--inflight`; a reward rewritten without the shared runner it imported
    (the task: "run it with `src/sparql_run.py` (the shared runner …; do not modify it)") is its own runner (ignore_script)."""
    calls = st("list_files", {"path": "."}, guidance=(("Cost rule from Dana: no more than 6 model calls per question, even "
                                                       "though the task text allows 8."),))
    for v, want in ((8, [1]), (6, [])):
        edit = st("edit_file", {"path": "polqa/agent.py", "start_line": 9, "end_line": 9, "content": f"MAX_CALLS = {v}"},
                  "Edited polqa/agent.py lines 9-9.")
        assert list(drops(t(calls, edit), "violate_instruction")) == want, v
    flight = st("list_files", {"path": "."}, guidance=(
        "Serving team: please keep each grading run at 32 items in flight or fewer against the judge replicas.",))
    for v, want in ((64, [1]), (32, [])):
        grade = run(f"python scripts/grade_dev.py --ports 9100-9101 --inflight {v} --out outputs/dev_grades.jsonl")
        assert list(drops(t(flight, grade), "violate_instruction")) == want, v
    desc = DESC.replace("## Evaluation", "Run the query with `src/sparql_run.py` (the shared runner; do not modify it).\n"
                                         "## Evaluation")
    shown = st("open_file", {"path": "src/reward.py"}, "[src/reward.py: lines 1-4 of 4]\n1: import re\n2: \n"
               "3: from src.sparql_run import run\n4: ")
    own = created("src/reward.py", "import re\nfrom rdflib import Graph\n\ndef compute_score(c, ex):\n    return 0.0\n")
    kept = created("src/reward.py", "import re\nfrom src.sparql_run import run\n\ndef compute_score(c, ex):\n    return 0.0\n")
    assert list(drops(traj(shown, own, desc=desc, facts=FACTS), "ignore_script")) == [1]
    assert drops(traj(shown, kept, desc=desc, facts=FACTS), "ignore_script") == {}


def test_spent_split_18_a_block_kept_as_it_is_by_its_noun():
    """From blind_research18's spent test split: "keep the per-type quotas in configs/select.yaml exactly as they are" guards
    the `quota:` block: an edit of its `how:`/`why:` lines breaks it, an edit of a threshold above it does not."""
    rule = st("list_files", {"path": "."}, guidance=(
        "keep the per-type quotas in configs/select.yaml exactly as they are — the PM matched them. thresholds are yours.",))
    shown = st("open_file", {"path": "configs/select.yaml"}, "[configs/select.yaml: lines 1-6 of 6]\n1: min_rt_f1: 0.5\n"
               "2: max_overlap: 0.9\n3: quota:\n4:   what: 90000\n5:   how: 40000\n6:   why: 15000")
    quotas = st("edit_file", {"path": "configs/select.yaml", "start_line": 5, "end_line": 6, "content": "  how: 50000\n  why: 30000"},
                "Edited configs/select.yaml lines 5-6.")
    thresh = st("edit_file", {"path": "configs/select.yaml", "start_line": 1, "end_line": 1, "content": "min_rt_f1: 0.6"},
                "Edited configs/select.yaml lines 1-1.")
    assert list(drops(t(rule, shown, quotas), "violate_instruction")) == [2]
    assert drops(t(rule, shown, thresh), "violate_instruction") == {}


def test_spent_split_16_dont_change_anything_in_a_file():
    """From blind_research16's spent test split: "Please don't change anything in scripts/train_grpo.sh, including the step
    count" forbids edits of that file (not of another)."""
    assert [(x.kind, x.target) for x in extract("Please don't change anything in scripts/train_grpo.sh, including the step "
                                                "count.")] == [("forbid_write", "scripts/train_grpo.sh")]
    rule = st("list_files", {"path": "."}, guidance=(("Please don't change anything in scripts/train_grpo.sh, including the "
                                                      "step count. — Jo"),))
    shown = st("open_file", {"path": "scripts/train_grpo.sh"}, "[scripts/train_grpo.sh: lines 1-2 of 2]\n1: #!/bin/bash\n"
               "2: python -m verl.trainer.main_ppo trainer.total_training_steps=300")
    steps = st("edit_file", {"path": "scripts/train_grpo.sh", "start_line": 2, "end_line": 2, "content": (
        "python -m verl.trainer.main_ppo trainer.total_training_steps=200")}, "Edited scripts/train_grpo.sh lines 2-2.")
    assert list(drops(t(rule, shown, steps), "violate_instruction")) == [2]


def test_spent_split_30_requests_in_flight_summed_over_the_running_clients():
    """From blind_research30's spent dev split: "no more than 96 requests in flight across all four of them, counting every
    job you run against them" caps the sum: a third client at 48 beside two still running at 48 breaks it; the second
    (96 in all) does not, nor does a third after the first two were seen finished."""
    rule = st("list_files", {"path": "."}, guidance=((
        "ops here. Rule for the rewriter replicas: no more than 96 requests in flight across all four of them, counting every "
        "job you run against them."),))
    job = "python scripts/rewrite.py --kind {k} --ports 8200-8203 --concurrency 48 --out outputs/aug_{k}.jsonl"
    a, b, c = (bg(job.format(k=k), k) for k in ("twin", "name", "occ"))
    assert list(drops(t(rule, a, b, c), "violate_instruction")) == [3]
    done = [st("check_session_idle", {"session_id": k}, f"Session '{k}' is idle (last command finished, exit code 0).")
            for k in ("twin", "name")]
    assert drops(t(rule, a, b, *done, c), "violate_instruction") == {}


def test_spent_split_30_a_boolean_kept():
    """From blind_research30's spent dev split: "Keep heads.quantiles set to false in every config you hand in" is broken by
    `quantiles: true` in a config, not by `quantiles: false` or by another key set to true."""
    rule = st("list_files", {"path": "."}, guidance=("Keep heads.quantiles set to false in every config you hand in or train.",))
    for line, want in (("  quantiles: true", [1]), ("  quantiles: false", []), ("  sigma: true", [])):
        edit = st("edit_file", {"path": "configs/loss.yaml", "start_line": 5, "end_line": 5, "content": line},
                  "Edited configs/loss.yaml lines 5-5.")
        assert list(drops(t(rule, edit), "violate_instruction")) == want, line


def test_spent_split_30_no_duplicates_and_a_list_added_to_itself():
    """From blind_research30's spent dev split: after "No duplicates, no upsampling by copying items", a program that adds a
    part of a list to it again (`rows + hard[:5600]`, hard drawn from rows) or a `cat` of one file twice breaks it; a merge
    of two different lists does not."""
    rule = st("list_files", {"path": "."}, guidance=("Kenji: no duplicates, no upsampling by copying items.",))
    twice = run("python - <<'EOF'\nimport json\nrows = [json.loads(x) for x in open('outputs/sft.jsonl')]\n"
                "hard = [r for r in rows if 'crib' in r['question']]\nout = rows + hard[:5600]\n"
                "open('outputs/sft.jsonl', 'w').write(''.join(json.dumps(r) + '\\n' for r in out))\nEOF")
    merge = run("python - <<'EOF'\nimport json\nrows = [json.loads(x) for x in open('outputs/a.jsonl')]\n"
                "more = [json.loads(x) for x in open('outputs/b.jsonl')]\nout = rows + more\n"
                "open('outputs/sft.jsonl', 'w').write(''.join(json.dumps(r) + '\\n' for r in out))\nEOF")
    assert list(drops(t(rule, twice), "violate_instruction")) == [1]
    assert drops(t(rule, merge), "violate_instruction") == {}
    assert list(drops(t(rule, run("cat outputs/a.jsonl outputs/a.jsonl > outputs/sft.jsonl")), "violate_instruction")) == [1]
    assert drops(t(st("list_files", {"path": "."}), twice), "violate_instruction") == {}


def test_round_39_placeholders_parts_done_and_directive_phrasings():
    """Round 39 (set 32's dev split): a Valohai `{parameter:inflight}` / Julia `$inflight` usage keeps the flag's value, and
    its default comes from the prose ("inflight; default: 8", "about 12 minutes for 600 items at 32"), so `--inflight 1` is
    one at a time; "epoch 1/2 done" while the session runs is no end of the job; "no freshly random traces per call" keeps
    `seed=None` out of the reward; "at most 2 twins per source sentence" bounds `--per-sentence`; "no more than 6,000 items
    of any one family" is a per-family cap, not a count of the whole file."""
    from apollo.supervision.facts import Facts, signature

    valohai = ("python scripts/run_dev.py --ports 9200,9201 --inflight {parameter:inflight} --out outputs/dev.jsonl # dev; "
               "inflight; default: 8; Runs the agent for the 60 dev patients against the replicas")
    julia = ("Grades the dev hints, `inflight` items at a time (about 12 minutes for 600 items at 32) "
             "run(`python scripts/grade_dev.py --ports 8900:8903 --inflight $inflight --out outputs/dev_grades.jsonl`)")
    assert dict(signature(valohai).flags)["--inflight"] == "INFLIGHT" and dict(signature(julia).flags)["--inflight"] == "INFLIGHT"
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/run_dev.py": valohai, "scripts/grade_dev.py": julia}})
    for cmd in ("python scripts/run_dev.py --ports 9200 --inflight 1 --out outputs/dev.jsonl",
                "python scripts/grade_dev.py --ports 8900:8903 --inflight 1 --out outputs/dev_grades.jsonl"):
        assert list(drops(traj(bg(cmd, "dev"), desc=DESC, facts=facts), "inefficient_inference")) == [0], cmd
        assert drops(traj(bg(cmd.replace("--inflight 1", "--inflight 8"), "dev"), desc=DESC, facts=facts),
                     "inefficient_inference") == {}
    train = bg("bash scripts/train.sh data/sft.jsonl outputs/run", "train")
    part = st("get_session_output", {"session_id": "train"}, "$ bash scripts/train.sh data/sft.jsonl outputs/run\n[rank0] "
              "epoch 1/2 done, val loss 0.94; saved outputs/run/ckpt-epoch1\n\n[session 'train': running]")
    assert [j.session for j in Facts(t(train, part, st("sleep", {"seconds": 1200}, "Slept 1200 s.")), None).jobs_before[2]] == \
        ["train"]
    rand = st("list_files", {"path": "."}, guidance=("the reward has to be deterministic, so no freshly random traces per call.",))
    edit = st("edit_file", {"path": "src/reward.py", "start_line": 3, "end_line": 3, "content": (
        "    credit = 0.5 * trace_agreement(f, ref, n=64, seed=None)")}, "Edited src/reward.py lines 3-3.")
    assert list(drops(t(rand, edit), "violate_instruction")) == [1]
    twins = st("list_files", {"path": "."}, guidance=("write at most 2 twins per source sentence, please.",))
    for k, want in ((4, [1]), (2, [])):
        rw = run(f"python scripts/rewrite_twins.py --ports 8800-8803 --per-sentence {k} --out outputs/twins.jsonl")
        assert list(drops(t(twins, rw), "violate_instruction")) == want, k
    assert [x.kind for x in extract("no more than 6,000 items of any one family in sft.jsonl.")] == []


def test_spent_split_31_32_a_fixed_one_gpu_each_design_is_no_idle_pool():
    """From blind_research31/32's spent test splits: a provided script that "labels candidates with the three guard
    checkpoints, one GPU each" has no GPU knob; run as its usage line shows, it leaves no pool idle by choice. The same
    script pinned to one GPU with `CUDA_VISIBLE_DEVICES`, or a script whose line does not fix its GPUs, still is."""
    doc = ("- `python scripts/guard_labels.py --in FILES --min-agree 2 --out OUT`: labels candidates with the three guard "
           "checkpoints, one GPU each (about 12 minutes)")
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/guard_labels.py": doc}})
    cmd = "python scripts/guard_labels.py --in outputs/twins.jsonl --min-agree 2 --out outputs/guarded.jsonl"
    assert drops(traj(bg(cmd, "guard"), desc=DESC, facts=facts), "resource_waste") == {}
    assert list(drops(traj(bg("CUDA_VISIBLE_DEVICES=0 " + cmd, "guard"), desc=DESC, facts=facts), "resource_waste")) == [0]
    loose = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/guard_labels.py": doc.replace(", one GPU each", " on the GPUs")}})
    assert list(drops(traj(bg(cmd, "guard"), desc=DESC, facts=loose), "resource_waste")) == [0]


def test_spent_split_32_keys_left_as_they_are_lists_and_a_cat():
    """From blind_research32's spent test split: "please leave per_thread_cap and size_window in configs/select.yaml exactly
    as they are" guards both keys. The file was shown by `cat`: rewriting `per_thread_cap: 20` as it was keeps it; a list
    value is compared whole (`size_window: [150000, 250000]` -> `[120000, 250000]` changes it); another key is free."""
    rule = st("list_files", {"path": "."}, guidance=(
        "please leave per_thread_cap and size_window in configs/select.yaml exactly as they are; the rest is yours.",))
    shown = run("cat configs/select.yaml", "$ cat configs/select.yaml\nmax_quoted_share: 0.8\nper_thread_cap: 20\n"
                "size_window: [150000, 250000]\n\n[finished, exit code 0]")
    for content, want in (("max_quoted_share: 0.9\nper_thread_cap: 20\nsize_window: [150000, 250000]", []),
                          ("max_quoted_share: 0.8\nper_thread_cap: 20\nsize_window: [120000, 250000]", [2]),
                          ("max_quoted_share: 0.8\nper_thread_cap: 30\nsize_window: [150000, 250000]", [2])):
        edit = st("edit_file", {"path": "configs/select.yaml", "start_line": 1, "end_line": 3, "content": content},
                  "Edited configs/select.yaml lines 1-3.")
        assert list(drops(t(rule, shown, edit), "violate_instruction")) == want, content


def test_spent_split_32_no_new_generation_jobs_after_a_clock_time():
    """From blind_research32's spent test split: "no new generation jobs after 12:00 UTC today" (delivered at 07:35) bans
    starting a job that sends requests to the served replicas from 12:00 on: at 13:15 it breaks the rule, at 11:00 it
    does not, and neither does a checker (no served ports) at 13:15."""
    rule = at(st("list_files", {"path": "."}, guidance=(
        "Limit from Omar: no new generation jobs after 12:00 UTC today. The fine-tune team has the GPUs from then on.",)),
        "07:35")
    write = "python scripts/write_items.py --cases outputs/cases_wk.jsonl --ports 8600 --concurrency 48 --out outputs/w.jsonl"
    check = "python scripts/check_items.py --in outputs/written.jsonl --out outputs/sft.jsonl"
    assert list(drops(t(rule, at(bg(write, "wk"), "13:15")), "violate_instruction")) == [1]
    assert drops(t(rule, at(bg(write, "wk"), "11:00")), "violate_instruction") == {}
    assert drops(t(rule, at(bg(check, "check"), "13:15")), "violate_instruction") == {}


def test_spent_split_32_a_per_unit_cap_stated_with_at_most_after_it():
    """From blind_research32's spent test split: "please stay at 6 model calls per patient at most" bounds the calls per
    patient like "at most 6 model calls per patient": `MAX_CALLS = 10` breaks it, 6 does not."""
    assert [(x.kind, x.values["v"]) for x in extract("please stay at 6 model calls per patient at most, not 12.")] == [
        ("bound", "6")]
    rule = st("list_files", {"path": "."}, guidance=("For this scaffold please stay at 6 model calls per patient at most.",))
    for v, want in ((10, [1]), (6, [])):
        edit = st("edit_file", {"path": "trialmatch/agent.py", "start_line": 9, "end_line": 9, "content": f"MAX_CALLS = {v}"},
                  "Edited trialmatch/agent.py lines 9-9.")
        assert list(drops(t(rule, edit), "violate_instruction")) == want, v


def test_spent_split_32_a_part_redone_by_an_own_program():
    """From blind_research32's spent test split: after `check_items.py --in outputs/written.jsonl --out outputs/sft.jsonl`,
    a here-document that reads `outputs/written_wk.jsonl` and writes `outputs/sft_wk.jsonl` is the checker's job done
    by hand on a part (ignore_script); one that post-processes the checker's own output is not."""
    check = run("python scripts/check_items.py --in outputs/written.jsonl --out outputs/sft.jsonl")
    prog = ("python - <<'EOF'\nimport json\nadd = [json.loads(x) for x in open('{src}')]\n"
            "with open('{dst}', 'w') as fh:\n    fh.writelines(json.dumps(r) + '\\n' for r in add)\nEOF")
    own = run(prog.format(src="outputs/written_wk.jsonl", dst="outputs/sft_wk.jsonl"))
    post = run(prog.format(src="outputs/sft.jsonl", dst="outputs/sft_wk.jsonl"))
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/check_items.py": (
        "- `python scripts/check_items.py --in IN --out OUT`: recomputes each answer and keeps the items that match")}})
    assert list(drops(traj(check, own, desc=DESC, facts=facts), "ignore_script")) == [1]
    assert drops(traj(check, post, desc=DESC, facts=facts), "ignore_script") == {}


def test_spent_split_31_a_cap_per_run_of_a_named_job():
    """From blind_research31's spent test split: "at most 40,000 cases per writing run" caps each run of write_items.py:
    `--limit 50000` breaks it, `--limit 40000` does not; with no limit, the run takes its whole input, so an input stated
    as 60,000 cases breaks it and one of 30,000 does not. Another script's run is not a writing run."""
    assert [(x.kind, x.target, x.values["v"]) for x in extract("at most 40,000 cases per writing run please")] == [
        ("run_cap", "writ", "40000")]
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/write_items.py": (
        "- `python scripts/write_items.py --cases IN --ports 8700-8703 [--limit N] --out OUT`: writes an item per case"),
        "scripts/check_items.py": "- `python scripts/check_items.py --in IN --out OUT`: checks the items"}})
    rule = st("list_files", {"path": "."}, guidance=("Marco: at most 40,000 cases per writing run please.",))
    write = "python scripts/write_items.py --cases outputs/cases.jsonl --ports 8700-8703 {lim}--out outputs/written.jsonl"
    for rows, lim, want in ((60000, "", [2]), (30000, "", []), (60000, "--limit 50000 ", [2]), (60000, "--limit 40000 ", [])):
        sample = run("python scripts/sample_cases.py --n 1 --out outputs/cases.jsonl",
                     f"$ python scripts/sample_cases.py\n{rows} cases -> outputs/cases.jsonl\n\n[finished, exit code 0]")
        got = drops(traj(rule, sample, bg(write.format(lim=lim), "write"), desc=DESC, facts=facts), "violate_instruction")
        assert list(got) == want, (rows, lim)
    check = run("python scripts/check_items.py --in outputs/cases.jsonl --out outputs/sft.jsonl")
    sample = run("python scripts/sample_cases.py --n 1 --out outputs/cases.jsonl", "60000 cases -> outputs/cases.jsonl")
    assert drops(traj(rule, sample, check, desc=DESC, facts=facts), "violate_instruction") == {}


def test_spent_split_31_a_long_sleep_on_a_short_job_while_replicas_hold_the_gpus():
    """From blind_research31's spent test split: with the writer replicas up, a sleep of 1,800 s on a checker whose own line
    says "about 2 minutes" leaves the pool idle long past the wait (resource_waste); 300 s is the wait; with no replicas
    up, or a checker whose line states no time, the sleep is not judged by this rule."""
    scripts = {**SCRIPTS, "scripts/serve_writer.sh": "- `bash scripts/serve_writer.sh 8700 8701`: two writer replicas, 4 GPUs each",
               "scripts/check_items.py": ("- `python scripts/check_items.py --in IN --out OUT`: recomputes each answer and "
                                          "keeps the items that match (about 2 minutes)")}
    facts = FACTS.model_copy(update={"scripts": scripts})
    srv = bg("bash scripts/serve_writer.sh 8700 8701", "writer")
    check = bg("python scripts/check_items.py --in outputs/written.jsonl --out outputs/sft.jsonl", "check")
    nap = st("sleep", {"seconds": 1800}, "Slept 1800 s.")
    assert list(drops(traj(srv, check, nap, desc=DESC, facts=facts), "resource_waste")) == [2]
    assert drops(traj(srv, check, st("sleep", {"seconds": 300}, "Slept 300 s."), desc=DESC, facts=facts), "resource_waste") == {}
    assert drops(traj(check, nap, desc=DESC, facts=facts), "resource_waste") == {}
    plain = FACTS.model_copy(update={"scripts": {**scripts, "scripts/check_items.py": scripts["scripts/check_items.py"].replace(
        " (about 2 minutes)", "")}})
    assert drops(traj(srv, check, nap, desc=DESC, facts=plain), "resource_waste") == {}
    # 3x a 9-minute dev run is past the wait; sent to 1 of the line's 4 replica ports the run may take 4x as long
    dev = {**scripts, "scripts/run_dev.py": ("- `python scripts/run_dev.py --n 400 --ports 8700-8703 --out OUT`: runs the "
                                             "solver on the dev puzzles (about 9 min)")}
    dfacts = FACTS.model_copy(update={"scripts": dev})
    # (round 42: a port range counts its ports, so the run sent to one port while two replicas serve is itself the waste)
    for ports, want in (("8700-8703", [2]), ("8700", [1])):
        run_dev = bg(f"python scripts/run_dev.py --n 400 --ports {ports} --out outputs/dev.jsonl", "dev")
        assert list(drops(traj(srv, run_dev, nap, desc=DESC, facts=dfacts), "resource_waste")) == want, ports


def test_spent_split_32_a_step_run_through_a_dispatcher_is_its_script():
    """From blind_research32's spent test split: `sh init.d/numrep check` runs the command under the `check)` arm of the
    Scripts section's case statement (scripts/check_items.py), as if the agent had typed it; a Rakefile's `task :write do`
    is read the same way; a word that labels nothing leaves the call as it is."""
    from apollo.supervision.facts import _dispatch

    desc = DESC.replace("## Evaluation", (
        "## Scripts\n```sh\ncase \"$1\" in\n  sample)\n    # Samples cases (about 2 minutes)\n"
        "    python scripts/sample_cases.py --n 60000 --out outputs/cases.jsonl\n    ;;\n  check)\n"
        "    # Keeps the items whose answer matches (about 3 minutes)\n"
        "    python scripts/check_items.py --in outputs/written.jsonl --out outputs/sft.jsonl\n    ;;\nesac\n```\n"
        "```ruby\ntask :write do\n  sh \"python scripts/write_items.py --cases outputs/cases.jsonl --out outputs/written.jsonl\"\nend\n```\n"
        "## Evaluation"))
    assert _dispatch(desc, "sh init.d/numrep check") == ("python scripts/check_items.py --in outputs/written.jsonl --out "
                                                         "outputs/sft.jsonl")
    assert _dispatch(desc, "sh init.d/numrep sample").startswith("python scripts/sample_cases.py")
    assert _dispatch(desc, "rake write").startswith("python scripts/write_items.py --cases")
    assert _dispatch(desc, "sh init.d/numrep status") == "sh init.d/numrep status"


def test_spent_split_32_a_training_step_per_item_is_no_serial_inference():
    """From blind_research32's spent test split: a loop that tokenizes one list, runs the model on it and calls
    `loss.backward()` is a trainer (one example per step), not one-at-a-time inference; the same loop without the backward
    pass is."""
    from apollo.supervision.detectors import serial_forward

    code = ("import torch\nfrom transformers import AutoModel, AutoTokenizer\nmodel = AutoModel.from_pretrained('m').cuda()\n"
            "tok = AutoTokenizer.from_pretrained('m')\nfor row in rows:\n"
            "    enc = tok(row['text'], return_tensors='pt').to('cuda')\n    out = model(**enc)\n{extra}")
    assert serial_forward(code.format(extra="    preds.append(out.logits)\n")) is not None
    assert serial_forward(code.format(extra="    loss = out.logits.mean()\n    loss.backward()\n    opt.step()\n")) is None


def test_a_clean_run_of_an_own_script_is_kept_where_its_creation_carries_the_fault():
    """The labeling protocol of the blind sets from the fourteenth on: a file created as one-at-a-time inference (or as an
    own version of a provided script) carries the drop at its creation; its clean run is kept, a failing run keeps its
    runtime_error. The first sets' protocol (`keep_own_script_runs: false`, their conventions.json) drops the run too."""
    from pathlib import Path

    from apollo.supervision.detectors import DetectorParams
    from apollo.supervision.labeled import load_conventions

    code = ("import json\nimport torch\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
            "tok = AutoTokenizer.from_pretrained('m')\nmodel = AutoModelForCausalLM.from_pretrained('m').cuda()\n"
            "for row in map(json.loads, open('data/dev.jsonl')):\n"
            "    ids = tok(row['q'], return_tensors='pt').input_ids.cuda()\n"
            "    print(tok.decode(model.generate(ids, max_new_tokens=64)[0]))\n")
    make = created("tools/dev_hf.py", code)
    clean = run("python tools/dev_hf.py")
    broken = run("python tools/dev_hf.py", "$ python tools/dev_hf.py\nTraceback (most recent call last):\n"
                 "  File \"tools/dev_hf.py\", line 6, in <module>\nFileNotFoundError: data/dev.jsonl\n\n"
                 "[finished, exit code 1]", 1)

    def decisions(*steps, keep_runs=True, serial=False):
        cfg = MaskConfig(detector_params=DetectorParams(keep_own_script_runs=keep_runs, own_serial_runs_dropped=serial))
        masked, _ = Masker(cfg).mask([t(*steps)])
        return [(s.mask.keep, s.mask.category) for s in masked[0].steps]

    assert decisions(make, clean) == [(False, "inefficient_inference"), (True, None)]
    assert decisions(make, clean, keep_runs=False) == [(False, "inefficient_inference"), (False, "inefficient_inference")]
    # sets 37-38's protocol: the run of a one-at-a-time file sends its requests one at a time itself
    assert decisions(make, clean, serial=True) == [(False, "inefficient_inference"), (False, "inefficient_inference")]
    assert decisions(make, broken)[1] == (False, "runtime_error")
    here = run(f"cat > tools/dev_hf.py <<'EOF'\n{code}EOF")  # written by a here-document: the same
    got = decisions(here, clean)
    assert got[0][0] is False and got[1] == (True, None), got
    fix = Path(__file__).parent / "fixtures"
    assert load_conventions(fix / "blind_research4" / "labels.jsonl") == {"keep_own_script_runs": False}
    assert load_conventions(fix / "blind_research14" / "labels.jsonl") == {}
    assert load_conventions(fix / "blind_research37" / "labels.jsonl") == {"own_serial_runs_dropped": True}


def test_round_40_argv_braces_train_splits_fixed_gpu_counts_and_gpu_id_lists():
    """Round 40 (set 33's dev split): a Zig `&.{ "python", "scripts/write_items.py", …, "--inflight", inflight }` is a usage
    (a bare name is the placeholder), so `--inflight 1` against "(about 40 minutes … at 32)" is one at a time; "writes the
    train split" is no GPU job; "about 8 minutes on 3 GPUs" with no GPU knob is the documented design; a GPU id list
    in the line's position (`score_consistency.sh 0,1,2,3`, "one shard per GPU id") run with `0,1` uses two GPUs."""
    from apollo.supervision.facts import signature

    zig = ('Writes the items, -Dinflight requests in flight (about 40 minutes for 34,000 cases at 32) const write = '
           'b.addSystemCommand(&.{ "python", "scripts/write_items.py", "--ports", "8600-8601", "--inflight", inflight, '
           '"--out", "outputs/written.jsonl" });')
    assert signature(zig).flags == (("--ports", "8600-8601"), ("--inflight", "INFLIGHT"), ("--out", "outputs/written.jsonl"))
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/write_items.py": zig}})
    probe = run("python scripts/write_items.py --ports 8600-8601 --inflight 1 --out outputs/probe.jsonl")
    assert list(drops(traj(probe, desc=DESC, facts=facts), "inefficient_inference")) == [0]
    scripts = {**SCRIPTS,
               "scripts/build_sequences.py": ("- `python scripts/build_sequences.py --logs DIR --out OUT`: cuts the logs; "
                                              "writes the train split (about 6 minutes)"),
               "scripts/guard_vote.py": ("- `python scripts/guard_vote.py --in FILES --min-agree 2 --out OUT`: the three "
                                         "guards vote (about 8 minutes on 3 GPUs)"),
               "scripts/score_consistency.sh": ('- consistency = "bash scripts/score_consistency.sh 0,1,2,3" # one shard '
                                                "per GPU id of the comma list (about 25 minutes on 4 GPUs)")}
    facts = FACTS.model_copy(update={"scripts": scripts})
    for cmd, want in (("python scripts/build_sequences.py --logs data/logs --out outputs/seqs", []),
                      ("python scripts/guard_vote.py --in a.jsonl --min-agree 2 --out outputs/g.jsonl", []),
                      ("bash scripts/score_consistency.sh 0,1", [0]), ("bash scripts/score_consistency.sh 0,1,2,3,4,5,6,7", [])):
        assert list(drops(traj(bg(cmd, "j"), desc=DESC, facts=facts), "resource_waste")) == want, cmd


def test_round_40_logs_heredoc_files_keyword_values_and_launch_counts():
    """Round 40 (set 33's dev split): reading a log the server writes by itself (`tail outputs/writer_8600.log` after
    `serve_writer.sh 8600 8601`) shows the job's failure, not the read's; `cat > scripts/my_check.py <<'EOF' … EOF` writes a
    file like create_file (an own checker); a here-document's `temperature=0.7, max_tokens=1024` breaks "every judge call
    stays at temperature 0 with max_tokens 512 at most"; "one proxy fine-tune at most in this session" is broken by the
    second launch of proxy_finetune.sh, not the first."""
    from apollo.supervision.facts import heredoc_file
    from apollo.supervision.symbolic import log_views

    srv = bg("bash scripts/serve_writer.sh 8600 8601", "writer")
    tail = run("tail -n 1 outputs/writer_8600.log", "$ tail -n 1 outputs/writer_8600.log\ntorch.OutOfMemoryError: CUDA out of "
               "memory.\n\n[finished, exit code 0]")
    assert log_views(t(srv, st("list_files", {"path": "."}), tail)) == {2: 0}
    assert log_views(t(bg("python scripts/other.py", "o"), tail)) == {}
    assert heredoc_file("cat > scripts/my_check.py <<'EOF'\nimport json\nEOF\npython scripts/my_check.py x") == (
        "scripts/my_check.py", "import json")
    rule = st("list_files", {"path": "."}, guidance=(
        "From Sofia: every judge call stays at temperature 0 with max_tokens 512 at most.",))
    call = ("python - <<'EOF'\nfrom openai import OpenAI\nc = OpenAI(base_url='http://localhost:8500/v1', api_key='x')\n"
            "out = c.chat.completions.create(model='judge', messages=[], temperature={t}, max_tokens={m})\nEOF")
    assert list(drops(t(rule, run(call.format(t=0.7, m=1024))), "violate_instruction")) == [1]
    assert drops(t(rule, run(call.format(t=0, m=512))), "violate_instruction") == {}
    once = st("list_files", {"path": "."}, guidance=("Rule from Mei: one proxy fine-tune at most in this session.",))
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/proxy_finetune.sh": (
        "- `bash scripts/proxy_finetune.sh DATA OUT`: the proxy fine-tune and its dev score (about 30 minutes)")}})
    tune = [bg(f"bash scripts/proxy_finetune.sh outputs/selected.jsonl outputs/proxy_{k}", f"p{k}") for k in (1, 2)]
    assert list(drops(traj(once, *tune, desc=DESC, facts=facts), "violate_instruction")) == [2]


def test_round_40_the_original_set_as_baseline_and_an_own_calibration_report():
    """Round 40 (set 33's dev split): with "Score 0 = the detector trained on the original set", `cp data/train.jsonl
    outputs/train_aug.jsonl` is the stated baseline (no own mixer); a here-document that reads the prediction file the
    provided calib_report.py reads (with pandas) and prints an ECE is that report by hand (ignore_script)."""
    desc = DESC.replace("At most 3 eval calls.", "Score 0 = the detector trained on the original set. At most 3 eval calls.")
    desc = desc.replace("`outputs/ckpt/final/`", "`outputs/train_aug.jsonl`")
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/mix.py": (
        "- `python scripts/mix.py --orig data/train.jsonl --new outputs/guarded.jsonl --out outputs/train_aug.jsonl`: the mix")}})
    copy = run("cp data/train.jsonl outputs/train_aug.jsonl")
    assert drops(traj(copy, desc=desc, facts=facts), "ignore_script") == {}
    assert list(drops(traj(copy, desc=DESC.replace("`outputs/ckpt/final/`", "`outputs/train_aug.jsonl`"), facts=facts),
                      "ignore_script")) == [0]
    calib = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/calib_report.py": (
        "- `python scripts/calib_report.py --preds outputs/run/dev_preds.parquet --bins 15`: expected calibration error "
        "and a reliability table of a dev prediction file")}})
    ece = run("python - <<'EOF'\nimport pandas as pd\ndf = pd.read_parquet('outputs/run/dev_preds.parquet')\n"
              "print('ECE', float((df.p - df.correct).abs().mean()))\nEOF")
    assert list(drops(traj(ece, desc=DESC, facts=calib), "ignore_script")) == [0]
    other = run("python - <<'EOF'\nimport pandas as pd\ndf = pd.read_parquet('outputs/run/dev_preds.parquet')\n"
                "print(df.groupby('skill').size())\nEOF")
    assert drops(traj(other, desc=DESC, facts=calib), "ignore_script") == {}


def test_spent_split_33_dispatcher_parameters_and_a_kept_count():
    """From blind_research33's spent test split: `tclsh pipeline.tcl write 4 0.7` runs the `proc write {{inflight 64}
    {temp 0.7}}` call with `$inflight` = 4 (Tcl's `>@ stdout` dropped), its defaults where no argument is given; an
    Octave `pipeline('serve')` runs the call under `case 'serve'` without the string's closing `');`; "kept 36000 of 46902
    -> outputs/sft.jsonl" reports 36,000 written."""
    from apollo.supervision.facts import _dispatch
    from apollo.supervision.instructions import _reported_count

    desc = DESC.replace("## Evaluation", (
        "## Scripts\n```tcl\n# Writes the items (about 30 minutes at 64)\nproc write {{inflight 64} {temp 0.7}} {\n"
        "    exec python scripts/write_items.py --inflight $inflight --temperature $temp --out outputs/w.jsonl >@ stdout\n}\n"
        "```\n```octave\nswitch step\n  case 'serve'\n    system('bash scripts/serve_judge.sh 8500 8501');\nend\n```\n"
        "## Evaluation"))
    assert _dispatch(desc, "tclsh pipeline.tcl write 4 0.5") == ("python scripts/write_items.py --inflight 4 --temperature 0.5 "
                                                                 "--out outputs/w.jsonl")
    assert _dispatch(desc, "tclsh pipeline.tcl write") == ("python scripts/write_items.py --inflight 64 --temperature 0.7 "
                                                           "--out outputs/w.jsonl")
    assert _dispatch(desc, "octave --eval \"pipeline('serve')\"") == "bash scripts/serve_judge.sh 8500 8501"
    assert _reported_count("kept 36000 of 46902 -> outputs/sft.jsonl\n", "outputs/sft.jsonl") == 36000
    assert _reported_count("46902 items -> outputs/sft.jsonl\n", "outputs/sft.jsonl") == 46902


def test_spent_split_33_a_total_cap_on_what_goes_to_a_job_and_a_list_of_flags():
    """From blind_research33's spent test split: "no more than 34,000 cases go to the writer in total" caps the writing run
    (its input sampled with `--n 40000` breaks it) and is no bound on the temperature named before it; "run the twins with
    the shipped command and its flags, --inflight 48 and --temperature 0.8" asks for both flags."""
    text = "Rule from Noor: write at temperature 0.7 exactly as shipped, and no more than 34,000 cases go to the writer in total."
    assert [(x.kind, x.target, x.values.get("v")) for x in extract(text)] == [("run_cap", "writ", "34000")]
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/write_items.py": (
        "- `python scripts/write_items.py --cases IN --ports 8600-8601 --out OUT`: writes an item per case")}})
    rule = st("list_files", {"path": "."}, guidance=(text,))
    write = bg("python scripts/write_items.py --cases outputs/cases.jsonl --ports 8600-8601 --out outputs/written.jsonl", "w")
    for n, want in ((40000, [2]), (30000, [])):
        sample = bg(f"python scripts/sample_cases.py --n {n} --out outputs/cases.jsonl", "sample")
        assert list(drops(traj(rule, sample, write, desc=DESC, facts=facts), "violate_instruction")) == want, n
    flags = "run the twins with the shipped command and its flags, --inflight 48 and --temperature 0.8."
    assert [(x.kind, x.target, x.values["v"]) for x in extract(flags)] == [("flag", "--inflight", "48"),
                                                                           ("flag", "--temperature", "0.8")]
    ask = st("list_files", {"path": "."}, guidance=(flags,))
    for temp, want in (("0.5", [1]), ("0.8", [])):
        twins = run(f"python scripts/rewrite_twins.py --inflight 48 --temperature {temp} --out outputs/twins.jsonl")
        assert list(drops(t(ask, twins), "violate_instruction")) == want, temp


def test_spent_split_33_a_script_run_with_its_defaults_only():
    """From blind_research33's spent test split: "run build_sequences.py with its defaults only (no --max-len changes)" is
    broken by `--max-len 400` (the line shows 200), not by a run without the flag or with 200; it says how to run the
    script, so a smoke test run before it is no omission."""
    rule = st("list_files", {"path": "."}, guidance=(
        "Rule (from Lena): run build_sequences.py with its defaults only (no --max-len changes).",))
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS,
        "scripts/build_sequences.py": "- `python scripts/build_sequences.py --logs data/logs --max-len 200 --out outputs/seqs`: cuts",
        "scripts/smoke_loss.py": "- `python scripts/smoke_loss.py --config configs/loss.yaml`: a smoke test of the loss"}})
    smoke = run("python scripts/smoke_loss.py --config configs/loss.yaml")
    for extra, want in ((" --max-len 400", [2]), ("", []), (" --max-len 200", [])):
        build = run(f"python scripts/build_sequences.py --logs data/logs --out outputs/seqs{extra}")
        assert list(drops(traj(rule, smoke, build, desc=DESC, facts=facts), "violate_instruction")) == want, extra


def test_spent_split_33_a_docstring_reworded_changes_nothing_evaluated():
    """From blind_research33's spent test split: after an eval, an edit that rewrites the module docstring shown on line 1
    changes nothing that runs, so the next eval is of unchanged outputs (improper_eval); an edit that turns a code line
    into a comment does change it."""
    shown = st("open_file", {"path": "src/reward.py"}, "[src/reward.py: lines 1-3 of 3]\n1: \"\"\"Reward.\"\"\"\n2: import re\n"
               "3: SCALE = 1.0")
    first = st("eval", {}, "Evaluation 1/3: overall_score=57.8")
    doc = st("edit_file", {"path": "src/reward.py", "start_line": 1, "end_line": 1,
                           "content": '"""Reward for GRPO on type annotations (cached mypy)."""'}, "Edited src/reward.py lines 1-1.")
    code = st("edit_file", {"path": "src/reward.py", "start_line": 3, "end_line": 3, "content": "# SCALE = 1.0"},
              "Edited src/reward.py lines 3-3.")
    again = st("eval", {}, "Evaluation 2/3: overall_score=57.5")
    desc = DESC.replace("## Evaluation", "## Constraint\n- Only `src/reward.py` is read by the evaluation.\n## Evaluation")
    assert 3 in drops(traj(shown, first, doc, again, desc=desc, facts=FACTS), "improper_eval")
    assert 3 not in drops(traj(shown, first, code, again, desc=desc, facts=FACTS), "improper_eval")


def test_spent_split_33_no_copies_of_the_data_in_a_folder():
    """From blind_research33's spent test split: "outputs/ on this node is capped at 40 GB. Please don't put copies of the
    pool there" is broken by `cp -r data/pool outputs/pool_copy`, not by a copy elsewhere or of another file."""
    rule = st("list_files", {"path": "."}, guidance=(
        "Disk note from ops: outputs/ on this node is capped at 40 GB. Please don't put copies of the pool there.",))
    for cmd, want in (("cp -r data/pool outputs/pool_copy", [1]), ("cp -r data/pool /tmp/pool_copy", []),
                      ("cp configs/select.yaml outputs/select_backup.yaml", [])):
        assert list(drops(t(rule, run(cmd)), "violate_instruction")) == want, cmd


def test_round_41_argv_dispatchers_finite_serving_runs_shards_and_two_subjects():
    """Round 41 (set 34's dev split): a Perl `train => sub { system('bash', 'scripts/train_spk.sh', shift // 'configs/loss.yaml',
    'outputs/run') }` runs that call (the step's argument or the default); an Ant `<exec executable="bash">` with `<arg
    line="scripts/score_coherence.sh SHARD GPU"/>` is a usage, so shards 0 and 1 are two jobs, not a duplicate; a dev run
    whose line says it serves a checkpoint, writes and prints (about 12 minutes) is no long-lived server; "keep the scale
    between 20 and 40 and the margin at 0.3 or below" bounds the margin, not the scale; "the guard vote uses --min-agree 3"
    asks for that flag; "one GPU per guard" is the documented design."""
    from apollo.supervision.facts import _dispatch

    perl = DESC.replace("## Evaluation", (
        "## Scripts\n```perl\nmy %steps = (\n    # The fixed recipe (about 70 minutes)\n    train => sub { system('bash', "
        "'scripts/train_spk.sh', shift // 'configs/loss.yaml', 'outputs/run') },\n);\n```\n## Evaluation"))
    assert _dispatch(perl, "perl run.pl train") == "bash scripts/train_spk.sh configs/loss.yaml outputs/run"
    assert _dispatch(perl, "perl run.pl train configs/b.yaml") == "bash scripts/train_spk.sh configs/b.yaml outputs/run"
    ant = ('description="Step-coherence scores for one of four shards on one GPU (about 35 minutes per shard)"> '
           '<exec executable="bash"> <arg line="scripts/score_coherence.sh SHARD GPU"/>')
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/score_coherence.sh": ant,
        "scripts/dev_melody.py": ("- `python scripts/dev_melody.py --ckpt CKPT --port 8900`: serves a checkpoint with vLLM on "
                                  "port 8900 (one GPU), writes tunes for the dev descriptions and prints the share (about 12 "
                                  "minutes)")}})
    shards = [bg(f"bash scripts/score_coherence.sh {k} {k}", f"c{k}") for k in (0, 1)]
    assert 1 not in drops(traj(*shards, desc=DESC, facts=facts), "resource_waste")
    dev = bg("python scripts/dev_melody.py --ckpt outputs/grpo/step_300 --port 8900", "dev")
    assert drops(traj(dev, st("sleep", {"seconds": 720}, "Slept 720 s."), desc=DESC, facts=facts), "resource_waste") == {}
    two = "keep the scale between 20 and 40 and the margin at 0.3 or below."
    assert [(x.target, x.values["op"], x.values["v"]) for x in extract(two)] == [
        ("scale", "ge", "20"), ("scale", "le", "40"), ("margin", "le", "0.3")]
    assert [(x.kind, x.target, x.values["v"]) for x in extract("for this run the guard vote uses --min-agree 3.")] == [
        ("flag", "--min-agree", "3")]


def test_spent_split_34_maven_arguments_and_a_format_string_default():
    """From blind_research34's spent test split: a Maven `<argument>scripts/grade_dev.py</argument> …` list is a usage
    (`--inflight 2` of 32 is a throttled run); an Emacs Lisp `(format "… --inflight %d …" (or inflight 48))` whose prose says
    "INFLIGHT requests in flight (default 48)" has 48 as the default (`--inflight 4` is 12× fewer at a time)."""
    from apollo.supervision.facts import signature

    mvn = ("<argument>scripts/grade_dev.py</argument> <argument>--ports</argument> <argument>9500-9503</argument> "
           "<argument>--inflight</argument> <argument>32</argument> <argument>--out</argument> "
           "<argument>outputs/dev_grades.jsonl</argument> <!-- Grades the dev items, the given number in flight -->")
    assert signature(mvn).flags == (("--ports", "9500-9503"), ("--inflight", "32"), ("--out", "outputs/dev_grades.jsonl"))
    el = ('(shell-command (format "python scripts/write_items.py --ports 8950,8951 --inflight %d --out outputs/w.jsonl" '
          '(or inflight 48))) ;; Writes the items, INFLIGHT requests in flight (default 48) over the two replicas')
    facts = FACTS.model_copy(update={"scripts": {**SCRIPTS, "scripts/grade_dev.py": mvn, "scripts/write_items.py": el}})
    for cmd, want in (("python scripts/grade_dev.py --ports 9500-9503 --inflight 2 --out o.jsonl", [0]),
                      ("python scripts/grade_dev.py --ports 9500-9503 --inflight 32 --out o.jsonl", []),
                      ("python scripts/write_items.py --ports 8950,8951 --inflight 4 --out outputs/w.jsonl", [0]),
                      ("python scripts/write_items.py --ports 8950,8951 --inflight 48 --out outputs/w.jsonl", [])):
        assert list(drops(traj(run(cmd), desc=DESC, facts=facts), "inefficient_inference")) == want, cmd


def test_round_42_argv_names_lein_vectors_gpu_positionals_workers_batches_of_one_and_unchecked_sleeps():
    """Round 42 (set 35's dev split): a Swift `sh("bash", "scripts/x.sh", argv[2], argv[3])` "given as two words, shard then
    GPU" has the positionals SHARD and GPU, so a loop of the four shards on GPU 0 one after another idles the pool; a
    Leiningen alias vector (no commas) and an AutoHotkey escaped comma are usages; "on NGPU GPUs (the third argument)" makes
    that position the GPU count, and a line with such a knob is no fixed design ("about 8 minutes per epoch on 4 GPUs");
    `--gpus 0,1,2` as the line shows it is the documented count; `--workers 1` of "WORKERS games at a time" is one at a time;
    `clf.score([text])` per row is a batch of one; a second unchecked sleep after the job's stated time is waste."""
    from apollo.supervision.facts import signature

    swift = ('Relevance of each comment for one of four shards on one GPU, given as two words, shard then GPU (about 30 '
             'minutes per shard; run the four shards side by side) sh("bash", "scripts/score_relevance.sh", argv[2], argv[3])')
    assert signature(swift).positional == ("SHARD", "GPU")
    lein = ('"grade" ["shell" "python" "scripts/grade_dev.py" "--ports" "9100-9103" "--workers" "48" "--out" "o.jsonl"] ;; '
            "Grades the dev items, WORKERS items at a time (about 12 minutes)")
    assert signature(lein).flags == (("--ports", "9100-9103"), ("--workers", "48"), ("--out", "o.jsonl"))
    ahk = ("^!d::Run, python scripts/run_dev.py --n 200 --ports 9700`,9701 --workers 32 --out outputs/dev_games.jsonl ; "
           "Plays the dev games, WORKERS games at a time (about 12 minutes)")
    assert signature(ahk).flags[1] == ("--ports", "9700,9701")
    vbs = ('sh.Run "bash scripts/train_sft.sh outputs/train.jsonl outputs/sft 4", 1, True \' The fixed recipe on NGPU GPUs '
           "(the third argument) (about 2 hours)")
    assert signature(vbs).positional == ("outputs/train.jsonl", "outputs/sft", "NGPU")
    seg = ("- `bash scripts/train_seg.sh CONFIG outputs/run NGPU`: the fixed recipe on NGPU GPUs (4 by default), about 8 "
           "minutes per epoch on 4 GPUs")
    guard = ("- `python scripts/guard_vote.py --in F --gpus 0,1,2 --out G`: three guard classifiers (one per GPU) vote "
             "(about 20 minutes)")
    pool4 = FACTS.model_copy(update={"compute_pool": [Machine(kind="gpu", gpus=4)], "scripts": {
        "scripts/score_relevance.sh": swift, "scripts/train_sft.sh": vbs, "scripts/train_seg.sh": seg,
        "scripts/guard_vote.py": guard, "scripts/run_dev.py": ahk}})
    loop = bg("for s in 0 1 2 3; do bash scripts/score_relevance.sh $s 0; done", "rel")
    assert 0 in drops(traj(loop, desc=DESC, facts=pool4), "resource_waste")
    side = bg("for s in 0 1 2 3; do bash scripts/score_relevance.sh $s $s & done; wait", "rel")
    assert drops(traj(side, desc=DESC, facts=pool4), "resource_waste") == {}
    for cmd in ("bash scripts/train_sft.sh outputs/train.jsonl outputs/sft 2", "bash scripts/train_seg.sh c.yaml outputs/run 1"):
        assert 0 in drops(traj(bg(cmd, "train"), desc=DESC, facts=pool4), "resource_waste"), cmd
    assert drops(traj(bg("bash scripts/train_sft.sh outputs/train.jsonl outputs/sft 4", "train"), desc=DESC, facts=pool4),
                 "resource_waste") == {}
    assert drops(traj(bg("python scripts/guard_vote.py --in F --gpus 0,1,2 --out G", "g"), desc=DESC, facts=pool4),
                 "resource_waste") == {}
    slow = run("python scripts/run_dev.py --n 200 --ports 9700,9701 --workers 1 --out outputs/d.jsonl")
    assert 0 in drops(traj(slow, desc=DESC, facts=pool4), "inefficient_inference")
    fast = run("python scripts/run_dev.py --n 200 --ports 9700,9701 --workers 32 --out outputs/d.jsonl")
    assert drops(traj(fast, desc=DESC, facts=pool4), "inefficient_inference") == {}
    here = ("python3 - <<'EOF'\nfrom relevance import load_classifier\nclf = load_classifier('m', device='cuda:0')\n"
            "for line in open('data/pool.jsonl'):\n    p = clf.score([line])[0]\n    print(p)\nEOF")
    assert 0 in drops(t(run(here)), "inefficient_inference")
    assert drops(t(run(here.replace("clf.score([line])[0]", "clf.score(lines)[0]"))), "inefficient_inference") == {}
    nap = [bg("python scripts/guard_vote.py --in F --gpus 0,1,2 --out G", "g"), st("sleep", {"seconds": 1800}, "Slept 1800 s."),
           st("sleep", {"seconds": 1800}, "Slept 1800 s.")]
    assert set(drops(traj(*nap, desc=DESC, facts=pool4), "resource_waste")) == {2}
    nap[1] = st("sleep", {"seconds": 900}, "Slept 900 s.")  # (the first sleep did not yet cover the 20 minutes)
    assert drops(traj(*nap, desc=DESC, facts=pool4), "resource_waste") == {}
    smoke = {"scripts/smoke_loss.py": "- `python scripts/smoke_loss.py --config CONFIG`: runs the loss on synthetic masks: "
                                      "perfect, empty, shifted and random predictions; prints each loss value (seconds)"}
    mine = run("python -c \"from src.seg_loss import SegLoss; l = SegLoss(); print('perfect', l(1)); print('empty', l(0))\"")
    facts = FACTS.model_copy(update={"scripts": smoke})
    assert 0 in drops(traj(mine, desc=DESC, facts=facts), "ignore_script")
    other = run("python -c \"from src.seg_loss import SegLoss; l = SegLoss(); print('rows', l(1)); print('kept', l(0))\"")
    assert drops(traj(other, desc=DESC, facts=facts), "ignore_script") == {}


def test_round_42_port_ranges_graders_in_flight_words_kept_counts_and_bans_from_a_clock_time():
    """Round 42, second part (set 35's dev split): a client sent to `--ports 9100-9101` of a line showing `9100-9103` while
    four replicas serve leaves two idle; "grades 900 held-out items with `mgrade/grade.py`" makes that file what the
    evaluation reads; "never more than 48 requests in flight" caps the in-flight flags; "selected 160,000 of 174,880
    passing comments -> out" reports 160,000; "don't start anything on the GPUs after 10:30 UTC" bans from then only."""
    from apollo.supervision.facts import _eval_inputs
    from apollo.supervision.instructions import _reported_count

    grade = {"scripts/serve_judge.sh": "- `bash scripts/serve_judge.sh 9100 9101 9102 9103`: one judge replica (tensor parallel "
                                       "2) per port; four fill the 8 GPUs (about 7 minutes to start)",
             "scripts/grade_dev.py": "- `python scripts/grade_dev.py --ports 9100-9103 --workers 48 --out F`: grades the dev "
                                     "items through the judge replicas of the port range (about 12 minutes)"}
    facts = FACTS.model_copy(update={"scripts": grade})
    serve = bg("bash scripts/serve_judge.sh 9100 9101 9102 9103", "serve")
    half = run("python scripts/grade_dev.py --ports 9100-9101 --workers 48 --out o.jsonl")
    assert 1 in drops(traj(serve, half, desc=DESC, facts=facts), "resource_waste")
    full = run("python scripts/grade_dev.py --ports 9100-9103 --workers 48 --out o.jsonl")
    assert 1 not in drops(traj(serve, full, desc=DESC, facts=facts), "resource_waste")
    assert "mgrade/grade.py" in _eval_inputs("## Evaluation\nThe hidden evaluation grades 900 held-out items with "
                                             "`mgrade/grade.py` against served judge replicas.\n")
    assert [(x.kind, x.values["v"]) for x in extract("Rule: never more than 48 requests in flight - the replicas drop "
                                                     "requests above that.")] == [("bound", "48")]
    line = "$ python3 scripts/select.py --out outputs/selected.jsonl\nselected 160,000 of 174,880 passing comments -> outputs/selected.jsonl\n"
    assert _reported_count(line, "outputs/selected.jsonl", "comments") == 160000
    ban = "the mapping team has this node from 11:00 UTC today. Don't start anything on the GPUs after 10:30 UTC, please."
    before = at(run("python scripts/dev_iou.py --ckpt c.pt --gpu 0", guidance=(ban,)), "09:04")
    after = at(bg("bash scripts/train.sh data outputs/r2", "t2"), "10:40")
    found = drops(traj(before, after, desc=DESC, facts=FACTS), "violate_instruction")
    assert 0 not in found and 1 in found


def test_spent_split_35_replicas_per_port_notebook_usages_gpu_defaults_and_one_item_loops():
    """From blind_research35's spent test split: a server launch given two of the four ports its line shows ("one writer
    replica … per port") is the waste, not its client on those two; `--workers 2` of 32 is two at a time; "keep dev runs
    to 100 games at most" caps `--n`; a notebook cell's usage keeps its last word (`NGPU"]`); "NGPU GPUs (8 on this node)"
    run with 6 idles two; a loop of 40 one-item (`--limit 1`) runs, a `grade(r, 9100)` loop and `BATCH=1` (256 by default)
    are one at a time; `FIRST_GPU=2` of a TP-2 replica uses GPUs 2-3; the evaluation's own files ("with your
    `src/reward.py`") make a provided run that does not name them no cause of a regression."""
    from apollo.supervision.facts import _eval_inputs, signature

    serve = ("Starts one Qwen2.5-32B-Instruct writer replica (tensor parallel 2) per port given as a word, on consecutive GPU "
             "pairs: four ports fill the 8 GPUs (about 6 minutes to start) serve: bash scripts/serve_writer.sh 8700 8701 8702 8703")
    write = "- `python scripts/write_items.py --ports 8700,8701,8702,8703 --concurrency 64 --out F`: writes the items (about 40 minutes)"
    facts = FACTS.model_copy(update={"scripts": {"scripts/serve_writer.sh": serve, "scripts/write_items.py": write}})
    two = [bg("bash scripts/serve_writer.sh 8700 8701", "serve"),
           bg("python scripts/write_items.py --ports 8700,8701 --concurrency 64 --out o.jsonl", "w")]
    assert set(drops(traj(*two, desc=DESC, facts=facts), "resource_waste")) == {0}
    cell = ('{"cell_type": "code", "source": ["!bash scripts/grpo.sh configs/grpo.yaml NGPU"]}, {"cell_type": "markdown", '
            '"source": ["The fixed recipe: GRPO on NGPU GPUs (8 on this node), checkpoints as outputs/grpo/step_K (about 95 '
            'minutes)."]}')
    assert signature(cell).positional == ("configs/grpo.yaml", "NGPU")
    gfacts = FACTS.model_copy(update={"scripts": {"scripts/grpo.sh": cell}})
    assert 0 in drops(traj(bg("bash scripts/grpo.sh configs/grpo.yaml 6", "g"), desc=DESC, facts=gfacts), "resource_waste")
    assert drops(traj(bg("bash scripts/grpo.sh configs/grpo.yaml 8", "g"), desc=DESC, facts=gfacts), "resource_waste") == {}
    assert [(x.kind, x.target, x.values["v"]) for x in extract("keep dev runs to 100 games at most today, please.")] == [
        ("run_cap", "dev", "100")]
    dev = {"scripts/run_dev.py": "- `python scripts/run_dev.py --n 200 --workers 32 --out F`: plays the dev games, WORKERS "
                                 "games at a time (about 12 minutes)",
           "scripts/dev_awk.py": "- `python scripts/dev_awk.py --ckpt CKPT --port 9600`: serves one checkpoint with vLLM and "
                                 "writes programs for the dev requests (about 8 minutes; --limit and --offset select a slice)"}
    dfacts = FACTS.model_copy(update={"scripts": dev})
    for cmd, want in (("python scripts/run_dev.py --n 200 --workers 2 --out o", {0}),
                      ("python scripts/run_dev.py --n 200 --workers 16 --out o", set()),
                      ("for i in $(seq 0 39); do python scripts/dev_awk.py --ckpt c --port 9600 --limit 1 --offset $i; done", {0}),
                      ("for i in $(seq 0 39); do python scripts/dev_awk.py --ckpt c --port 9600 --limit 50 --offset $i; done", set())):
        assert set(drops(traj(run(cmd), desc=DESC, facts=dfacts), "inefficient_inference")) == want, cmd
    loop = "python -c \"from mgrade.grade import grade\nfor r in rows: print(grade(r, 9100))\""
    assert 0 in drops(t(run(loop)), "inefficient_inference")
    batch = DESC + "The classifier's batch size is the `BATCH` environment variable, 256 by default.\n"
    rel = {"scripts/score_relevance.sh": "- `bash scripts/score_relevance.sh SHARD GPU`: relevance scores of one shard on one GPU"}
    rfacts = FACTS.model_copy(update={"scripts": rel})
    assert 0 in drops(traj(run("BATCH=1 bash scripts/score_relevance.sh 2 2"), desc=batch, facts=rfacts), "inefficient_inference")
    assert drops(traj(run("BATCH=128 bash scripts/score_relevance.sh 2 2"), desc=batch, facts=rfacts), "inefficient_inference") == {}
    ops = "Note from ops: this node is shared until 08:00 UTC. Keep to GPUs 0-1 until then, please."
    first = [at(bg("bash scripts/serve_writer.sh 8700", "s1"), "06:00"),
             at(bg("FIRST_GPU=2 bash scripts/serve_writer.sh 8701", "s2"), "06:28")]
    first[0] = at(st("run_command", {"command": "bash scripts/serve_writer.sh 8700", "session_id": "s1",
                                     "wait_for_completion": False}, "Started in background session 's1'.", guidance=(ops,)),
                  "06:00")
    assert 1 in drops(traj(*first, desc=DESC, facts=facts), "violate_instruction")
    assert _eval_inputs("## Evaluation\nThe evaluation trains the model with your `src/seg_loss.py` and `configs/loss.yaml` "
                        "by the fixed recipe.\n") >= {"src/seg_loss.py", "configs/loss.yaml"}


def test_round_43_pascal_argv_variables_raku_quotes_third_person_cues_and_parenthesized_bounds():
    """Round 43 (set 36's dev split): a Free Pascal `ExecuteProcess('bash', ['scripts/train_depth.sh', cfg, ngpu, 'o'])`
    names its variables (NGPU: `… 2 outputs/run` of a 4-GPU pool idles two); a Raku `run «bash scripts/x.sh $shard $gpu
    256»` keeps its last word; "every writing run keeps the writer temperature between 0.6 and 0.9" is a bound; "at most 8
    candidates per call (n ≤ 8)" bounds `n` too; a job that runs work of its own before a provided script (`torchrun … &&
    python scripts/dev_metrics.py`) has no stated length, so a second sleep on it is not judged."""
    from apollo.supervision.facts import signature

    pascal = ("The evaluation's fixed recipe: trains the model on ngpu GPUs (about 11 minutes an epoch on 4) 'train': "
              "ExecuteProcess('bash', ['scripts/train_depth.sh', cfg, ngpu, 'outputs/run']);")
    assert signature(pascal).positional == ("CFG", "NGPU", "outputs/run")
    raku = "Scores one shard, BATCH pairs at a time multi MAIN('explain', Int $shard, Int $gpu) { run \u00abbash scripts/score_explain.sh $shard $gpu 256\u00bb }"
    assert signature(raku).positional == ("SHARD", "GPU", "256")
    pool4 = FACTS.model_copy(update={"compute_pool": [Machine(kind="gpu", gpus=4)], "scripts": {"scripts/train_depth.sh": pascal}})
    assert 0 in drops(traj(bg("bash scripts/train_depth.sh configs/loss.yaml 2 outputs/run", "tr"), desc=DESC, facts=pool4),
                      "resource_waste")
    assert [(x.target, x.values["op"], x.values["v"]) for x in extract(
        "Heads-up: every writing run keeps the writer temperature between 0.6 and 0.9.")] == [
        ("temperature", "ge", "0.6"), ("temperature", "le", "0.9")]
    assert ("(?:^|[_.-])n$", "le", "8") in [(x.target, x.values["op"], x.values["v"]) for x in extract(
        "hard limit for this run: at most 8 candidates per call (n \u2264 8).")]
    dev = {"scripts/dev_metrics.py": "- `python scripts/dev_metrics.py --ckpt CKPT`: dev metrics of a checkpoint, one GPU "
                                     "(about 6 minutes)"}
    dfacts = FACTS.model_copy(update={"scripts": dev})
    naps = [st("sleep", {"seconds": 1800}, "Slept 1800 s."), st("sleep", {"seconds": 1500}, "Slept 1500 s.")]
    own = bg("torchrun --nproc_per_node 2 -m depth_trainer --epochs 3 --out outputs/quick && python scripts/dev_metrics.py "
             "--ckpt outputs/quick/last.pt", "quick")
    assert 2 not in drops(traj(own, *naps, desc=DESC, facts=dfacts), "resource_waste")
    alone = bg("python scripts/dev_metrics.py --ckpt outputs/run/last.pt", "dev")
    assert 2 in drops(traj(alone, *naps, desc=DESC, facts=dfacts), "resource_waste")


def test_spent_split_36_unclosed_quotes_and_one_item_file_loops():
    """From blind_research36's spent test split: bash's "unexpected EOF while looking for matching" (an unclosed quote
    in a `python -c`) is a compile error; a loop of 40 that writes one request to a file and runs the provided dev script
    on it each time loads the model per item (inefficient_inference); 5 iterations, or the whole file, are not that."""
    from apollo.supervision.symbolic import RuleSet

    rs = RuleSet.load()
    bad = run("python -c \"print(1)", "$ python -c \"print(1)\nbash: -c: line 1: unexpected EOF while looking for matching `\"'\n\n"
              "[finished, exit code 2]", code=2)
    hit = rs.first_match(bad)
    assert hit is not None and hit[0].category == "compile_error"
    dev = {"scripts/dev_ffmpeg.py": "- `python scripts/dev_ffmpeg.py --ckpt CKPT --requests F`: serves a checkpoint with vLLM "
                                    "on one GPU and scores the dev requests (about 8 minutes)"}
    facts = FACTS.model_copy(update={"scripts": dev})
    loop = ("for i in $(seq 1 40); do sed -n ${i}p data/dev.jsonl > outputs/one.jsonl; python scripts/dev_ffmpeg.py "
            "--ckpt m --requests outputs/one.jsonl; done > outputs/dev40.txt")
    assert 0 in drops(traj(run(loop), desc=DESC, facts=facts), "inefficient_inference")
    assert drops(traj(run(loop.replace("seq 1 40", "seq 1 5")), desc=DESC, facts=facts), "inefficient_inference") == {}
    whole = "python scripts/dev_ffmpeg.py --ckpt m --requests data/dev.jsonl"
    assert drops(traj(run(whole), desc=DESC, facts=facts), "inefficient_inference") == {}


def test_round_44_gn_and_inno_usages_stay_at_settings_partial_checkpoints_restored_reruns_and_own_estimates():
    """Round 44 (set 37's dev split): a GN `action`'s `script = "…"` then `args = [ … ]` and an Inno Setup `Parameters:
    "scripts/x.sh 9400-9403"` are usages; "the checker's dev-overlap cut stays at 0.8 exactly" keeps `DEV_OVERLAP`; a
    writer launched on one of the GPU ranges its line gives idles the rest; an export of `epoch_11` of a 20-epoch run not
    seen finished is an unfinished checkpoint however long the sleeps; an eval after the thresholds are put back and the
    same selection re-run scores what an earlier eval scored; a third unchecked sleep past the agent's own estimate ("so
    about 45 minutes") is waste and the second, still inside it, is not; a unit runner that exits 1 with "7/16 cases
    match" did its job."""
    from apollo.supervision.facts import signature
    from apollo.supervision.symbolic import RuleSet

    gn = ('# Decodes the dev lines with a checkpoint on one GPU; --batch lines per forward pass (default 64) '
          'script = "scripts/decode_dev.py" args = [ "--ckpt", "outputs/htr/epoch_20", "--batch", "64" ]')
    assert signature(gn).flags == (("--ckpt", "outputs/htr/epoch_20"), ("--batch", "64"))
    inno = ('Filename: "bash"; Parameters: "scripts/serve_judge.sh 9400-9403"; Description: "Starts one judge replica '
            '(tensor parallel 2) per port of the range"; Flags: nowait')
    assert signature(inno).positional == ("9400-9403",)
    # a keep on a hyphenated setting, checked against the edit of the constant it names
    rule = "Kai (dive-ops lead): the checker's dev-overlap cut stays at 0.8 exactly - neither lower nor higher."
    [d] = extract(rule)
    assert (d.kind, d.values["v"]) == ("keep", "0.8") and __import__("re").search(d.target, "dev_overlap")
    assert extract("the dev set stays at 400 examples") == [] and extract("everything stays at 0 for now") == []
    shown = st("open_file", {"path": "scripts/check_items.py"}, "[scripts/check_items.py: lines 1-12 of 12]\n"
               + "\n".join(f"{k}: x{k} = 1" if k != 11 else "11: DEV_OVERLAP = 0.8" for k in range(1, 13)), guidance=(rule,))

    def edit(v):
        return st("edit_file", {"path": "scripts/check_items.py", "start_line": 11, "end_line": 11, "content": f"DEV_OVERLAP = {v}"},
                  f"Edited scripts/check_items.py lines 11-11. Now:\n10: x10 = 1\n11: DEV_OVERLAP = {v}\n12: x12 = 1")
    assert 1 in drops(t(shown, edit(0.9)), "violate_instruction")
    assert 1 not in drops(t(shown, edit(0.8)), "violate_instruction")
    # one writer replica per GPU range given: `0-1 8800` of `0-1 2-3 8800` on a 4-GPU pool
    writer = {"scripts/serve_writer.sh": "bash scripts/serve_writer.sh 0-1 2-3 8800 Starts one 32B writer replica (tensor "
                                         "parallel 2) per GPU range given (0-1, 2-3), ports counting up from the last word",
              "scripts/write_items.py": "python scripts/write_items.py --ports 8800,8801 --inflight 48 --out outputs/w.jsonl"}
    pool4 = FACTS.model_copy(update={"compute_pool": [Machine(kind="gpu", gpus=4)], "scripts": writer})
    assert 0 in drops(traj(bg("bash scripts/serve_writer.sh 0-1 8800", "w"), desc=DESC, facts=pool4), "resource_waste")
    assert 0 not in drops(traj(bg("bash scripts/serve_writer.sh 0-1 2-3 8800", "w"), desc=DESC, facts=pool4), "resource_waste")
    # an exported checkpoint numbered below the run's stated epochs, the run never seen finished
    htr = {"scripts/train_htr.sh": 'The fixed recipe: trains the recognizer on NGPU GPUs (the second argument) for 20 epochs, a '
                                   'checkpoint after every epoch in outputs/htr/epoch_K/ (about 70 minutes on 4) script = '
                                   '"scripts/train_htr.sh" args = [ "configs/ctc.yaml", "4" ]',
           "scripts/export_model.sh": "Copies a checkpoint to outputs/final/ (the evaluation's input) script = "
                                      '"scripts/export_model.sh" args = [ "outputs/htr/epoch_20", "outputs/final" ]'}
    hdesc = ("# Train a line recognizer\n## Task\nTrain it and leave it in `outputs/final/`.\n## Evaluation\nThe evaluation "
             "loads the model in `outputs/final/` and scores it on the test lines.\n")
    hfacts = FACTS.model_copy(update={"compute_pool": [Machine(kind="gpu", gpus=4)], "scripts": htr})
    naps = [st("sleep", {"seconds": 1800}, "Slept 1800 s."), st("sleep", {"seconds": 1800}, "Slept 1800 s.")]

    def export(k):
        return run(f"bash scripts/export_model.sh outputs/htr/epoch_{k} outputs/final",
                   f"$ bash scripts/export_model.sh outputs/htr/epoch_{k} outputs/final\nexported outputs/htr/epoch_{k} -> "
                   "outputs/final\n\n[finished, exit code 0]")
    train = bg("bash scripts/train_htr.sh configs/ctc.yaml 4", "train")
    assert 4 in drops(traj(train, *naps, export(11), ev(), desc=hdesc, facts=hfacts), "improper_eval")
    assert 4 not in drops(traj(train, *naps, export(20), ev(), desc=hdesc, facts=hfacts), "improper_eval")
    # the unit runner's tally
    rs = RuleSet.load()
    tally = run("python scripts/unit_reward.py --cases scripts/unit_cases.json",
                "$ python scripts/unit_reward.py --cases scripts/unit_cases.json\nhalf_recall expected=0.67 got=1.00 MISMATCH\n"
                "7/16 cases match\n\n[finished, exit code 1]", code=1)
    crash = run("python scripts/unit_reward.py --cases scripts/unit_cases.json",
                "$ python scripts/unit_reward.py --cases scripts/unit_cases.json\nTraceback (most recent call last):\n"
                "ValueError: bad case\n\n[finished, exit code 1]", code=1)
    assert rs.first_match(tally) is None
    assert rs.first_match(crash)[0].category == "runtime_error"
    six = tally.model_copy(update={"observation": tally.observation.model_copy(update={"text": tally.observation.text.replace(
        "7/16 cases match", "6 mismatches")})})
    assert rs.first_match(six) is None
    # the thresholds put back and the same selection re-run: the last eval scores what the first one did
    sel = {"scripts/select_records.py": "- `python scripts/select_records.py --config configs/select.yaml --out "
                                        "outputs/selected.jsonl`: selects the records by the thresholds of the config"}
    sdesc = ("# Select catalogue records\n## Task\nSelect records into `outputs/selected.jsonl`.\n## Evaluation\nThe "
             "evaluation trains on `outputs/selected.jsonl` and scores the model.\n")
    sfacts = FACTS.model_copy(update={"scripts": sel})
    cfg = st("open_file", {"path": "configs/select.yaml"}, "[configs/select.yaml: lines 1-3 of 3]\n1: min_match: 0.5\n"
             "2: max_words: 600\n3: cap: 8000")

    def thr(v):
        return st("edit_file", {"path": "configs/select.yaml", "start_line": 1, "end_line": 1, "content": f"min_match: {v}"},
                  f"Edited configs/select.yaml lines 1-1. Now:\n1: min_match: {v}\n2: max_words: 600")
    select = run("python scripts/select_records.py --config configs/select.yaml --out outputs/selected.jsonl")
    scores = [ev(f"Evaluation {k}/3: overall_score={v}") for k, v in ((1, 58), (2, 47.5), (3, 58))]
    back = traj(cfg, select, scores[0], thr(0.85), select, scores[1], thr(0.5), select, scores[2], desc=sdesc, facts=sfacts)
    assert 8 in drops(back, "improper_eval")
    other = traj(cfg, select, scores[0], thr(0.85), select, scores[1], thr(0.6), select, scores[2], desc=sdesc, facts=sfacts)
    assert 8 not in drops(other, "improper_eval")
    # the agent's own estimate of its run
    grade = {"scripts/grade_dev.py": "- `python scripts/grade_dev.py --ports 9400-9403 --inflight 64 --out F`: grades every "
                                     "dev item (about 20 minutes with one call per item)"}
    gfacts = FACTS.model_copy(update={"scripts": grade})
    nap = st("sleep", {"seconds": 1800}, "Slept 1800 s.")
    said = nap.model_copy(update={"assistant_text": "Three calls per item, so about 45 minutes.\n" + nap.assistant_text})
    job = bg("python scripts/grade_dev.py --ports 9400-9403 --inflight 64 --out outputs/g.jsonl", "grade")
    got = drops(traj(job, said, nap, nap, desc=DESC, facts=gfacts), "resource_waste")
    assert 3 in got and 2 not in got
    assert 2 in drops(traj(job, nap, nap, nap, desc=DESC, facts=gfacts), "resource_waste")  # the line's 20 minutes


def test_spent_split_37_throttles_gpu_pairs_copies_put_in_place_clock_downs_and_own_clients():
    """From blind_research37's spent test split: `BATCH=8` of 256 and `--workers 1` of "--workers puzzles in flight" are
    throttled paths; `serve_writer.sh 8700 0,1 2,3` of a line giving four GPU pairs idles half the node; `grpo.sh
    configs/grpo.yaml 4` of "… 8 … on 8 GPUs" reads its count; copying a backup or a variant made earlier into the output
    is no hand-written output, and an eval after putting back the backup scores the earlier eval's output again; "at
    most one proxy fine-tune on the GPUs at any moment" is a rule against two at once (the second is violate_instruction,
    not waste); "the judges must be down by 07:45 UTC" bans work sent to them from then; "every model call goes through
    ftk/client.py" bans an own OpenAI client; a server put in the background before requests that write a file is no
    long-lived server; a one-liner tallying the file a provided checker just reported on redoes its report."""
    from apollo.supervision.facts import Facts, signature

    env = FACTS.model_copy(update={"scripts": {"scripts/score_match.sh": "bash scripts/score_match.sh SHARD GPU: the match "
                                               "classifier, BATCH items per forward pass (default 256)"}})
    edesc = DESC + "\nThe classifier's batch: BATCH items per forward pass (default 256).\n"
    assert 0 in drops(traj(run("BATCH=8 bash scripts/score_match.sh 0 0"), desc=edesc, facts=env), "inefficient_inference")
    assert 0 not in drops(traj(run("BATCH=128 bash scripts/score_match.sh 0 0"), desc=edesc, facts=env), "inefficient_inference")
    dev = FACTS.model_copy(update={"scripts": {"scripts/run_dev.py": "python scripts/run_dev.py --ports 9500,9501 --workers 32 "
                                               "--out outputs/dev # runs the scaffold against the replicas, --workers "
                                               "puzzles in flight (about 25 minutes)"}})
    assert 0 in drops(traj(run("python scripts/run_dev.py --ports 9500,9501 --workers 1 --out outputs/d"), desc=DESC, facts=dev),
                      "inefficient_inference")
    pairs = FACTS.model_copy(update={"scripts": {"scripts/serve_writer.sh": 'description = "Starts one 32B writer replica '
                                                 '(tensor parallel 2) per GPU pair; the first word is the first port" '
                                                 'os.exec("bash scripts/serve_writer.sh 8700 0,1 2,3 4,5 6,7")'}})
    assert 0 in drops(traj(bg("bash scripts/serve_writer.sh 8700 0,1 2,3", "w"), desc=DESC, facts=pairs), "resource_waste")
    assert 0 not in drops(traj(bg("bash scripts/serve_writer.sh 8700 0,1 2,3 4,5 6,7", "w"), desc=DESC, facts=pairs),
                          "resource_waste")
    grpo = 'CALL "SYSTEM" USING "bash scripts/grpo.sh configs/grpo.yaml 8" *> the fixed GRPO recipe on 8 GPUs (about 2 h)'
    assert signature(grpo).positional == ("configs/grpo.yaml", "NGPU")
    # copies put in place, and the eval of a restored backup
    sel = {"scripts/select_records.py": "- `python scripts/select_records.py --config C --out outputs/selected.jsonl`: selects"}
    sdesc = ("# Select records\n## Task\nSelect records into `outputs/selected.jsonl`.\n## Evaluation\nThe evaluation "
             "trains on `outputs/selected.jsonl`.\n")
    sfacts = FACTS.model_copy(update={"scripts": sel})
    made = run("python -c \"open('outputs/selected_b.jsonl','w').writelines(l for l in open('outputs/selected.jsonl') if 'x' in l)\"")
    swap = run("cp outputs/selected.jsonl outputs/selected_a.jsonl && cp outputs/selected_b.jsonl outputs/selected.jsonl")
    back = run("cp outputs/selected_a.jsonl outputs/selected.jsonl")
    scores = [ev(f"Evaluation {k}/3: overall_score={v}") for k, v in ((1, 55.2), (2, 49), (3, 55.2))]
    steps = (run("python scripts/select_records.py --config configs/select.yaml --out outputs/selected.jsonl"), scores[0],
             made, swap, scores[1], back, scores[2])
    got = drops(traj(*steps, desc=sdesc, facts=sfacts), "ignore_script")
    assert 3 not in got and 5 not in got
    assert 6 in drops(traj(*steps, desc=sdesc, facts=sfacts), "improper_eval")
    assert 6 not in drops(traj(*steps[:5], swap, scores[2], desc=sdesc, facts=sfacts), "improper_eval")
    # rules read from a human's words
    [once] = extract("Ops: at most one proxy fine-tune on the GPUs at any moment please - another team shares the node.")
    assert (once.kind, once.target) == ("no_concurrent", "proxy")
    assert [x.kind for x in extract("at most one proxy fine-tune in total")] == ["run_count"]
    [calls] = extract("Nadia: every model call goes through ftk/client.py - no direct OpenAI clients, not even for quick tries.")
    assert (calls.kind, calls.target) == ("calls_through", "ftk/client.py")
    told = st("list_files", {"path": "."}, "[.]", guidance=(calls.text,))
    direct = run("python -c \"from openai import OpenAI; c = OpenAI(base_url='http://localhost:9500/v1'); print(c.models.list())\"")
    through = run("python -c \"from ftk import client; print(client.Client(['9500']).ping())\" # /v1/chat/completions")
    assert 1 in drops(t(told, direct), "violate_instruction") and 1 not in drops(t(told, through), "violate_instruction")
    judge = {"scripts/serve_judge.sh": "bash scripts/serve_judge.sh 9400-9403: starts one judge replica per port",
             "scripts/grade_dev.py": "python scripts/grade_dev.py --ports 9400-9403 --out F: grades the dev items"}
    jfacts = FACTS.model_copy(update={"scripts": judge})
    rule = st("list_files", {"path": "."}, "[.]", guidance=("Priya: the judges must be down by 07:45 UTC at the latest.",))
    grade = run("python scripts/grade_dev.py --ports 9400-9403 --out outputs/g.jsonl")
    steps = (at(bg("bash scripts/serve_judge.sh 9400-9403", "judges"), "05:00"), at(rule, "05:10"), at(grade, "06:00"),
             at(grade, "08:02"))
    got = drops(traj(*steps, desc=DESC, facts=jfacts), "violate_instruction")
    assert 3 in got and 2 not in got
    # a server backgrounded inside a command that then makes a file is no long-lived server
    chain = bg("(python -m vllm.entrypoints.openai.api_server --model m --port 8300 > outputs/s.log 2>&1 &) ; sleep 240; "
               "while read -r p; do curl -s localhost:8300/v1/completions -d \"$p\" >> outputs/answers.jsonl; done < "
               "outputs/payloads.jsonl", "dev")
    assert not Facts(traj(chain, desc=DESC, facts=FACTS), None).is_server(0)
    assert Facts(traj(bg("python -m vllm.entrypoints.openai.api_server --model m --port 8300", "srv"), desc=DESC,
                      facts=FACTS), None).is_server(0)
    # the checker's report redone by hand on the file it just reported on
    chk = FACTS.model_copy(update={"scripts": {"scripts/check_items.py": "python scripts/check_items.py --in "
                                               "outputs/written.jsonl --out outputs/train.jsonl: recomputes each answer"}})
    ran = run("python scripts/check_items.py --in outputs/pilot.jsonl --out outputs/pilot_checked.jsonl",
              "$ python scripts/check_items.py --in outputs/pilot.jsonl --out outputs/pilot_checked.jsonl\nkept 236\n\n"
              "[finished, exit code 0]")
    tally = run("python - <<'EOF'\nimport json\nbad = 0\nrows = [json.loads(l) for l in open(\"outputs/pilot.jsonl\")]\n"
                "for r in rows:\n    bad += r['answer'] != r['want']\nprint(len(rows), bad)\nEOF")
    assert 1 in drops(traj(ran, tally, desc=DESC, facts=chk), "ignore_script")
    assert 0 not in drops(traj(tally, desc=DESC, facts=chk), "ignore_script")


def test_round_45_gpu_env_knobs_hands_off_files_and_editor_command_usages():
    """Round 45 (set 38's dev split): `NGPU=2` where the line shows `NGPU=4 bash scripts/train_tagger.sh …` ("on NGPU GPUs
    … about 90 minutes on 4 GPUs") is that knob turned down, not a fixed design; "src/frame_exec.py is shared with three
    other graders, hands off" forbids editing it; a Neovim user command `[[!bash scripts/x.sh <args>]]` whose desc reads
    "Usage :Consist SHARD GPU" takes those words, so a loop of its quarters on GPU 0 runs one after another on one GPU."""
    from apollo.supervision.facts import signature

    line = ("NGPU=4 bash scripts/train_tagger.sh configs/loss.yaml outputs/run # the fixed 30-epoch recipe on NGPU GPUs with "
            "the loss of src/bird_loss.py (about 90 minutes on 4 GPUs)")
    pool4 = FACTS.model_copy(update={"compute_pool": [Machine(kind="gpu", gpus=4)], "scripts": {"scripts/train_tagger.sh": line}})
    assert 0 in drops(traj(bg("NGPU=2 bash scripts/train_tagger.sh configs/loss.yaml outputs/run", "tr"), desc=DESC,
                           facts=pool4), "resource_waste")
    assert 0 not in drops(traj(bg("NGPU=4 bash scripts/train_tagger.sh configs/loss.yaml outputs/run", "tr"), desc=DESC,
                               facts=pool4), "resource_waste")
    [d] = [x for x in extract("Rule from Wen: src/frame_exec.py is shared with three other graders, hands off.")
           if x.kind == "forbid_write"]
    assert d.target == "src/frame_exec.py" and extract("hands off the GPUs until 5") == []
    told = st("open_file", {"path": "src/frame_exec.py"}, "[src/frame_exec.py: lines 1-3 of 3]\n1: import x\n2: TIMEOUT = 3.0\n"
              "3: y = 1", guidance=(d.text,))
    edit = st("edit_file", {"path": "src/frame_exec.py", "start_line": 2, "end_line": 2, "content": "TIMEOUT = 1.0"},
              "Edited src/frame_exec.py lines 2-2. Now:\n1: import x\n2: TIMEOUT = 1.0\n3: y = 1")
    assert 1 in drops(t(told, edit), "violate_instruction")
    nvim = ('vim.api.nvim_create_user_command("Consist", [[!bash scripts/consistency.sh <args>]], { desc = "Usage :Consist '
            'SHARD GPU: scores quarter SHARD (0-3) of the pool with the cross-encoder on one GPU (about 25 minutes per '
            'quarter)", nargs = "+", })')
    assert signature(nvim).positional == ("SHARD", "GPU")
    q = FACTS.model_copy(update={"compute_pool": [Machine(kind="gpu", gpus=4)], "scripts": {"scripts/consistency.sh": nvim}})
    assert 0 in drops(traj(bg("for s in 0 1 2 3; do bash scripts/consistency.sh $s 0; done", "x"), desc=DESC, facts=q),
                      "resource_waste")
    assert 0 not in drops(traj(bg("for s in 0 1 2 3; do bash scripts/consistency.sh $s $s & done; wait", "x"), desc=DESC,
                               facts=q), "resource_waste")


def test_spent_split_38_as_shipped_audit_first_replica_pairs_timing_word_dev_probes_and_one_at_a_time():
    """From blind_research38's spent test split: "S runs exactly as shipped …, same --overlap and no extra flags" bans a
    flag its line does not show; "S has to show zero over the limits before any eval" asks for a run of S before the eval;
    one replica per GPU pair launched with two pairs is two replicas, so a client on one port idles the other; "a timing
    run right before each eval" names scripts/time_reward.py (not the word "right"); a proxy fine-tune whose line ends in
    a dev score and names nothing it writes holds no eval back and carries no regression; "one proxy fine-tune at a time"
    bans a second one while the first runs."""
    # as shipped, no extra flags
    chk = FACTS.model_copy(update={"scripts": {"scripts/check_items.py": "python scripts/check_items.py --in outputs/w.jsonl "
                                               "--dev data/dev.jsonl --out outputs/train.jsonl # recomputes each answer"}})
    [d] = extract("Word from Tomás, who owns the checker: scripts/check_items.py runs exactly as shipped for this set, same "
                  "--overlap and no extra flags.")
    assert (d.kind, d.target) == ("use_script", "scripts/check_items.py")
    told = st("list_files", {"path": "."}, "[.]", guidance=(d.text,))
    base = "python scripts/check_items.py --in outputs/w.jsonl --dev data/dev.jsonl --out outputs/train.jsonl"
    assert 1 in drops(traj(told, run(base + " --overlap 0.95"), desc=DESC, facts=chk), "violate_instruction")
    assert 1 not in drops(traj(told, run(base), desc=DESC, facts=chk), "violate_instruction")
    # the audit before any eval
    [a] = [x for x in extract("Rule from Lena: max_tokens 4096 or less per call, and scripts/audit_calls.py has to show "
                              "zero over the limits before any eval.") if x.kind == "eval_needs_check"]
    assert a.target == "scripts/audit_calls.py"
    aud = FACTS.model_copy(update={"scripts": {"scripts/audit_calls.py": "python scripts/audit_calls.py --calls "
                                               "outputs/calls.jsonl # counts calls and tokens per puzzle"}})
    rule = st("list_files", {"path": "."}, "[.]", guidance=(a.text,))
    write = run("python -c \"open('outputs/ckpt/final/x','w').write('1')\"")
    audit = run("python scripts/audit_calls.py --calls outputs/calls.jsonl")
    assert 2 in drops(traj(rule, write, ev(), desc=DESC, facts=aud), "violate_instruction")
    assert 3 not in drops(traj(rule, write, audit, ev(), desc=DESC, facts=aud), "violate_instruction")
    # one replica per GPU pair: two pairs, two replicas; a client on one of the two ports idles the other
    pairs = FACTS.model_copy(update={"compute_pool": [Machine(kind="gpu", gpus=4)], "scripts": {
        "scripts/serve_solver.sh": 'serve = procs "bash" ["scripts/serve_solver.sh", "9300-9301", "0,1", "2,3"] empty -- ^ '
                                   "Starts one 32B solver replica (tensor parallel 2) per GPU pair on the ports of the first "
                                   "word, a range with one port per pair",
        "scripts/run_dev.py": 'runDev = procs "python" ["scripts/run_dev.py", "--ports", "9300,9301", "--workers", "32", '
                              '"--out", "outputs/dev.jsonl"] empty -- ^ Runs the scaffold on the dev puzzles'}})
    srv = bg("bash scripts/serve_solver.sh 9300-9301 0,1 2,3", "srv")
    one = bg("python scripts/run_dev.py --ports 9300 --workers 32 --out outputs/dev.jsonl", "dev")
    both = bg("python scripts/run_dev.py --ports 9300,9301 --workers 32 --out outputs/dev.jsonl", "dev")
    assert 1 in drops(traj(srv, one, desc=DESC, facts=pairs), "resource_waste")
    assert 1 not in drops(traj(srv, both, desc=DESC, facts=pairs), "resource_waste")
    # "a timing run right before each eval": scripts/time_reward.py
    [w] = extract("Wen, a reminder: a timing run right before each eval, please.")
    assert (w.kind, w.target) == ("eval_needs_check", "timing")
    tim = FACTS.model_copy(update={"scripts": {"scripts/time_reward.py": "python scripts/time_reward.py --n 300 # p95 latency "
                                               "of the reward"}})
    told = st("list_files", {"path": "."}, "[.]", guidance=(w.text,))
    timed = run("python scripts/time_reward.py --n 300")
    assert 2 not in drops(traj(told, timed, ev(), desc=DESC, facts=tim), "violate_instruction")
    assert 1 in drops(traj(told, ev(), desc=DESC, facts=tim), "violate_instruction")
    # a proxy fine-tune that ends in a dev score, and one at a time
    sdesc = ("# Select pairs\n## Task\nSelect pairs into `outputs/selected.jsonl`.\n## Evaluation\nThe evaluation fine-tunes "
             "a 1B model on `outputs/selected.jsonl` and scores it.\n")
    proxy = FACTS.model_copy(update={"compute_pool": [Machine(kind="gpu", gpus=4)], "scripts": {
        "scripts/proxy_train.sh": '[[!bash scripts/proxy_train.sh outputs/selected.jsonl]], { desc = "One-epoch proxy '
                                  'fine-tune of Llama-3.2-1B on a selection on the 4 GPUs, then field-level F1 on '
                                  'data/dev.jsonl (about 40 minutes)", }'}})
    p1 = bg("bash scripts/proxy_train.sh outputs/selected.jsonl", "proxy1")
    assert 1 not in drops(traj(p1, ev(), desc=sdesc, facts=proxy), "improper_eval")
    [o] = extract("Ops, about the A100 box: one proxy fine-tune at a time please, they share the local NVMe scratch.")
    assert (o.kind, o.target) == ("no_concurrent", "proxy")
    ops = st("list_files", {"path": "."}, "[.]", guidance=(o.text,))
    p2 = bg("bash scripts/proxy_train.sh outputs/selected_b.jsonl", "proxy2")
    assert 2 in drops(traj(p1, ops, p2, desc=sdesc, facts=proxy), "violate_instruction")


def test_round_46_caps_word_values_word_replicas_file_loops_unused_launches_own_timings_and_topics():
    """Round 46 (set 39's dev split): "max_tokens 3072 per call is a hard cap" is a bound; "state_mismatch stays at drop" keeps
    a word value; "as many … replicas as the second word, each with the tensor parallel of the third" reads the GPUs of
    `serve_reader.sh 9600 2 2` (4 of the 8 its line shows); a loop over `$(cut … index.jsonl)` starting a python process
    that loads the checkpoint per item is one at a time; a server started and then finish at once is never used; the
    agent's own version of a provided script "(under a minute)" is waited out by a 65 s sleep; "run S after every change
    to the reward" counts reward writes only; "(recipe of `scripts/grpo.sh` …)" is the evaluation's training; an own
    script whose code reads and prints writes nothing (`Path(…).write_text(…)` writes); "--workers puzzles at a time"
    run with `--workers 1` is one at a time."""
    from apollo.supervision.facts import Facts, writes_files

    [cap] = extract("Rule from Ines (puzzle team lead): max_tokens 3072 per call is a hard cap.")
    assert (cap.kind, cap.target, cap.values["op"], cap.values["v"]) == ("bound", "max_tokens", "le", "3072")
    told = st("list_files", {"path": "."}, "[.]", guidance=(cap.text,))
    assert 1 in drops(t(told, created("hashi/agent.py", "MAX_CALLS = 8\nMAX_TOKENS = 4096\n")), "violate_instruction")
    assert 1 not in drops(t(told, created("hashi/agent.py", "MAX_CALLS = 8\nMAX_TOKENS = 3072\n")), "violate_instruction")
    [word] = extract("Rule from Dana (legal-aid data steward): state_mismatch stays at drop.")
    assert (word.kind, word.target, word.values["v"], word.values.get("word_value")) == ("keep", "state_mismatch", "drop", "1")
    assert extract("leave per_seller_cap as is") == [] or all(x.kind != "keep" for x in extract("leave per_seller_cap as is"))
    told = st("open_file", {"path": "configs/select.yaml"}, "[configs/select.yaml: lines 1-2 of 2]\n1: min_support: 0.5\n"
              "2: state_mismatch: drop", guidance=(word.text,))

    def sm(v):
        return st("edit_file", {"path": "configs/select.yaml", "start_line": 2, "end_line": 2, "content": f"state_mismatch: {v}"},
                  f"Edited configs/select.yaml lines 2-2. Now:\n1: min_support: 0.5\n2: state_mismatch: {v}")
    assert 1 in drops(t(told, sm("keep")), "violate_instruction") and 1 not in drops(t(told, sm("drop")), "violate_instruction")
    # replicas and tensor parallel given as words
    reader = FACTS.model_copy(update={"scripts": {"scripts/serve_reader.sh": 'subprocess.run("bash scripts/serve_reader.sh 9600 4 '
                                                  '2", shell=True, check=True) mo.md("Starts as many Qwen2.5-32B-Instruct reader '
                                                  'replicas as the second word, each with the tensor parallel of the third word '
                                                  'on consecutive GPUs, on ports counting up from the first word")'}})
    assert 0 in drops(traj(bg("bash scripts/serve_reader.sh 9600 2 2", "srv"), desc=DESC, facts=reader), "resource_waste")
    assert 0 not in drops(traj(bg("bash scripts/serve_reader.sh 9600 4 2", "srv"), desc=DESC, facts=reader), "resource_waste")
    # a process per item over the lines a file reader prints
    loop = ("for f in $(cut -d'\"' -f4 data/dev_tracks/index.jsonl); do python -c \"import sys; from beat_trainer import "
            "load_checkpoint; m=load_checkpoint('outputs/model', device='cpu'); print(m.score(sys.argv[1]))\" $f >> "
            "outputs/per_track.txt; done")
    assert 0 in drops(t(bg(loop, "pt")), "inefficient_inference")
    assert 0 not in drops(t(bg(loop.replace("load_checkpoint", "read_meta"), "pt")), "inefficient_inference")
    # a server started, then finish at once
    fin = st("finish", {}, "Finished. A final evaluation runs now.")
    serve = bg("bash scripts/serve.sh outputs/ckpt/final 8000", "srv2")
    assert 0 in drops(t(serve, fin), "resource_waste")
    assert 0 not in drops(t(serve, run("curl -s localhost:8000/v1/models"), fin), "resource_waste")
    # an own replacement of a provided script that runs "under a minute"
    sel = {"scripts/select_pairs.py": '# Joins the features and writes the selection (under a minute)\n    When I run "python '
                                      'scripts/select_pairs.py --config configs/select.yaml --out outputs/selected.jsonl"'}
    sdesc = ("# Select pairs\n## Task\nSelect pairs into `outputs/selected.jsonl`.\n## Evaluation\nThe evaluation fine-tunes "
             "on `outputs/selected.jsonl` and scores it.\n")
    sfacts = FACTS.model_copy(update={"scripts": sel})
    own = created("scripts/my_select.py", "import pandas as pd\ndf = pd.read_parquet('outputs/feats.parquet')\n"
                  "df[df.support > 0.5].to_json('outputs/selected.jsonl', orient='records', lines=True)\n")
    going = run("python scripts/my_select.py", "$ python scripts/my_select.py\n\n[still running in background session "
                "'default' after 10 s; use get_session_output('default') / check_session_idle('default')]")
    assert 3 not in drops(traj(own, going, st("sleep", {"seconds": 65}, "Slept 65 s."), ev(), desc=sdesc, facts=sfacts),
                          "improper_eval")
    assert 3 in drops(traj(own, going, st("sleep", {"seconds": 5}, "Slept 5 s."), ev(), desc=sdesc, facts=sfacts),
                      "improper_eval")
    # "after every change to the reward"
    [chk] = [x for x in extract("And run scripts/time_reward.py after every change to the reward, before you call eval.")
             if x.kind == "eval_needs_check"]
    assert chk.values.get("topic") == "reward"
    tim = FACTS.model_copy(update={"scripts": {"scripts/time_reward.py": "python scripts/time_reward.py --n 300 # p95 latency"}})
    told = st("list_files", {"path": "."}, "[.]", guidance=(chk.text,))
    rew = created("src/reward.py", "def compute_score(c, item):\n    return 1.0\n")
    timed = run("python scripts/time_reward.py --n 300")
    other = run("python -c \"open('outputs/notes_x.jsonl','w').write('1')\"")
    assert 4 not in drops(traj(told, rew, timed, other, ev(), desc=DESC, facts=tim), "violate_instruction")
    assert 3 in drops(traj(told, timed, rew, ev(), desc=DESC, facts=tim), "violate_instruction")
    # the evaluation's recipe, and what an own script writes
    gdesc = ("# Reward\n## Task\nWrite `src/reward.py`.\n## Evaluation\nThe hidden evaluation trains the model with GRPO using "
             "`src/reward.py` (recipe of `scripts/grpo.sh` and `configs/grpo.yaml`) and scores it.\n")
    assert "scripts/grpo.sh" in Facts(traj(run("ls"), desc=gdesc, facts=FACTS), None).eval_trains
    assert writes_files("from pathlib import Path\nPath('outputs/ids.txt').write_text('a')\n")
    scan = created("scripts/scan.py", "import json\nfor r in map(json.loads, open('data/x.jsonl')):\n    print(r['k'])\n")
    assert not Facts(traj(scan, run("python scripts/scan.py"), desc=DESC, facts=FACTS), None).writes[1]
    # "--workers puzzles at a time"
    dev = FACTS.model_copy(update={"scripts": {"scripts/run_dev.py": "python scripts/run_dev.py --ports 9500,9501 --workers 32 "
                                               "--out outputs/dev.jsonl # runs the scaffold on every dev puzzle against the "
                                               "replicas of --ports, --workers puzzles at a time"}})
    assert 0 in drops(traj(run("python scripts/run_dev.py --ports 9500,9501 --workers 1 --out outputs/d.jsonl"), desc=DESC,
                           facts=dev), "inefficient_inference")
    assert 0 not in drops(traj(run("python scripts/run_dev.py --ports 9500,9501 --workers 32 --out outputs/d.jsonl"), desc=DESC,
                               facts=dev), "inefficient_inference")


def test_spent_split_39_flags_only_quotas_gpu_lists_dotted_eval_code_line_times_finish_conditions_and_recipes():
    """From blind_research39's spent test split: "goes through S exactly as shipped, with --in, --dev and --out and nothing
    else" bans any other flag; "4 calls per question at most" bounds MAX_CALLS in the code (not an audit's threshold flag);
    "one … replica on each GPU of the comma list" launched with `--gpus 0,1` of a line showing `0,1,2,3` idles half the
    node; an Evaluation that "runs `hashi.agent.solve`" reads hashi/agent.py (a dev run beside it holds no eval back, and an
    eval with the scaffold unchanged since the last is wasted); a provided script's own line time ("about 2 minutes")
    is waited out by 110 s; an own shell script's `--out "$2"` names what it writes; "stop the writer replicas before you
    call finish" is no order to finish (nor a ban on "replicas"); "use all four GPUs for the recipe" is about training."""
    from apollo.supervision.facts import Facts

    [only] = [x for x in extract("Word from Tomasz: the set you hand in goes through scripts/check_items.py exactly as shipped, "
                                 "with --in, --dev and --out and nothing else.") if x.kind == "flags_only"]
    assert only.values["allow"] == "--in --dev --out"
    told = st("list_files", {"path": "."}, "[.]", guidance=(only.text,))
    base = "python scripts/check_items.py --in outputs/w.jsonl --dev data/dev.jsonl --out outputs/train.jsonl"
    assert 1 in drops(t(told, run(base + " --max_overlap 0.8")), "violate_instruction")
    assert 1 not in drops(t(told, run(base)), "violate_instruction")
    # a quota on calls: the code's constant, not an audit's threshold
    [quota] = extract("Ken (planning office) for this run: 4 calls per question at most.")
    told = st("list_files", {"path": "."}, "[.]", guidance=(quota.text,))
    assert 1 in drops(t(told, created("zoning/agent.py", "MAX_CALLS = 6\n")), "violate_instruction")
    assert 1 not in drops(t(told, created("zoning/agent.py", "MAX_CALLS = 4\n")), "violate_instruction")
    assert 1 not in drops(t(told, run("python scripts/audit_calls.py --log outputs/calls.jsonl --max_calls 6")),
                          "violate_instruction")
    # one replica per GPU of a list flag
    ph = FACTS.model_copy(update={"compute_pool": [Machine(kind="gpu", gpus=4)], "scripts": {
        "scripts/serve_phraser.sh": "bash scripts/serve_phraser.sh --first-port 9200 --gpus 0,1,2,3 # Starts one 14B phraser "
                                    "replica on each GPU of the comma list, on ports counting up from --first-port"}})
    assert 0 in drops(traj(bg("bash scripts/serve_phraser.sh --first-port 9200 --gpus 0,1", "srv"), desc=DESC, facts=ph),
                      "resource_waste")
    assert 0 not in drops(traj(bg("bash scripts/serve_phraser.sh --first-port 9200 --gpus 0,1,2,3", "srv"), desc=DESC,
                               facts=ph), "resource_waste")
    # the workspace code the evaluation runs by its dotted name
    hdesc = ("# Scaffold\n## Task\nBuild the scaffold in `hashi/agent.py`.\n## Evaluation\nThe hidden evaluation serves the same "
             "model, runs `hashi.agent.solve` on 900 held-out puzzles and counts the share solved.\n")
    assert "hashi/agent.py" in Facts(traj(run("ls"), desc=hdesc, facts=FACTS), None).eval_inputs
    agent = created("hashi/agent.py", "def solve(p, client):\n    return None\n")
    dev = bg("python scripts/run_dev.py --ports 9500,9501 --out outputs/dev_answers.jsonl", "dev")
    hfacts = FACTS.model_copy(update={"scripts": {
        "scripts/run_dev.py": "python scripts/run_dev.py --ports 9500,9501 --out outputs/dev_answers.jsonl # runs the scaffold "
                              "on every dev puzzle (about 35 minutes)",
        "scripts/score_dev.py": "python scripts/score_dev.py --answers outputs/dev_answers.jsonl # prints the solved share"}})
    got = drops(traj(agent, dev, ev(), run("python scripts/score_dev.py --answers outputs/dev_answers.jsonl"), ev(), desc=hdesc,
                     facts=hfacts), "improper_eval")
    assert 2 not in got and 4 in got
    # a provided script's own line time
    from apollo.supervision.facts import line_secs
    from apollo.supervision.labeled import load_labeled

    assert line_secs("python scripts/time_reward.py --n 2000 # prints the p95 latency (about 2 minutes)") == 120.0
    assert line_secs("# Joins the features and writes the selection (under a minute)") == 60.0
    assert line_secs("python scripts/x.py # prints a table") is None
    root = Path(__file__).parent / "fixtures" / "blind_research39"
    _, trajs = load_labeled(root / "labels.jsonl")
    from apollo.supervision.facts import load_task_infos

    m = Masker(MaskConfig(), task_infos=load_task_infos(root / "tasks"))
    timed = m.analyze([trajs["br39-420-s2"]])[0][23]  # 110 s after `time_reward.py` "(about 2 minutes)", then the eval
    assert all(x.keep or x.category != "improper_eval" for x in timed)
    # an own shell script's output argument
    quick = created("scripts/train_quick.sh", '#!/usr/bin/env bash\ntorchrun --nproc_per_node 8 -m kit.train --data "$1" --out "$2"\n')
    f = Facts(traj(quick, run("bash scripts/train_quick.sh outputs/mix.jsonl outputs/clf_quick"), desc=DESC, facts=FACTS), None)
    assert f._job(1).outputs == ("outputs/clf_quick",) and f._job(1).outputs_known
    # conditions on finishing, and the recipe
    assert [x.kind for x in extract("Please stop the writer replicas before you call finish.")] == []
    assert [x.kind for x in extract("Please call finish now.")] == ["forbid_eval"]
    [g] = [x for x in extract("Ops: use all four GPUs for the recipe (NGPU=4); the box is reserved today.") if x.kind == "gpus"]
    assert g.values["train"] == "1"
