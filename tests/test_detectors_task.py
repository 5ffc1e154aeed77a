"""Regression tests, one per behaviour of issue 15: each built from a trajectory that exhibits it.

Task facts (compute pool, provided scripts, eval budget) come from the task spec, travel in the
trajectory record, and reach the detectors through the Masker; tasks outside the suite need them.
"""

from __future__ import annotations

import pytest

from apollo.agent.actions import format_action, parse_action
from apollo.agent.prompt import initial_messages
from apollo.env.tasks import load_task, parse_compute_pool
from apollo.schema import EvalRecord, Guidance, Machine, Observation, Step, TaskFacts, Trajectory
from apollo.supervision.detectors import get_detectors, run_detectors
from apollo.supervision.facts import load_task_infos
from apollo.supervision.instructions import extract
from apollo.supervision.masker import Masker, MaskConfig, UnknownTaskError

DESC = """# Fine-tune a model
## Task
Train the model in models/base on data/train.jsonl and write the answers to output/answers.jsonl.
## Environment
One machine with 8 A100 GPUs, PyTorch, transformers. vLLM is not installed.
## Scripts
scripts/train.py --config CFG: fine-tunes the model and saves checkpoints/.
scripts/build.py: builds the training set.
"""


def st(tool, args=None, obs="ok", exit_code=0, guidance=(), wall=0.0, refused=False):
    text = format_action("thought", tool, args or {})
    return Step(index=0, assistant_text=text, action=parse_action(text), wall_time_s=wall,
                observation=Observation(text=obs, exit_code=exit_code, refused=refused),
                guidance=[Guidance(guidance_id=f"g{k}", text=g, created_at=0.0) for k, g in enumerate(guidance)])


def run(cmd, obs=None, code=0, **kw):
    return st("run_command", {"command": cmd, **kw}, obs if obs is not None else f"$ {cmd}\n\n[finished, exit code {code}]",
              code, guidance=kw.pop("guidance", ()) if "guidance" in kw else ())


def bg(cmd, sid="job"):
    return st("run_command", {"command": cmd, "session_id": sid, "wait_for_completion": False},
              f"Started in background session '{sid}': {cmd}\nUse check_session_idle('{sid}') later.")


def ev(score_text="Evaluation 1/3: overall_score=10"):
    return st("eval", {}, score_text)


def traj(*steps, evals=(), desc=DESC, facts=None, task_id="ext-1", domain="loss_design"):
    steps = [s.model_copy(update={"index": i}) for i, s in enumerate(steps)]
    return Trajectory(trajectory_id="t", task_id=task_id, split="train", domain=domain, policy_id="p",
                      prefix_messages=initial_messages(desc), steps=steps, evals=list(evals), task_facts=facts)


def drops(t, name, task=None, **params):
    from apollo.supervision.detectors import DetectorParams

    return {f.step: f.reason for f in run_detectors(t, get_detectors([name]), task, DetectorParams(**params))}


POOL8 = TaskFacts(compute_pool=[Machine(kind="gpu", gpus=8)], scripts={"scripts/train.py": "", "scripts/build.py": ""},
                  max_evals=3)
POOL4 = TaskFacts(compute_pool=[Machine(kind="cpu"), Machine(kind="gpu", gpus=4)], max_evals=3)


# ------------------------------------------------------------------------------- task facts
def test_task_spec_carries_compute_pool_scripts_and_budget_into_the_record():
    t = load_task("ld-train-01")
    f = t.facts()
    assert f.compute_pool == [Machine(kind="cpu", gpus=0)] and f.gpus == 0 and f.max_evals == t.max_evals
    assert "scripts/train.py" in f.scripts and "writes output/model.json" in f.scripts["scripts/train.py"]
    pool = parse_compute_pool([{"computer_type": "localhost_cpu"}, {"computer_type": "gpu"},
                               {"computer_type": "gpu", "gpus": 2, "available": False}, "gpu:4"])
    assert [(m.kind, m.gpus) for m in pool] == [("localhost_cpu", 0), ("gpu", 8), ("gpu", 4)]  # InnovatorBench: 8×80 GB
    with pytest.raises(ValueError, match=r"computer_pool\[0\]: gpus/cpus must be integers"):
        parse_compute_pool([{"computer_type": "gpu", "gpus": "many"}])
    rec = traj(run("ls"), facts=f)
    assert Trajectory.model_validate_json(rec.model_dump_json()).task_facts == f  # optional field, same schema version


def test_masker_uses_the_records_facts_and_never_falls_back_to_a_suite_task(tmp_path):
    launch = run("python scripts/train.py --config c.json")
    m = Masker(MaskConfig())
    # same id as a mini-suite task, but the record says 8 GPUs: the record's facts win
    t = traj(launch, facts=POOL8, task_id="ld-train-01")
    d = m.mask([t])[0][0].steps[0].mask
    assert not d.keep and d.category == "resource_waste" and "1 GPU(s) while 8" in d.reason
    with pytest.raises(UnknownTaskError, match="no task 'ext-1'.*task_facts"):
        m.mask([traj(launch)])  # outside the suite, no facts: an error, not a guess
    infos = tmp_path / "tasks.yaml"
    infos.write_text("ext-1:\n  compute_pool: gpu:4\n  scripts: [scripts/train.py]\n  max_evals: 2\n")
    loaded = load_task_infos(infos)
    assert loaded["ext-1"].compute_pool == [Machine(kind="gpu", gpus=4)] and loaded["ext-1"].max_evals == 2
    m2 = Masker(MaskConfig.from_params({"tasks": str(infos)}))
    assert not m2.mask([traj(launch)])[0][0].steps[0].mask.keep
    with pytest.raises(UnknownTaskError, match="not in the given task infos"):
        m2.mask([traj(launch, task_id="ld-train-01")])  # task_infos given: the suite is not consulted
    infos.write_text("ext-1:\n  compute_pool: gpu:4\n  colour: red\n")
    with pytest.raises(ValueError, match=r"tasks.yaml: ext-1: unknown field\(s\) \['colour'\]"):
        load_task_infos(infos)


# ---------------------------------------------------------------------------- resource waste
def test_resource_waste_is_compute_left_idle_not_a_short_blocking_command():
    pip = st("run_command", {"command": "pip install -q peft"}, "$ pip install -q peft\n\n[finished, exit code 0]", wall=6.0)
    plain = run("python scripts/train.py --config c.json")
    one = run("torchrun --nproc_per_node 1 scripts/train.py --config c.json")
    full = run("torchrun --nproc_per_node 4 scripts/train.py --config c.json")
    assert drops(traj(pip, facts=POOL8), "resource_waste") == {}  # a 6 s pip install is no waste
    d = drops(traj(pip, plain, facts=POOL8), "resource_waste")
    assert list(d) == [1] and "1 GPU(s) while 8 of the task's 8 were free" in d[1]  # python train.py, 8 idle GPUs
    assert list(drops(traj(one, full, facts=POOL4), "resource_waste")) == [0]  # --nproc_per_node 1 on a 4-GPU task
    # a server holding 4 of the 8 GPUs: training on the other 4 uses what is free
    server = bg("CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve models/base --port 8000", "srv")
    rest = run("CUDA_VISIBLE_DEVICES=4,5,6,7 torchrun --nproc_per_node 4 scripts/train.py")
    assert drops(traj(server, rest, facts=POOL8), "resource_waste") == {}
    assert drops(traj(plain, facts=TaskFacts(compute_pool=[Machine(kind="cpu")])), "resource_waste") == {}
    assert list(drops(traj(plain), "resource_waste")) == [0]  # no facts: "8 A100 GPUs" in the description



RL_DESC = """# GRPO
## Task
Train the policy with scripts/grpo.sh and leave it in outputs/policy/final/.
## Evaluation
The hidden evaluation runs `outputs/policy/final/` on held-out problems.
## Environment
One machine with 8 H100 GPUs.
## Scripts
- **`scripts/grpo.sh`** — `bash scripts/grpo.sh configs/grpo.yaml OUT`: GRPO on all 8 GPUs; rollouts are scored by
  workers on the CPU server.
- **`scripts/label_judge.py`** — `python scripts/label_judge.py --in FILE --out FILE [--gpus 8]`: judges every row on the GPUs.
"""


def test_a_literal_usage_argument_keeps_its_position_and_an_evaluated_job_frees_its_gpus():
    """From the fifth research set: `grpo.sh configs/grpo.yaml OUT` writes OUT (the literal config takes the
    first position), so an eval right after the launch is improper; a job waited for and then evaluated has
    ended, so a later job on 2 of the 8 GPUs leaves 6 idle."""
    launch = bg("bash scripts/grpo.sh configs/grpo.yaml outputs/policy", "rl")
    d = drops(traj(launch, ev(), desc=RL_DESC), "improper_eval")
    assert list(d) == [1] and "session 'rl'" in d[1], d
    assert drops(traj(launch, st("sleep", {"seconds": 1800}, "Slept 1800 s."), run(
        "ls outputs/policy/final", "$ ls outputs/policy/final\nmodel.safetensors\n\n[finished, exit code 0]"), ev(),
        desc=RL_DESC), "improper_eval") == {}
    check2 = run("python scripts/label_judge.py --in a.jsonl --out b.jsonl --gpus 2")
    d = drops(traj(launch, st("sleep", {"seconds": 1800}, "Slept 1800 s."), ev(), check2, desc=RL_DESC), "resource_waste")
    assert list(d) == [3] and "2 GPU(s) while 8 of the task's 8 were free" in d[3], d
    # an edit of the config alone changes no checkpoint (the Evaluation section names outputs/policy/final): the
    # eval after it re-scores the same policy; a retrain after the edit is a change
    edit = st("edit_file", {"path": "configs/grpo.yaml", "start_line": 2, "end_line": 2, "content": "lr: 1e-6"}, "Edited")
    wait = st("sleep", {"seconds": 1800}, "Slept 1800 s.")
    done = run("ls outputs/policy/final", "$ ls outputs/policy/final\nmodel.safetensors\n\n[finished, exit code 0]")
    d = drops(traj(launch, wait, done, ev(), edit, ev(), desc=RL_DESC), "improper_eval")
    assert list(d) == [5] and "nothing changed since the eval at step 3" in d[5], d
    assert drops(traj(launch, wait, done, ev(), edit, launch, wait, done, ev(), desc=RL_DESC), "improper_eval") == {}
    # a second GRPO run into another folder while the first runs (its line names the CPU server, but it is a GPU job)
    d = drops(traj(launch, bg("bash scripts/grpo.sh configs/grpo.yaml outputs/policy_b", "rl2"), desc=RL_DESC),
              "resource_waste")
    assert list(d) == [1] and "started a second scripts/grpo.sh while the one of step 0" in d[1], d
    # not evaluated: the GRPO run may still hold the GPUs, the 2-GPU check is no waste
    assert drops(traj(launch, st("sleep", {"seconds": 1800}, "Slept 1800 s."), check2, desc=RL_DESC), "resource_waste") == {}



def test_inefficient_inference_in_one_liners_and_shell_loops():
    """From the fifth research set: the code of a `python -c` one-liner is read like a created file's, and a
    shell loop that sends one request per iteration is a strictly serial client; batched or parallel ones are not."""
    hf = ("python -c \"import json;from transformers import AutoModelForCausalLM as M;m=M.from_pretrained('ck').cuda()\n"
          "for l in open('dev.jsonl'):\n  print(m.generate(**tok(l, return_tensors='pt'), max_new_tokens=64))\"")
    vl = ("python -c \"from vllm import LLM;l=LLM('ck')\nfor d in open('dev.jsonl'):\n  print(l.generate([d])[0])\"")
    batched = "python -c \"from vllm import LLM;l=LLM('ck');print(l.generate(open('dev.jsonl').read().split()))\""
    loop = ("for id in $(cat ids.txt); do python -c \"import requests;print(requests.post('http://localhost:8000/v1/"
            "chat/completions',json={}).json())\"; done")
    par = "cat ids.txt | xargs -P 16 -I{} curl -s http://localhost:8000/v1/completions -d @{}.json"
    curl_loop = "while read id; do curl -s http://localhost:8000/v1/completions -d @$id.json; done < ids.txt"
    d = drops(traj(run(hf), run(vl), run(batched), run(loop), run(par), run(curl_loop), facts=POOL8), "inefficient_inference")
    assert sorted(d) == [0, 1, 3, 5], d
    assert "python -c one-liner" in d[0] and "once per prompt" in d[1] and "shell loop" in d[3]
    # a comprehension that calls the GPU model once per row; an asyncio loop that awaits each item in turn
    comp = ("python -c \"import json; m=load('ck').cuda(); rows=[json.loads(l) for l in open('dev.jsonl')]; "
            "print([m.predict_one(r['text']) for r in rows])\"")
    serial = ("import asyncio\nasync def main():\n    for issue in load_issues('dev'):\n        print(await solve(issue))\n"
              "asyncio.run(main())\n")
    gathered = ("import asyncio\nasync def main():\n    print(await asyncio.gather(*[solve(i) for i in load_issues('dev')]))\n"
                "asyncio.run(main())\n")
    turns = ("import asyncio\nasync def solve(task):\n    for step in range(12):\n        reply = await client.chat(task)\n"
             "    return reply\n")  # an agent's turns: each waits on the last
    d = drops(traj(run(comp), st("create_file", {"path": "peek.py", "content": serial}, "Created"),
                   st("create_file", {"path": "fast.py", "content": gathered}, "Created"),
                   st("create_file", {"path": "agent.py", "content": turns}, "Created"), facts=POOL8), "inefficient_inference")
    assert sorted(d) == [0, 1] and "predict_one" in d[0] and "awaits solve()" in d[1], d



OWN_DESC = """# Support data
## Task
Select conversations and train the model; leave it in outputs/sft/final/.
## Environment
One machine with 8 A100 GPUs. vLLM is not installed.
## Scripts
- scripts/pii_scan.py (`python scripts/pii_scan.py --convs data/convs --out FILE`): regexes and NER for emails and phones; writes ids with flags.
- scripts/label_stats.py (`python scripts/label_stats.py --data data/train.jsonl`): label frequencies (CPU); writes `data/priors.json`.
- scripts/probe_reward.py (`python scripts/probe_reward.py [--n 1000]`): scores the stored rewrites (`data/probe_rewrites.jsonl`) with the reward.
- scripts/support_dev.py (`python scripts/support_dev.py --ckpt DIR`): helpfulness and a PII-leak count on 500 dev conversations.
- scripts/train_sft.sh (`bash scripts/train_sft.sh DATA OUT`): trains the model on 8 GPUs.
"""


def test_own_versions_in_one_liners_and_serial_dev_scorers():
    """From the sixth research set's dev split: a python -c one-liner that writes the file a provided script's line
    names, or a file named for it, or works through the input file its line names, is its own version of that
    script; a one-at-a-time generator over the dev split where the task provides a dev evaluator is that evaluator
    done again (ignore_script), unless it measures something the evaluator does not (pass@8)."""
    priors = run("python -c \"import json,collections; c=collections.Counter(); json.dump(c, open('data/priors.json','w'))\"")
    pii = run("cat data/convs/*.jsonl | python -c \"import sys,re; [print(l) for l in sys.stdin if re.search('@', l)]\" > outputs/pii.tsv")
    probe = run("python -c \"import json,requests; from src.reward import r; print(sum(r(x) for x in map(json.loads, "
                "open('data/probe_rewrites.jsonl'))))\"")
    data = run("python -c \"rows=[l for l in open('outputs/all.jsonl')]; open('outputs/sft_train.jsonl','w').writelines(rows)\"")
    look = run("python -c \"print(sum(1 for _ in open('data/probe_rewrites.jsonl')))\"")
    d = drops(traj(priors, pii, probe, run("python scripts/pii_scan.py --convs data/convs --out outputs/p.tsv"), data, look,
                   desc=OWN_DESC), "ignore_script")
    assert sorted(d) == [0, 1, 2], d  # (a data file named for the trainer, a count: not the scripts' jobs)
    assert "scripts/label_stats.py" in d[0] and "scripts/pii_scan.py" in d[1] and "scripts/probe_reward.py" in d[2]
    serial = ("import json\nfrom transformers import AutoModelForCausalLM\nm = AutoModelForCausalLM.from_pretrained('ck').cuda()\n"
              "for l in open('data/dev_convs.jsonl'):\n    print(m.generate(**tok(l, return_tensors='pt')))\n")
    passk = serial.replace("print(m.generate", "print('pass@8', m.generate")
    for content, want in ((serial, [0, 1]), (passk, [])):
        t = traj(st("create_file", {"path": "dev_one.py", "content": content}, "Created dev_one.py"),
                 run("python dev_one.py"), desc=OWN_DESC)
        assert sorted(drops(t, "ignore_script")) == want, content[-60:]



GPU_DESC = """# NER augmentation
## Task
Augment the tagger's data and train it; leave it in outputs/ner/final/.
## Environment
One machine with 8 A100 GPUs.
## Scripts
- `scripts/gen.py` — usage: `python scripts/gen.py --n N --out FILE [--tp 4 --dp 2]`; the 70B model with vLLM, batched.
- The checker `aug/span_check.py` is run as `python aug/span_check.py --in FILE --out FILE [--orig data/train.conll]`.
- `scripts/train_ner.sh` — usage: `bash scripts/train_ner.sh DATA OUT [NGPU]`; fine-tunes the tagger on `NGPU` GPUs (default 8).
- `scripts/macro_dev.py` — run with `python scripts/macro_dev.py --ckpt DIR [--tune_thresholds --gpus 1]`. Macro-F1 on dev.
"""


def test_gpu_counts_from_tp_times_dp_a_positional_ngpu_and_the_usage_line():
    """From the sixth research set's dev split: --tp 4 --dp 2 is 8 GPUs; `train_ner.sh DATA OUT 2` is 2 of 8; a
    checker whose line names data/train.conll is no training job; `--gpus 1` where the usage line shows `--gpus 1`
    is the documented way to run it."""
    cases = [("python scripts/gen.py --n 10 --out outputs/g.jsonl --tp 4 --dp 2", {}),
             ("python scripts/gen.py --n 10 --out outputs/g.jsonl --tp 4 --dp 1", {0}),
             ("bash scripts/train_ner.sh outputs/a.conll outputs/ner 2", {0}),
             ("bash scripts/train_ner.sh outputs/a.conll outputs/ner 8", {}),
             ("python aug/span_check.py --in outputs/p.conll --out outputs/p_ok.conll", {}),
             ("python scripts/macro_dev.py --ckpt outputs/ner/final --tune_thresholds --gpus 1", {})]
    for cmd, want in cases:
        assert set(drops(traj(run(cmd), desc=GPU_DESC), "resource_waste")) == set(want), cmd


# ---------------------------------------------------------------------------- improper eval
def test_a_persistent_server_does_not_make_later_evals_improper():
    t = traj(bg("python -m vllm.entrypoints.openai.api_server --model models/base --port 8000", "srv"),
             run("python scripts/build.py --output output/answers.jsonl"), ev())
    assert drops(t, "improper_eval") == {}


def test_job_completion_from_its_log_or_its_output_files():
    launch = bg("python scripts/train.py --config c.json > train.log 2>&1", "train")
    tail_done = run("tail -n 2 train.log", "$ tail -n 2 train.log\nepoch 3 loss 0.12\ntraining finished\n\n"
                                          "[finished, exit code 0]")
    tail_busy = run("tail -n 2 train.log", "$ tail -n 2 train.log\nepoch 1 loss 0.52\n\n[finished, exit code 0]")
    assert drops(traj(launch, tail_done, ev()), "improper_eval") == {}
    d = drops(traj(launch, tail_busy, ev()), "improper_eval")
    assert list(d) == [2] and "was not seen finished" in d[2]
    gen = bg("python gen.py --output output/answers.jsonl", "gen")
    listing = st("list_files", {"path": "output"}, "output/\n  answers.jsonl (12 KB)")
    assert drops(traj(gen, listing, ev()), "improper_eval") == {}
    assert list(drops(traj(gen, ev()), "improper_eval")) == [1]


# --------------------------------------------------------------------- performance regression
def test_regression_only_from_a_high_best_score():
    edit = lambda c: st("edit_file", {"path": "config.json", "start_line": 1, "end_line": 1, "content": c}, "Edited")
    steps = [st("open_file", {"path": "config.json"}, "[config.json]"), edit("a"), ev(), edit("b"), ev(), edit("c"), ev()]
    high = [EvalRecord(step=2, score=80), EvalRecord(step=4, score=40), EvalRecord(step=6, score=85)]
    low = [EvalRecord(step=2, score=10), EvalRecord(step=4, score=5), EvalRecord(step=6, score=30)]
    d = drops(traj(*steps, evals=high), "performance_regression")
    assert list(d) == [3] and "best so far 80" in d[3]
    assert drops(traj(*steps, evals=low), "performance_regression") == {}  # exploring from a low score is fine


# ---------------------------------------------------------------------------- ignore script
def test_ignore_script_by_what_the_agent_runs():
    desc = DESC.replace("scripts/build.py: builds the training set.", "scripts/build.py: builds the answers file.")
    naive = run("mkdir -p output && cp data/train.jsonl output/answers.jsonl")
    own = st("create_file", {"path": "my_build.py", "content": "open('output/answers.jsonl', 'w')"}, "Created my_build.py")
    run_own = run("python my_build.py --output output/answers.jsonl")
    use = run("python scripts/build.py --output output/answers.jsonl")
    # the description does not name output/answers.jsonl on the script's line: still caught
    d = drops(traj(naive, own, run_own, desc=desc), "ignore_script")
    # my_build.py is its own version of build.py by name (issue 33): the file and its run
    assert sorted(d) == [0, 1, 2] and "by hand" in d[0] and "own version of the provided scripts/build.py" in d[1]
    assert "my_build.py" in d[2]
    assert drops(traj(use, naive, desc=desc), "ignore_script") == {}  # it ran the provided script first
    failed = run("python scripts/build.py --output output/answers.jsonl", code=1)
    assert list(drops(traj(failed, naive, desc=desc), "ignore_script")) == [1]  # a failed run is no use


# ---------------------------------------------------------------------- inefficient inference
def test_inference_by_what_runs_and_not_installed_means_unavailable():
    hf = run("python gen.py --backend hf --output output/answers.jsonl")
    assert drops(traj(hf), "inefficient_inference") == {}  # "vLLM is not installed" in the description
    ok = DESC.replace("vLLM is not installed.", "vLLM 0.6.3 is installed.")
    assert list(drops(traj(hf, desc=ok), "inefficient_inference")) == [0]
    missing = run("python -c 'import vllm'", "$ python -c 'import vllm'\nModuleNotFoundError: No module named 'vllm'\n\n"
                  "[finished, exit code 1]", 1)
    assert drops(traj(missing, hf, desc=DESC.replace("vLLM is not installed.", "vLLM")), "inefficient_inference") == {}


# -------------------------------------------------------------------- violate instruction
def test_violate_instruction_rule_pass_with_the_judge_off():
    g = "Open scripts/filter.py and use it with --min-quality 0.45 instead of writing your own filter."
    assert [(d.kind, d.target, d.values) for d in extract(g)] == [
        ("use_script", "scripts/filter.py", {"--min-quality": "0.45"})]
    assert [d.kind for d in extract("Do not change scripts/train.py, only config.json.")] == ["forbid_write"]
    assert [d.kind for d in extract("You evaluated twice without changing anything; call finish when you are done.")] \
        == ["forbid_eval"]
    assert [(d.kind, d.values) for d in extract("In reward.py set TRAP_REWARD = -1.0, STEP_REWARD = -0.02 and "
                                                 "SHAPING_WEIGHT = 0.3; the sparse goal reward learns too little.")] \
        == [("set", {"TRAP_REWARD": "-1.0", "STEP_REWARD": "-0.02", "SHAPING_WEIGHT": "0.3"})]
    assert extract("Looks good so far, keep going.") == []
    filt = "python scripts/filter.py --input data/c.jsonl --output output/f.jsonl --min-quality {}"
    t = traj(st("list_files", {"path": "."}, "scripts/"),
             st("open_file", {"path": "scripts/filter.py"}, "[scripts/filter.py]", guidance=[g]),
             run("head -n 300 data/c.jsonl > output/f.jsonl"), run(filt.format("0.3")), run(filt.format("0.45")),
             st("edit_file", {"path": "scripts/train.py", "start_line": 1, "end_line": 1, "content": "x"}, "Edited",
                guidance=["Do not change scripts/train.py."]),
             ev(), st("eval", {}, "Evaluation 2/3: overall_score=10",
                      guidance=["You evaluated twice without changing anything; call finish when you are done."]))
    d = drops(t, "violate_instruction")
    assert sorted(d) == [2, 3, 5, 7], d
    assert "without scripts/filter.py" in d[2] and "another --min-quality than the 0.45" in d[3]
    assert "changed scripts/train.py although told not to" in d[5] and "told to stop" in d[7]
    masker = Masker(MaskConfig(), load_tasks=False)  # judge off (the default): the rule still decides
    found = masker.analyze([t])[0]
    assert [i for i, fs in enumerate(found) if any(f.category == "violate_instruction" and not f.keep for f in fs)] \
        == [2, 3, 5, 7]
    assert all(not masker.decide(found[i]).keep for i in (2, 3, 5, 7))


def test_violate_instruction_omissions_run_another_script_first_or_finish_without_the_value():
    """From blind-set dev trajectories (da-train-01-s0 step 7, ld-train-02-s0 step 8): told to run a script,
    the agent runs another one first; told to set a value, it finishes with the old one in the file."""
    g_run = "Run scripts/build.py with --ratio 1.0 to add synthetic records of the rare class."
    t = traj(st("open_file", {"path": "scripts/build.py"}, "[scripts/build.py]"), ev(),
             run("python scripts/train.py --data output/aug.jsonl", code=1, guidance=[g_run]),
             run("python scripts/train.py --data data/train.jsonl"),  # only the first omission counts
             run("python scripts/build.py --ratio 1.0"))
    d = drops(t, "violate_instruction")
    assert sorted(d) == [2] and "ran scripts/train.py before scripts/build.py" in d[2], d
    # already carried out (with the asked values) before the message: nothing to omit
    t = traj(run("python scripts/build.py --ratio 1.0"), ev(),
             run("python scripts/train.py --data output/aug.jsonl", guidance=[g_run]))
    assert drops(t, "violate_instruction") == {}
    # run before with another value: the directive still stands
    t = traj(run("python scripts/build.py --ratio 0.5"), ev(),
             run("python scripts/train.py --data output/aug.jsonl", guidance=[g_run]))
    assert sorted(drops(t, "violate_instruction")) == [2]

    g_set = 'Then set "delta" to 1.5 in config.json; mse is hurt by the outliers.'
    cfg = '[config.json: lines 1-4 of 4]\n1: {\n2:   "loss": "huber",\n3:   "delta": VALUE,\n4: }'
    t = traj(st("open_file", {"path": "scripts/train.py"}, "[scripts/train.py]"),
             st("sleep", {"seconds": 7}, "slept", guidance=[g_set]),
             st("open_file", {"path": "config.json"}, cfg.replace("VALUE", "0.5")), ev(), st("finish", {}, "done"))
    d = drops(t, "violate_instruction")
    assert sorted(d) == [4] and "finished with delta = 0.5 in config.json, not 1.5" in d[4], d
    # the file already holds the value, or the agent wrote it: finishing is fine
    for fix in (st("open_file", {"path": "config.json"}, cfg.replace("VALUE", "1.5")),
                st("edit_file", {"path": "config.json", "start_line": 3, "end_line": 3, "content": '  "delta": 1.5,'},
                   "Edited")):
        t = traj(st("sleep", {"seconds": 1}, "slept", guidance=[g_set]),
                 st("open_file", {"path": "config.json"}, cfg.replace("VALUE", "0.5")), fix, st("finish", {}, "done"))
        assert drops(t, "violate_instruction") == {}
    # "if delta:" followed by a numbered line is no value (a false positive on the rule cases before)
    code = "[r.py]\n1: delta = 1.5\n2: if delta:\n3:     pass"
    t = traj(st("sleep", {"seconds": 1}, "slept", guidance=["Set delta to 1.5 in r.py."]),
             st("open_file", {"path": "r.py"}, code), st("finish", {}, "done"))
    assert drops(t, "violate_instruction") == {}



def test_violate_instruction_lists_of_paths_default_values_and_eval_preconditions():
    """From the fifth research set (all of it a dev set once its test split was reported): "do not touch A or B"
    names both; "keep --F at the default N"; "run S before each eval" holds at every eval, "before another eval"
    at the next one only; a bare file name matches the file under a folder."""
    assert [(d.kind, d.target) for d in extract("Do NOT touch grpo_train.sh or configs/grpo.yaml. Keep going.")] == [
        ("forbid_write", "grpo_train.sh"), ("forbid_write", "configs/grpo.yaml")]
    assert [d.target for d in extract("don't edit a.py, b.py and c/d.yaml")] == ["a.py", "b.py", "c/d.yaml"]
    assert [(d.kind, d.target, d.values) for d in extract("keep --per_db at the default 48, dont raise it")] == [
        ("keep", "per_db", {"v": "48,"})]
    each = "please run rep_dev.py before each eval and paste the numbers"
    nxt = "before you spend another eval, run sql_dev.py on the checkpoint"
    assert [(d.kind, d.values["scope"]) for d in extract(each)] == [("eval_needs_check", "each")]
    assert [(d.kind, d.values["scope"]) for d in extract(nxt)] == [("eval_needs_check", "next")]
    dev = run("python scripts/rep_dev.py --ckpt outputs/ckpt")
    # a retrain launched before an eval and finished after it, then an eval without rep_dev: a breach
    t = traj(st("sleep", {"seconds": 1}, "slept", guidance=[each]), dev, ev(), bg("python scripts/train.py", "train"),
             ev(), st("sleep", {"seconds": 1800}, "slept"), ev(), dev, ev())
    d = drops(t, "violate_instruction")
    assert sorted(d) == [4, 6] and "without running rep_dev.py since the eval at step 4" in d[6], d
    # "another eval": the next eval needs the run, later ones do not
    t = traj(st("sleep", {"seconds": 1}, "slept", guidance=[nxt]), ev(), run("python scripts/sql_dev.py"), ev())
    assert sorted(drops(t, "violate_instruction")) == [1]
    t = traj(st("sleep", {"seconds": 1}, "slept", guidance=[nxt]), run("python scripts/sql_dev.py"), ev(), ev())
    assert drops(t, "violate_instruction") == {}
    # "cap the data at 120k solutions": a script the agent writes that keeps 150,000 rows, and its run, break it;
    # a cap at the bound does not
    cap = "cap the data at 120k solutions (not 150k) please"
    assert [(d.kind, d.target, d.values) for d in extract(cap)][0] == ("count", "solutions", {"op": "le", "v": "120k"})
    merge = "cat a.jsonl b.jsonl | shuf | head -n {} > outputs/mix.jsonl\nwc -l outputs/mix.jsonl\n"
    train = bg("python scripts/train.py --data outputs/mix.jsonl", "train")
    for n, tail, want in ((150000, [train], [1, 2]), (120000, [train], []), (150000, [], [])):
        t = traj(st("sleep", {"seconds": 1}, "slept", guidance=[cap]),
                 st("create_file", {"path": "outputs/merge.sh", "content": merge.format(n)}, "Created outputs/merge.sh"),
                 run("bash outputs/merge.sh"), *tail)  # (no training on it: an intermediate file, no breach)
        assert sorted(drops(t, "violate_instruction")) == want, (n, tail)
    # "serve with TP=4": `serve.sh [TP]` run with 2 sets its positional TP to 2; with 4 it keeps it
    srv_desc = DESC + "scripts/serve.sh (`bash scripts/serve.sh [TP]`): starts the vLLM server, TP 4 by default.\n"
    for arg, want in (("2", [1]), ("4", []), ("", [])):
        t = traj(st("sleep", {"seconds": 1}, "slept", guidance=["serve with TP=4, the 32B does not fit on 2"]),
                 bg(f"bash scripts/serve.sh {arg}".strip(), "srv"), desc=srv_desc)
        assert sorted(drops(t, "violate_instruction")) == want, arg
    # "do NOT write anything into configs/ except the reward: block": an edit inside the block is allowed, one
    # outside it (or of another file under configs/) is not
    g = "do NOT write anything into configs/ except the reward: block."
    yaml = "[configs/grpo.yaml: lines 1-6 of 6]\n1: steps: 300\n2: max_new_tokens: 2048\n3: reward:\n4:   partial_credit: true\n" \
           "5:   tle_penalty: 0.0\n6: seed: 1"
    def edit(lo, hi, text, path="configs/grpo.yaml"):
        return st("edit_file", {"path": path, "start_line": lo, "end_line": hi, "content": text}, f"Edited {path}")
    for e, want in ((edit(5, 5, "  tle_penalty: 0.2"), []), (edit(2, 2, "max_new_tokens: 3072"), [2]),
                    (edit(1, 1, "lr: 1e-6", "configs/other.yaml"), [2])):
        t = traj(st("open_file", {"path": "configs/grpo.yaml"}, yaml, guidance=[g]), st("sleep", {"seconds": 1}, "slept"), e)
        assert sorted(drops(t, "violate_instruction")) == want, e.action.arguments
    # "leave prm.yaml alone": the edit of configs/prm.yaml breaks it; an edit of another file does not
    g = "cap the data at 120k and leave prm.yaml alone otherwise. Do not change prm.yaml."
    t = traj(st("sleep", {"seconds": 1}, "slept", guidance=[g]),
             st("edit_file", {"path": "configs/other.yaml", "start_line": 1, "end_line": 1, "content": "a: 1"}, "Edited"),
             st("edit_file", {"path": "configs/prm.yaml", "start_line": 3, "end_line": 3, "content": "epochs: 2"}, "Edited"))
    assert sorted(drops(t, "violate_instruction")) == [2]



def test_directives_on_gpu_counts_eval_and_training_preconditions_and_bare_flag_names():
    """From the sixth research set's dev split: "use all four GPUs for training runs", "eval only after
    macro_dev.py has written …" / "no eval until support_dev shows …", "dont spend evals on a model that isnt
    finished training", "run probe_reward.py after every reward change, before any training", "pls use
    resolved_only" (a provided script's flag without its dashes)."""
    desc = DESC.replace("8 A100 GPUs", "4 A100 GPUs") + (
        "scripts/macro_dev.py --ckpt DIR: macro F1 on dev, writes thresholds.json.\n"
        "scripts/probe_reward.py: scores stored rewrites with the current reward.\n"
        "scripts/select.py --n N --out FILE [--resolved_only]: selects conversations.\n")
    g = lambda text: st("sleep", {"seconds": 1}, "slept", guidance=[text])  # noqa: E731
    two = bg("torchrun --nproc_per_node 2 scripts/train.py --config c.json", "train")
    four = bg("torchrun --nproc_per_node 4 scripts/train.py --config c.json", "train")
    gpus = "Also please use all four GPUs for training runs."
    assert list(drops(traj(g(gpus), two, desc=desc), "violate_instruction")) == [1]
    assert drops(traj(g(gpus), four, desc=desc), "violate_instruction") == {}
    dev = run("python scripts/macro_dev.py --ckpt outputs/ckpt")
    after = "eval only after macro_dev.py has written thresholds.json for that checkpoint!!"
    assert list(drops(traj(g(after), four, st("sleep", {"seconds": 1800}, "slept"), ev(), desc=desc),
                       "violate_instruction")) == [3]
    assert drops(traj(g(after), four, st("sleep", {"seconds": 1800}, "slept"), dev, ev(), desc=desc),
                 "violate_instruction") == {}
    unfinished = "dont spend evals on a model that isnt finished training"
    probe_job = bg("python scripts/probe_reward.py", "probe")
    assert list(drops(traj(g(unfinished), four, ev(), desc=desc), "violate_instruction")) == [2]
    assert drops(traj(g(unfinished), probe_job, ev(), desc=desc), "violate_instruction") == {}  # not a training job
    pre = "Run probe_reward.py after every reward change, before any training."
    edit = st("edit_file", {"path": "src/reward.py", "start_line": 3, "end_line": 3, "content": "W = 0.5"}, "Edited")
    probe = run("python scripts/probe_reward.py --n 2000")
    assert list(drops(traj(g(pre), edit, four, desc=desc), "violate_instruction")) == [2]
    assert drops(traj(g(pre), edit, probe, four, desc=desc), "violate_instruction") == {}
    sel = "python scripts/select.py --n 80000 --out outputs/keep.txt"
    assert list(drops(traj(g("also pls use resolved_only"), run(sel), desc=desc), "violate_instruction")) == [1]
    assert drops(traj(g("also pls use resolved_only"), run(sel + " --resolved_only"), desc=desc), "violate_instruction") == {}


# --------------------------------------------------------------------------- symbolic rules
def test_a_redirected_job_fails_at_its_launch_and_the_tail_is_kept():
    launch = bg("python scripts/train.py --config c.json > train.log 2>&1", "default")
    tail = run("tail -n 5 train.log", "$ tail -n 5 train.log\nTraceback (most recent call last):\n  File \"train.py\"\n"
                                      "KeyError: 'lr'\n\n[finished, exit code 0]")
    fg = run("python scripts/train.py > out.log 2>&1", code=1)
    cat = run("cat out.log", "$ cat out.log\nTraceback (most recent call last):\nValueError: bad\n\n[finished, exit code 0]")
    masked = Masker(MaskConfig(), load_tasks=False).mask([traj(launch, tail, fg, cat)])[0][0]
    m = [s.mask for s in masked.steps]
    assert not m[0].keep and m[0].category == "runtime_error" and "seen at step 1" in m[0].reason
    assert m[1].keep and m[3].keep
    assert not m[2].keep and m[2].category == "runtime_error"
    missing = run("tail train.log", "$ tail train.log\ntail: cannot open 'train.log': No such file or directory\n\n"
                  "[finished, exit code 1]", 1)
    m = [s.mask for s in Masker(MaskConfig(), load_tasks=False).mask([traj(missing)])[0][0].steps]
    assert not m[0].keep and m[0].category == "explicit_failure"  # no job log: the read itself failed


def test_a_distributed_oom_fails_the_launch_that_started_it():
    """From the fifth research set: the crash of a rank ("[rank2]: torch.OutOfMemoryError: CUDA out of memory"),
    or a module-qualified exception, in a later read of the session, is a runtime_error of the launch."""
    launch = bg("torchrun --nproc_per_node 8 scripts/train.py --config c.json", "train")
    for text in ("[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 31.25 GiB.\n",
                 "torch.multiprocessing.spawn.ProcessExitedException: process 3 terminated with exit code 1\n"):
        read = st("get_session_output", {"session_id": "train"}, f"$ torchrun …\n{text}[session 'train': finished, exit code 1]")
        m = [x.mask for x in Masker(MaskConfig(), load_tasks=False).mask([traj(launch, read)])[0][0].steps]
        assert not m[0].keep and m[0].category == "runtime_error" and m[1].keep, text
    ok = st("get_session_output", {"session_id": "train"}, "$ torchrun …\nstep 100 loss=1.2 (no OutOfMemoryError seen)\n"
            "[session 'train': finished, exit code 0]")
    assert all(x.mask.keep for x in Masker(MaskConfig(), load_tasks=False).mask([traj(launch, ok)])[0][0].steps)

def test_nvcc_failure_is_a_compile_error():
    nvcc = run("nvcc -o kern kern.cu", "$ nvcc -o kern kern.cu\nkern.cu(12): error: identifier \"blockDimx\" is undefined\n"
               "1 error detected in the compilation of \"kern.cu\".\n\n[finished, exit code 2]", 2)
    arch = run("nvcc -arch=sm_90 k.cu", "$ nvcc -arch=sm_90 k.cu\nnvcc fatal   : Unsupported gpu architecture 'compute_90'\n\n"
               "[finished, exit code 1]", 1)
    ext = run("python setup.py build_ext", "$ python setup.py build_ext\nTraceback (most recent call last):\n"
              "RuntimeError: Error building extension 'fused'\n\n[finished, exit code 1]", 1)
    m = [s.mask for s in Masker(MaskConfig(), load_tasks=False).mask([traj(nvcc, arch, ext)])[0][0].steps]
    assert [(d.keep, d.category) for d in m] == [(False, "compile_error")] * 3
