"""Scripted agents (noisy) and the simulated annotator's deviation check, for every family.

The noise-free agent's runs (reference score, plan followed, no guidance) are in test_suite.py.
"""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest

from apollo.env import (
    MISTAKE_KINDS,
    ScriptedAgent,
    check_deviation,
    list_tasks,
    load_task,
    reference_plan,
)
from apollo.engines.scripted import run_scripted
from apollo.env.families import FAMILIES

TASKS = list_tasks()
BY_FAMILY = {f: [t for t in TASKS if t.family == f] for f in FAMILIES}
FAST = ("data_construction", "data_filtering", "data_augmentation", "scaffold_construction")
EDITS = ("loss_design", "reward_design", "scaffold_construction")  # plans that read then edit a file
PATIENT = ("loss_design", "reward_design")


def run_episode(task, seed: int = 0, *, noise: float = 0.0, annotate: bool = False) -> SimpleNamespace:
    """The scripted agent (an engine) in the one episode loop, viewed as (tool, arguments, thought) steps."""
    traj, engine = run_scripted(task, noise=noise, seed=seed, annotate=annotate)
    steps = [SimpleNamespace(tool=s.action.tool, arguments=s.action.arguments,
                             thought=s.assistant_text.split("<tool_call>")[0].strip()) for s in traj.steps]
    return SimpleNamespace(steps=steps, evals=traj.evals, final_score=traj.final_score,
                           mistakes=list(engine.agent.mistakes),
                           guidance=[g.text for s in traj.steps for g in s.guidance])


def _dry_run(agent: ScriptedAgent, limit: int = 40) -> list[tuple[str, dict, str]]:
    """Drive an agent without a workspace (its mistakes do not depend on the observations)."""
    history: list[tuple[str, dict, str]] = []
    for _ in range(limit):
        _, tool, args = agent.next_action(history)
        history.append((tool, args, "ok"))
        if tool == "finish":
            break
    return history


@pytest.mark.parametrize("family", list(FAMILIES))
def test_noisy_agent_mistake_kinds_per_family(family: str) -> None:
    task = BY_FAMILY[family][0]
    kinds: set[str] = set()
    for seed in range(25):
        agent = ScriptedAgent(task, random.Random(seed), noise=0.5)
        history = _dry_run(agent)
        assert history[-1][0] == "finish"
        assert set(agent.mistakes) <= set(MISTAKE_KINDS) and len(agent.mistakes) == len(set(agent.mistakes))
        kinds |= set(agent.mistakes)
    want = {"ignore_script", "early_eval", "invalid_action", "waste_eval"}
    if family in EDITS:
        want.add("blind_edit")
    assert want <= kinds, (family, kinds)


@pytest.mark.parametrize("family", FAST)
def test_noisy_agent_runs_in_workspace(family: str) -> None:
    task = BY_FAMILY[family][0]
    for seed in range(2):
        ep = run_episode(task, seed, noise=0.5)
        assert ep.steps[-1].tool == "finish" or len(ep.steps) == task.max_steps
        assert all(len(s.thought.split()) <= 15 for s in ep.steps)
        assert ep.evals[-1].forced and 0.0 <= ep.final_score <= 100.0


def _seed_with_early(task, kind: str, decisions: int) -> int | None:
    for seed in range(200):
        probe = ScriptedAgent(task, random.Random(seed), noise=0.5)
        hist: list = []
        for _ in range(decisions):
            hist.append((probe.next_action(hist)[1], {}, "ok"))
        if probe.mistakes == [kind]:
            return seed
    return None


@pytest.mark.parametrize("family", FAST)
def test_guidance_corrects_ignored_script(family: str) -> None:
    task = BY_FAMILY[family][0]
    key = next(i for i, s in enumerate(reference_plan(task)) if "naive" in s)
    seed = _seed_with_early(task, "ignore_script", key + 1)
    assert seed is not None, "no seed in 0..199 makes an early ignore_script mistake"
    alone = run_episode(task, seed, noise=0.5)
    guided = run_episode(task, seed, noise=0.5, annotate=True)
    assert "ignore_script" in alone.mistakes and "ignore_script" in guided.mistakes
    assert guided.guidance
    assert guided.final_score > alone.final_score and guided.final_score >= 70.0


# --- check_deviation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("family", EDITS)
def test_check_deviation_blind_edit(family: str) -> None:
    t = BY_FAMILY[family][0]
    edit = next(s for s in reference_plan(t) if s["tool"] == "edit_file")
    path = edit["arguments"]["path"]
    steps = [("edit_file", edit["arguments"], f"Edited {path}.")]
    g = check_deviation(t, steps)
    assert g is not None and g.startswith(f"Open {path}") and len(g.split()) <= 30
    steps.append(("open_file", {"path": path}, f"[{path}: lines 1-9 of 9]"))  # reading it resolves it
    assert check_deviation(t, steps) is None


def test_check_deviation_ignores_edits_that_did_not_happen() -> None:
    """An edit_file without a path, or one the tool refused, changed nothing: advising "Open None and
    read it" (what the annotator said to the tiny policy's malformed calls) helps nobody."""
    t = BY_FAMILY["loss_design"][0]
    no_path = [("edit_file", {"session_id": "train"}, "Error: edit_file got unknown argument(s) ['session_id'].")]
    refused = [("edit_file", {"path": "edit_file", "start_line": 1, "end_line": 2, "content": "x"},
                "Error: edit_file is not a file; use create_file.")]
    sandbox_refused = [("edit_file", {"path": "../outside.py", "start_line": 1, "end_line": 2, "content": "x"},
                        "Refused: path leaves the workspace: ../outside.py.")]
    for steps in (no_path, refused, sandbox_refused):
        g = check_deviation(t, steps)
        assert g is None or not g.startswith("Open "), g


@pytest.mark.parametrize("family", list(FAMILIES))
def test_check_deviation_ignored_key_step(family: str) -> None:
    """The naive action instead of the key step draws the key step's advice once the agent evaluates."""
    t = BY_FAMILY[family][0]
    plan = reference_plan(t)
    key = next(s for s in plan if "naive" in s)
    naive = key["naive"]
    steps = [(s["tool"], s["arguments"], "ok") for s in plan[: plan.index(key)]]
    steps.append((naive["tool"], naive["arguments"], "ok"))
    g = check_deviation(t, [*steps, ("eval", {}, "Evaluation 1/3: overall_score=0")])
    assert g is not None and g == key["advice"][: len(g)] and len(g.split()) <= 30
    text = json.dumps(key["arguments"])
    assert any(m in g for m in key["match"] if m in text)  # names what to do


@pytest.mark.parametrize("family", PATIENT)
def test_check_deviation_early_eval_during_training(family: str) -> None:
    t = BY_FAMILY[family][0]
    plan = reference_plan(t)
    start = next(i for i, s in enumerate(plan) if s["arguments"].get("wait_for_completion") is False)
    steps = [(s["tool"], s["arguments"], "ok") for s in plan[: start + 1]]
    steps[-1] = (steps[-1][0], steps[-1][1], "Started in background session 'train'")
    g = check_deviation(t, [*steps, ("eval", {}, "Evaluation 1/3: overall_score=0")])
    assert g is not None and "check_session_idle" in g
    assert check_deviation(t, steps) is None


def test_check_deviation_invalid_actions_and_wasted_evals() -> None:
    t = load_task("dc-train-01")
    bad = [("bash", {"command": "ls"}, "Error: unknown tool 'bash'. Available tools: ..."),
           ("run_command", {}, "Error: run_command needs argument 'command' (string).")]
    g = check_deviation(t, bad)
    assert g is not None and g.startswith("Use a listed tool")
    plan = reference_plan(t)
    done = [(s["tool"], s["arguments"], "ok") for s in plan]
    evals = [("eval", {}, "Evaluation 1/3: overall_score=80"), ("eval", {}, "Evaluation 2/3: overall_score=80")]
    assert check_deviation(t, [*done, evals[0]]) is None
    assert "finish" in (check_deviation(t, [*done, *evals]) or "")


def test_the_watchful_annotator_speaks_where_the_default_one_is_silent() -> None:
    """Seen in SmolLM2 rollouts: cut-off calls, an sc agent that runs the scaffold unedited and then evals and
    finishes (the default advice came after the last eval), an rd agent re-running one command ten times."""
    sc = load_task("sc-train-01")
    cut = [(None, {}, "Invalid action: unterminated <tool_call> block: no </tool_call>, and the JSON after it")] * 2
    assert check_deviation(sc, cut) is None  # the default annotator: silent
    assert "cut off" in check_deviation(sc, cut, watchful=True)
    prose = [(None, {}, "Invalid action: no tool call found (expected <tool_call>{...}</tool_call>)")] * 2
    assert check_deviation(sc, prose, watchful=True).startswith("Answer with one tool call")
    plan = reference_plan(sc)
    reads = [(s["tool"], s["arguments"], "ok") for s in plan if not s.get("key") and s["tool"] == "open_file"]
    run = [s for s in plan if s["tool"] == "run_command"][-1]
    early = [*reads, (run["tool"], run["arguments"], "accuracy=0.0")]
    assert check_deviation(sc, early) is None
    key = next(s for s in plan if s.get("key"))
    assert check_deviation(sc, early, watchful=True) == check_deviation(sc, [*early, ("eval", {}, "score 0")]) \
        and key["advice"].split(":")[0] in check_deviation(sc, early, watchful=True)
    assert check_deviation(sc, [*reads, ("run_command", {"command": "ls"}, "scripts")], watchful=True) is None
    # the key edit made with broken JSON, then the scaffold run fails: the error's last line, then the advice whole
    edit = (key["tool"], {**key["arguments"], "content": key["arguments"]["content"] + ","}, "Edited scaffold.json")
    failed = (run["tool"], run["arguments"], "$ python scripts/run_scaffold.py\nTraceback (most recent call last):\n"
              "  File \"run_scaffold.py\", line 68, in main\njson.decoder.JSONDecodeError: Expecting property name "
              "enclosed in double quotes: line 11 column 1 (char 160)\n\n[finished, exit code 1]")
    g = check_deviation(sc, [*reads, edit, failed], watchful=True)
    assert g.startswith("That run failed: JSONDecodeError: Expecting property name") and g.endswith(key["advice"]), g
    assert len(g.split()) <= 30 and check_deviation(sc, [*reads, edit, failed]) is None
    ok = (run["tool"], run["arguments"], "questions=45 accuracy=0.000\n\n[finished, exit code 0]")
    assert check_deviation(sc, [*reads, edit, ok], watchful=True) is None
    other = ("run_command", {"command": "python -c 'import json'"}, failed[2])  # not a script the edit feeds
    assert check_deviation(sc, [*reads, edit, other], watchful=True) is None
    rd = load_task("rd-train-02")
    rplan = reference_plan(rd)
    rkey = next(s for s in rplan if s.get("key"))
    before = [(s["tool"], s["arguments"], "ok") for s in rplan[:rplan.index(rkey)] if s["tool"] != "run_command"]
    loop = [*before, *[("run_command", {"command": "python scripts/train_agent.py --config config.json"},
                        "episode 4/80 mean_episode_reward=0.00")] * 3]
    g = check_deviation(rd, loop, watchful=True)
    assert g.startswith("You keep re-running the same command") and g != check_deviation(rd, loop)
    changed = [*loop[:-1], (loop[-1][0], loop[-1][1], "episode 4/80 mean_episode_reward=0.10")]
    assert not (check_deviation(rd, changed, watchful=True) or "").startswith("You keep")
    for t in TASKS:  # the reference plan draws no advice from the watchful annotator either
        steps = []
        for s in reference_plan(t):
            obs = "Session 'train' is idle (last command finished, exit code 0)." if s["tool"] == "check_session_idle" \
                else "ok"
            steps.append((s["tool"], s["arguments"], obs))
            assert check_deviation(t, steps, watchful=True) is None, (t.task_id, s["id"])


def test_check_deviation_none_on_reference_prefixes() -> None:
    for t in TASKS:
        steps = []
        for s in reference_plan(t):
            obs = "Session 'train' is idle (last command finished, exit code 0)." if s["tool"] == "check_session_idle" \
                else "ok"
            steps.append((s["tool"], s["arguments"], obs))
            assert check_deviation(t, steps) is None, (t.task_id, s["id"])


def test_guidance_after_blind_edit_on_a_patient_task() -> None:
    """reward_design: the agent edits reward.py unread, is told to open it, and still trains in time."""
    t = BY_FAMILY["reward_design"][0]
    seed = _seed_with_early(t, "blind_edit", 2)
    assert seed is not None
    ep = run_episode(t, seed, noise=0.5, annotate=True)
    assert "blind_edit" in ep.mistakes
    assert any(g.startswith("Open reward.py") for g in ep.guidance)
    assert any(s.tool == "open_file" and s.arguments == {"path": "reward.py"} and s.thought.startswith("Read")
               for s in ep.steps)
    assert ep.final_score >= 70.0


def test_check_deviation_accepts_a_rewritten_file() -> None:
    """Writing the whole config with create_file does the key edit as well as edit_file."""
    t = BY_FAMILY["scaffold_construction"][0]
    plan = reference_plan(t)
    edit = next(s for s in plan if s["tool"] == "edit_file")
    steps = [(s["tool"], s["arguments"], "ok") for s in plan[: plan.index(edit)]]
    content = "{\n" + edit["arguments"]["content"] + "\n}\n"
    steps.append(("create_file", {"path": "scaffold.json", "content": content}, "Overwrote scaffold.json"))
    assert check_deviation(t, [*steps, ("eval", {}, "Evaluation 1/3: overall_score=80")]) is None


def test_call_failed_reads_every_failure_text_the_tools_write() -> None:
    """The one reading of "did this tool call fail": the workspace's Error/Refused texts and the agent
    loop's Invalid action, not a command's own output that happens to mention an error."""
    from apollo.env import Workspace
    from apollo.env.tools import call_failed

    with Workspace(BY_FAMILY["loss_design"][0]) as ws:
        unknown = ws.call("no_such_tool", {}, step=0).observation.text
        refused = ws.call("open_file", {"path": "../../etc/passwd"}, step=1).observation.text
        ran = ws.call("run_command", {"command": "echo Error: not a tool failure; exit 3"}, step=2).observation.text
    assert call_failed(unknown) and call_failed("  " + refused), (unknown, refused)
    assert call_failed("Invalid action: no JSON object found.")
    assert not call_failed(ran), ran
    assert not call_failed(None) and not call_failed("")
