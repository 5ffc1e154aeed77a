"""Symbolic rules and the eight detectors: unit cases and the rule regression cases (tests/fixtures/rule_cases*)."""

from __future__ import annotations

import json
import re

import pytest

from apollo.agent.actions import format_action, parse_action
from apollo.agent.prompt import initial_messages
from apollo.schema import EvalRecord, MaskDecision, Observation, Step, Trajectory
from apollo.supervision.detectors import (
    CATEGORIES,
    DETECTORS,
    DetectorParams,
    Facts,
    Finding,
    TaskInfo,
    get_detectors,
    run_detectors,
)
from apollo.supervision.labeled import (
    LabeledSetError,
    evaluate_labeled,
    load_labeled,
    rule_decidable,
)
from apollo.supervision.masker import Masker, MaskConfig, combine
from apollo.supervision.symbolic import (
    RuleSet,
    RulesError,
    _start_anchored,
    background_failures,
    load_rules,
    match_rule,
)

FIXTURES = "tests/fixtures/rule_cases.jsonl"
DESC = """# Filter a corpus
## Task
Filter data/corpus.jsonl and write the kept records to output/filtered.jsonl.
## Environment
Python 3 with numpy.
## Scripts
scripts/filter.py --input IN --output OUT --min-quality Q
scripts/train.py --data FILE: trains the classifier, prints valid accuracy.
"""


def st(i, tool, args=None, obs="ok", exit_code=0, refused=False, error=False, text=None, wall=0.0):
    text = text if text is not None else format_action(f"thought {i}", tool, args or {})
    return Step(index=i, assistant_text=text, action=parse_action(text), wall_time_s=wall,
                observation=Observation(text=obs, exit_code=exit_code, refused=refused, error=error))


def traj(*steps, evals=(), desc=DESC, domain="data_filtering", task_id="df-x"):
    steps = [s.model_copy(update={"index": i}) for i, s in enumerate(steps)]
    return Trajectory(trajectory_id="t", task_id=task_id, split="train", domain=domain, policy_id="p",
                      prefix_messages=initial_messages(desc), steps=steps, evals=list(evals))


def drops(t, name, task=None, params=None):
    return {f.step: f.reason for f in run_detectors(t, get_detectors([name]), task, params)}


def run(cmd, obs=None, code=0, **kw):
    args = {"command": cmd, **kw}
    return st(0, "run_command", args, obs if obs is not None else f"$ {cmd}\n\n[finished, exit code {code}]", code)


BG = "Started in background session 'train': python scripts/train.py\nUse check_session_idle('train') later."


# ------------------------------------------------------------------------------------ labeled set
@pytest.fixture(scope="module")
def labeled():
    return load_labeled(FIXTURES)


@pytest.fixture(scope="module")
def report(labeled):
    return evaluate_labeled(Masker(MaskConfig()), *labeled)


def test_labeled_set_covers_every_category_and_rule(labeled):
    labels, trajs = labeled
    assert len(labels) >= 40 and len(trajs) >= 10
    cats = {c for lab in labels for c in lab.categories}
    assert set(CATEGORIES) <= cats, f"categories without a labeled example: {set(CATEGORIES) - cats}"
    rules = {lab.rule for lab in labels if lab.rule}
    missing = {r.id for r in load_rules()} - rules
    assert not missing, f"symbolic rules without a labeled example: {missing}"
    assert sum(lab.keep for lab in labels) >= 40  # hard negatives: the same trajectories' good actions
    assert any(t.meta.get("mistakes") for t in trajs.values())  # scripted-agent episodes are in it


def test_rule_cases_meet_their_specification(report):
    """The rule regression cases state each rule's specification: every rule-decided category is met."""
    table = report.table()
    for s in rule_decidable(report):
        assert s.support > 0, f"{s.name}: no labeled positive\n{table}"
        assert s.precision is not None and s.precision >= 0.9, f"{s.name}: precision {s.precision}\n{table}"
        if s.name != "violate_instruction":
            assert s.recall >= 0.9, f"{s.name}: recall {s.recall}\n{table}"
    assert report.decision.precision >= 0.9
    vi = next(s for s in report.categories if s.name == "violate_instruction")
    # the rule pass finds the explicit directives ("use --backend vllm" then an own HF script: its creation carries
    # inefficient_inference, its failing run runtime_error)
    assert vi.mode == "rule" and vi.fp == 0 and vi.tp >= 3 and vi.examples["fn"] == []
    m = report.metrics()
    assert m["mask.labeled.category.blind_edit.precision"] >= 0.9 and "mask.labeled.rule.tool_error.recall" in m
    lo, hi = report.decision.recall_ci
    assert m["mask.labeled.decision.recall_lo95"] == lo and lo < report.decision.recall <= hi


def test_labeled_set_loader_names_bad_rows(tmp_path, labeled):
    src = [json.loads(x) for x in open(FIXTURES)]
    (tmp_path / "l_trajectories.jsonl").write_text(open("tests/fixtures/rule_cases_trajectories.jsonl").read())
    for bad, msg in [({**src[0], "step": 999}, "is not a step"), ({**src[0], "trajectory_id": "nope"}, "not in"),
                     ({**src[0], "keep": False, "categories": []}, "needs categories")]:
        (tmp_path / "l.jsonl").write_text(json.dumps(src[1]) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(LabeledSetError, match=rf"l.jsonl:2: .*{msg}"):
            load_labeled(tmp_path / "l.jsonl")


# ----------------------------------------------------------------------------------------- symbolic
def test_prefilters_decide_like_the_plain_rule_loop(labeled):
    """The compiled RuleSet (prefilters, per-tool plans) = the first rule in file order, checked naively."""
    rules = load_rules()
    rs = RuleSet(rules)
    n = 0
    for t in labeled[1].values():
        for s in t.steps:
            naive = next(((r.id, ev) for r in rules if r.applies(s.action.tool, t.task_id, t.domain, s.observation.error)
                          and (ev := match_rule(s, r)) is not None), None)
            hit = rs.first_match(s, t.task_id, t.domain)
            assert (hit[0].id, hit[1]) == naive if hit else naive is None
            n += 1
    assert n > 100


def test_rule_scopes_and_file_errors(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("rules:\n  - id: oom\n    category: explicit_failure\n    when: pattern\n    pattern: 'CUDA out of memory'\n"
                 "    tools: [run_command]\n    tasks: ['ld-*']\n    domains: [loss_design]\n")
    rs = RuleSet.load(p)
    oom = run("python train.py", "$ python train.py\nRuntimeError: CUDA out of memory\n\n[finished, exit code 1]", 1)
    assert rs.first_match(oom, "ld-train-01", "loss_design")[0].id == "oom"
    assert rs.first_match(oom, "df-train-01", "loss_design") is None  # task glob
    assert rs.first_match(oom, "ld-train-01", "data_filtering") is None  # domain
    viewed = st(0, "open_file", {"path": "log.txt"}, "[log.txt]\n1: CUDA out of memory")
    assert rs.first_match(viewed, "ld-train-01", "loss_design") is None  # tool: file content is no failure
    for body, msg in [("  - id: x\n    category: c\n    when: refused\n    toolz: [a]\n", "unknown field"),
                      ("  - id: x\n    category: c\n    when: refused\n  - id: x\n    category: c\n    when: refused\n",
                       "duplicate rule id"),
                      ("  - id: x\n    category: c\n    when: refused\n    tools: 3\n", "field 'tools'")]:
        p.write_text("rules:\n" + body)
        with pytest.raises(RulesError, match=msg):
            load_rules(p)
    assert _start_anchored(r"\AError: ") and _start_anchored(r"(?i)\A(a|b)") and not _start_anchored(r"\Aa|b")


def test_default_rules_tool_errors_and_content_views():
    rs = RuleSet.load()
    cases = [
        (st(0, "run_command", {}, "Error: run_command needs argument 'command' (string). Usage: ...", error=True),
         "invalid_tool_call"),
        (st(0, "open_file", {"path": "x.py"}, "Error: x.py is not a file.", error=True), "tool_error"),
        (st(0, "eval", {}, "Refused: eval budget exhausted (3/3 used).", refused=True), "refused_tool_call"),  # refused_action
        (run("python f.py --min-quality 45", "$ python f.py\nkept 0 of 440 records -> output/f.jsonl\n\n[finished, exit code 0]"),
         "empty_output"),
        (run("cat x", "$ cat x\ncat: x: Permission denied\n\n[finished, exit code 1]", 1), "explicit_failure"),
    ]
    for step, rid in cases:
        hit = rs.first_match(step, "df-train-01", "data_filtering")
        assert hit is not None and hit[0].id == rid, (step.observation.text, hit)
    src = st(0, "open_file", {"path": "s.py"}, "[s.py]\n1: raise ValueError('unknown tool')\n2: # Traceback (most recent call last)")
    assert rs.first_match(src) is None
    empty_elsewhere = run("python f.py", "$ python f.py\nkept 0 of 440 records\n\n[finished, exit code 0]")
    assert rs.first_match(empty_elsewhere, "ld-train-01", "loss_design") is None  # domain-scoped rule


def test_background_job_failure_is_charged_to_its_start():
    t = traj(
        st(0, "run_command", {"command": "python scripts/train.py --config c.json", "session_id": "train",
                              "wait_for_completion": False}, BG),
        st(1, "sleep", {"seconds": 3}, "Slept 3 s."),
        st(2, "get_session_output", {"session_id": "train"},
           "$ python scripts/train.py --config c.json\nTraceback (most recent call last):\nFileNotFoundError: c.json\n"
           "\n[session 'train': finished, exit code 1]", exit_code=1),
    )
    hits = background_failures(t, RuleSet.load())
    assert [(start, r.id, seen) for start, r, _, seen in hits] == [(0, "runtime_error", 2)]
    masked, _ = Masker(MaskConfig(), load_tasks=False).mask([t])
    m = [s.mask for s in masked[0].steps]
    assert not m[0].keep and m[0].source == "symbolic" and "seen at step 2" in m[0].reason
    assert m[2].keep  # reading the log is a good action


# ---------------------------------------------------------------------------------------- detectors
def test_registry_selects_by_name():
    assert list(DETECTORS) == list(CATEGORIES)
    assert [d.name for d in get_detectors(["blind_edit", "improper_eval"])] == ["blind_edit", "improper_eval"]
    with pytest.raises(ValueError, match="unknown detector 'nope'"):
        get_detectors(["nope"])
    assert DETECTORS["violate_instruction"].detect is not None and DETECTORS["violate_instruction"].judge_always
    with pytest.raises(ValueError, match="unknown key"):
        MaskConfig.from_params({"detector_params": {"nope": 1}})
    only = Masker(MaskConfig.from_params({"detectors": ["blind_edit"]}), load_tasks=False)
    t = traj(st(0, "edit_file", {"path": "a.py", "start_line": 1, "end_line": 1, "content": "x"}, "Edited a.py"),
             st(1, "sleep", {"seconds": 5}, "Slept 5 s."))
    ms = [s.mask for s in only.mask([t])[0][0].steps]
    assert ms[0].category == "blind_edit" and ms[1].keep  # resource_waste not selected


def test_blind_edit():
    e = lambda i, p: st(i, "edit_file", {"path": p, "start_line": 1, "end_line": 1, "content": "x"}, f"Edited {p} lines 1-1.")
    t = traj(e(0, "config.json"), st(1, "open_file", {"path": "./config.json"}, "[config.json]\n1: {}"), e(2, "config.json"),
             st(3, "create_file", {"path": "train.py", "content": "x"}, "Overwrote train.py (1 characters)."),
             st(4, "create_file", {"path": "new.py", "content": "x"}, "Created new.py (1 characters)."), e(5, "new.py"),
             run("sed -i 's/a/b/' reward.py"), run("cat reward.py", "$ cat reward.py\nA = 1\n\n[finished, exit code 0]"),
             run("sed -i 's/a/b/' reward.py"),
             st(9, "edit_file", {"path": "gone.py", "start_line": 1, "end_line": 1, "content": "x"},
                "Error: gone.py is not a file; use create_file.", error=True))
    d = drops(t, "blind_edit")
    assert sorted(d) == [0, 3, 6], d  # an edit that failed is the tool error's business


def test_improper_eval():
    ev = lambda i: st(i, "eval", {}, "Evaluation: overall_score=10")
    t = traj(ev(0), run("python scripts/filter.py --input a --output output/filtered.jsonl"), ev(2), ev(3),
             st(4, "run_command", {"command": "python scripts/train.py", "session_id": "train", "wait_for_completion": False}, BG),
             ev(5), st(6, "check_session_idle", {"session_id": "train"}, "Session 'train' is idle (last command finished, exit code 0)."),
             ev(7), st(8, "create_file", {"path": "notes.md", "content": "x"}, "Created notes.md"), ev(9))
    d = drops(t, "improper_eval", TaskInfo(max_evals=10))
    assert sorted(d) == [3, 5, 9], d  # 0: a first eval of the untouched workspace is kept by default
    assert "nothing changed since the eval at step 2" in d[3]
    assert "was not seen finished" in d[5]  # and step 7 is fine: the job finished after the eval at 5
    strict = DetectorParams(flag_eval_before_change=True)
    assert "before changing anything" in drops(t, "improper_eval", TaskInfo(max_evals=10), strict)[0]
    assert sorted(drops(t, "improper_eval", TaskInfo(max_evals=2))) == [3, 5, 7, 9]  # 7: over budget
    missing = st(0, "eval", {}, "Evaluation 1/3: overall_score=0\nrmse=None\noutput/model.json not found: has training finished?")
    assert "before the output existed (output/model.json not found)" in drops(traj(missing), "improper_eval")[0]


def test_performance_regression():
    ev = lambda i: st(i, "eval", {}, "Evaluation")
    w = lambda i, c: st(i, "edit_file", {"path": "config.json", "start_line": 1, "end_line": 1, "content": c}, "Edited")
    steps = [st(0, "open_file", {"path": "config.json"}, "[config.json]"), w(1, "a"), ev(2), w(3, "b"),
             run("python scripts/train.py --data x"), ev(5), w(6, "a"), ev(7), w(8, "c"), st(9, "finish", {}, "Finished.")]
    evals = [EvalRecord(step=2, score=80), EvalRecord(step=5, score=40), EvalRecord(step=7, score=80),
             EvalRecord(step=9, score=60, forced=True)]
    d = drops(traj(*steps, evals=evals), "performance_regression")
    assert sorted(d) == [3, 8], d  # 4 only measures (train.py prints); 6 restores the score
    assert "scored 40" in d[3] and "the final eval scored 60" in d[8]
    evals[1] = EvalRecord(step=5, score=79.5)  # within min_drop: noise, not a regression
    assert sorted(drops(traj(*steps, evals=evals), "performance_regression")) == [8]


def test_resource_waste_is_compute_use_not_waiting():
    t = traj(run("python scripts/train.py --data a"), run("python scripts/train.py --data a"),
             st(2, "sleep", {"seconds": 5}, "Slept 5 s."),
             st(3, "run_command", {"command": "python scripts/train.py --config c", "session_id": "train",
                                   "wait_for_completion": False}, BG),
             st(4, "check_session_idle", {"session_id": "train"}, "Session 'train' is busy: 'x' has run for 1 s."),
             st(5, "check_session_idle", {"session_id": "train"}, "Session 'train' is busy: 'x' has run for 1 s."),
             st(6, "sleep", {"seconds": 5}, "Slept 5 s."),
             st(7, "check_session_idle", {"session_id": "train"}, "Session 'train' is idle (last command finished, exit code 0)."),
             run("python scripts/train.py --config c"), st(9, "sleep", {"seconds": 5}, "Slept 5 s."),
             st(10, "run_command", {"command": "python long.py"}, "$ python long.py\n...", wall=7.0),
             st(11, "run_command", {"command": "python long2.py"},
                "$ python long2.py\n[still running in background session 'default' after 10 s; use ...]"),
             st(12, "run_command", {"command": "pip install -q numpy"}, "$ pip install -q numpy\n\n[finished, exit code 0]",
                wall=6.0),
             run("ls output"), run("ls output"))
    d = drops(t, "resource_waste")
    assert sorted(d) == [1, 5, 8], d  # waiting (2, 9), foreground blocking (10-12) and cheap re-runs (14) are kept
    assert "re-ran the finished job" in d[1] and "busy polling" in d[5] and "(step 3)" in d[8]
    # idle sleeps count from idle_sleep_min_s (600 s): the 5 s ones are waiting; with a 1 s floor, 2 and 9 (no job
    # running) are waste, 6 (the background job still running) is not
    assert sorted(drops(t, "resource_waste", params=DetectorParams(idle_sleep_min_s=1))) == [1, 2, 5, 8, 9]
    assert sorted(drops(t, "resource_waste", params=DetectorParams(flag_reruns=False, flag_busy_polling=False,
                                                                   flag_idle_sleep=False))) == []
    long_idle = traj(st(0, "check_session_idle", {"session_id": "train"}, "Session 'train' is idle."),
                     st(1, "sleep", {"seconds": 1800}, "Slept 1800 s."))
    assert "slept 1800 s with no job left to wait for" in drops(long_idle, "resource_waste")[1]
    busy = traj(st(0, "run_command", {"command": "python scripts/train.py --config c", "session_id": "train",
                                      "wait_for_completion": False}, BG), st(1, "sleep", {"seconds": 1800}, "Slept 1800 s."))
    assert 1 not in drops(busy, "resource_waste")  # waiting for a running job


def test_inefficient_inference_by_what_runs():
    hf = run("python gen.py --backend hf --output output/x.jsonl")
    code = st(1, "create_file", {"path": "g.py", "content": "from transformers import AutoModelForCausalLM\nm.generate(x)"},
              "Created g.py")
    vl = run("python gen.py --backend vllm")
    echo = run("pip list | grep vllm", "$ pip list | grep vllm\n\n[finished, exit code 1]", 1)
    run_g = run("python g.py")
    assert drops(traj(hf, code, vl, echo, run_g), "inefficient_inference") == {}  # vllm only in the agent's own commands
    t = traj(hf, code, vl, run_g, desc=DESC.replace("numpy.", "numpy, transformers and vLLM."))
    d = drops(t, "inefficient_inference")
    assert sorted(d) == [0, 3], d  # writing g.py is not running it; running it is
    assert "runs g.py" in d[3]
    listed = run("pip list | grep -i vllm", "$ pip list | grep -i vllm\nvllm 0.6.3\n\n[finished, exit code 0]")
    assert sorted(drops(traj(listed, hf), "inefficient_inference")) == [1]


def test_ignore_script_from_the_description_and_the_reference_plan():
    naive = run("mkdir -p output && head -n 300 data/corpus.jsonl > output/filtered.jsonl")
    fake = st(1, "create_file", {"path": "output/filtered.jsonl", "content": "{}"}, "Created output/filtered.jsonl")
    ok = run("python scripts/filter.py --input data/corpus.jsonl --output output/filtered.jsonl --min-quality 0.4")
    scratch = run("head -n 5 data/corpus.jsonl > scratch.jsonl")
    assert sorted(drops(traj(naive, fake, ok, scratch), "ignore_script")) == [0, 1]
    assert drops(traj(ok, naive), "ignore_script") == {}  # the script was used: later manual work is not "ignoring"
    plan = [{"id": "s3", "tool": "run_command", "arguments": {}, "key": True,
             "match": ["scripts/filter.py", "output/filtered.jsonl"], "avoid": ["output/filtered.jsonl"]}]
    other = run("cp data/corpus.jsonl output/filtered.jsonl")
    t = traj(other, desc="# Task\nFilter the corpus.")  # no usable description: only the plan knows
    assert drops(t, "ignore_script") == {}
    assert "without scripts/filter.py" in drops(t, "ignore_script", TaskInfo(plan=plan))[0]


def test_invalid_action():
    t = traj(st(0, "run_command", {"command": "  "}, "Refused: empty command.", refused=True),
             st(1, "open_file", {"path": "a", "mode": "r"}, "Error: open_file got unknown argument(s) ['mode']."),
             st(2, "bash", {"command": "ls"}, "Error: unknown tool 'bash'."),
             st(3, None, text="", obs="Invalid action: no <tool_call> block in the response.", error=True),
             st(4, None, text="Let me think.", obs="Invalid action: no <tool_call> block in the response."),
             st(5, "finish", {}, "Finished."))
    d = drops(t, "invalid_action")
    assert sorted(d) == [0, 1, 2, 3, 4], d
    assert "empty argument" in d[0] and "unknown argument" in d[1] and "unknown tool" in d[2] and d[3] == "empty response"


def test_detectors_survive_odd_input():
    weird = [st(0, "run_command", {"command": 5}, "?"), st(1, "edit_file", {"path": None}, "?"),
             st(2, "sleep", {"seconds": "x"}, "?"), st(3, "eval", {}, "?")]
    t = traj(*weird, evals=[EvalRecord(step=99, score=5), EvalRecord(step=3, score=1, forced=True)], desc="")
    f = Facts(t)
    for d in get_detectors():
        if d.detect is not None:
            assert isinstance(d.detect(t, f, DetectorParams()), list)


# ---------------------------------------------------------------------------------------- precedence
def test_precedence_symbolic_then_rule_then_llm():
    fs = [Finding(0, "blind_edit", "rule", False, "blind", "blind_edit"),
          Finding(0, "violate_instruction", "llm", False, "judge: no", "m"),
          Finding(0, "runtime_error", "symbolic", False, "Traceback", "runtime_error")]
    d = combine(fs)
    assert (d.keep, d.source, d.category) == (False, "symbolic", "runtime_error")
    assert "also: blind_edit (rule), violate_instruction (llm)" in d.reason
    order = {"resource_waste": 0, "blind_edit": 1}
    d = combine([Finding(0, "blind_edit", "rule", False, "b"), Finding(0, "resource_waste", "rule", False, "r")], order)
    assert d.category == "resource_waste"  # within a source: mask.detectors order
    flagged = Finding(0, "violate_instruction", "llm", True, "judge failed: timeout", "m", flagged=True)
    assert combine([flagged]) == MaskDecision(keep=True, source="llm", category="violate_instruction",
                                              reason="judge failed: timeout", flagged=True)
    d = combine([flagged, Finding(0, "blind_edit", "rule", False, "b")])
    assert not d.keep and d.flagged  # a drop stands; the failed judge call is still visible
    assert combine([]) == MaskDecision(keep=True, source="rule", reason="no symbolic rule or detector matched")
    assert combine([Finding(0, "violate_instruction", "llm", True, "judge: follows it", "m")]).source == "llm"
    # (spent test splits of sets 26, 27 and 30) a second copy of a running job that also breaks a directive: the labelers
    # named the copy; any other waste beside a breach still yields to the breach
    from apollo.supervision.detectors import DUPLICATE_JOB

    order = {"violate_instruction": 0, "resource_waste": 1}
    breach = Finding(0, "violate_instruction", "rule", False, "set min_agree = 1", "violate_instruction")
    dup = Finding(0, "resource_waste", "rule", False, "started a second guard.py", DUPLICATE_JOB)
    assert combine([breach, dup], order).category == "resource_waste"
    assert combine([breach, Finding(0, "resource_waste", "rule", False, "1 of 8 GPUs")], order).category == \
        "violate_instruction"


def test_mask_keeps_inputs_and_is_deterministic(labeled):
    trajs = list(labeled[1].values())
    m = Masker(MaskConfig())
    a, stats = m.mask(trajs)
    b, _ = m.mask(trajs)
    assert all(s.mask is None for t in trajs for s in t.steps)  # copies by default
    assert [s.mask for t in a for s in t.steps] == [s.mask for t in b for s in t.steps]
    assert all(re.fullmatch(r"mask\.[\w.]+", k) for k in stats)
    assert stats["mask.drop_rate"] == pytest.approx(sum(not s.mask.keep for t in a for s in t.steps) / stats["mask.steps"])


def test_every_json_parse_error_is_an_invalid_action_by_the_malformed_tool_call_rule():
    """apollo.agent.actions.JSON_ERRORS and the malformed_tool_call rule name the same failures; since issue 33
    (InnovatorBench's taxonomy) tool-call JSON that does not parse is an invalid action, not a compile error."""
    from apollo.agent.actions import JSON_ERRORS, is_json_error, parse_action
    from apollo.schema import Observation, Step
    from apollo.supervision.symbolic import RuleSet

    rules = RuleSet.load()
    bad_json = parse_action('<tool_call>\n{"name": "open_file", "arguments": {"path" "x"}}\n</tool_call>')
    bad_args = parse_action('<tool_call>\n{"name": "open_file", "arguments": "{path: x}"}\n</tool_call>')
    no_call = parse_action("I will look at the file.")
    for action, rule_id in [(bad_json, "malformed_tool_call"), (bad_args, "malformed_tool_call"), (no_call, "invalid_action")]:
        step = Step(index=0, assistant_text="x", action=action, observation=Observation(text="Invalid action: …"))
        rule, _ = rules.first_match(step)
        assert (rule.id, rule.category) == (rule_id, "invalid_action"), action.parse_error
        assert is_json_error(action.parse_error) == (rule_id == "malformed_tool_call")
    assert [bad_json.parse_error.startswith(JSON_ERRORS[0]), bad_args.parse_error.startswith(JSON_ERRORS[1])] == [True, True]


def test_a_rule_breach_or_serial_inference_names_a_step_before_its_symbolic_error():
    """A detector's violate_instruction / inefficient_inference is the category of a step that also raised a
    runtime error or was refused (the labelers name the breach); an LLM judge's finding does not outrank."""
    err = Finding(0, "runtime_error", "symbolic", False, "Traceback", "runtime_error")
    d = combine([err, Finding(0, "inefficient_inference", "rule", False, "one sample at a time")])
    assert (d.source, d.category) == ("rule", "inefficient_inference") and "also: runtime_error (symbolic)" in d.reason
    d = combine([Finding(0, "refused_action", "symbolic", False, "Refused: pkill"),
                 Finding(0, "violate_instruction", "rule", False, "told not to kill the server")])
    assert d.category == "violate_instruction"
    d = combine([err, Finding(0, "resource_waste", "rule", False, "idle GPUs")])
    assert d.category == "runtime_error"  # (other rule categories: the symbolic evidence first)
