"""Scripted agents (reference / noisy) and the simulated annotator's deviation check."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from apollo.agent.actions import format_action, parse_action
from apollo.env import (
    MISTAKE_KINDS,
    Episode,
    ScriptedAgent,
    check_deviation,
    list_tasks,
    load_task,
    reference_plan,
    run_episode,
)

TASKS = list_tasks()
DF_TASKS = [t for t in TASKS if t.family == "data_filtering"]


@pytest.fixture(scope="module")
def reference_episodes() -> dict[str, Episode]:
    """Noise-0 episodes of every task with the annotator watching, run in parallel."""
    with ThreadPoolExecutor(max_workers=len(TASKS)) as pool:
        futs = {t.task_id: pool.submit(run_episode, t, ScriptedAgent(t, random.Random(1)), annotate=True)
                for t in TASKS}
        return {k: f.result() for k, f in futs.items()}


@pytest.mark.parametrize("task_id", [t.task_id for t in TASKS])
def test_noise_free_agent_follows_plan_and_reaches_reference(reference_episodes, task_id: str) -> None:
    ep = reference_episodes[task_id]
    plan = reference_plan(load_task(task_id))
    assert [(s.tool, s.arguments) for s in ep.steps] == [(p["tool"], p["arguments"]) for p in plan] + [
        ("eval", {}), ("finish", {})]
    assert 70.0 <= ep.final_score <= 90.0 and ep.evals[0].score == ep.final_score
    assert ep.mistakes == [] and ep.guidance == []  # check_deviation is None at every prefix
    for s in ep.steps:
        assert len(s.thought.split()) <= 15
        action = parse_action(format_action(s.thought, s.tool, s.arguments))
        assert action.valid and action.tool == s.tool and action.arguments == s.arguments


def test_noisy_agent_makes_several_kinds_of_mistakes() -> None:
    kinds: set[str] = set()
    for seed in range(6):
        for t in DF_TASKS[:2]:
            agent = ScriptedAgent(t, random.Random(seed), noise=0.5)
            ep = run_episode(t, agent)
            assert set(agent.mistakes) <= set(MISTAKE_KINDS)
            assert ep.steps[-1].tool == "finish" or len(ep.steps) == t.max_steps
            assert all(len(s.thought.split()) <= 15 for s in ep.steps)
            kinds |= set(agent.mistakes)
    assert len(kinds) >= 2, kinds


def test_noisy_ld_agent_mistakes_without_running() -> None:
    """Mistake choice is observation-independent, so it can be exercised without a workspace."""
    t = load_task("ld-train-01")
    kinds: set[str] = set()
    for seed in range(20):
        agent = ScriptedAgent(t, random.Random(seed), noise=0.5)
        history: list = []
        for _ in range(30):
            thought, tool, args = agent.next_action(history)
            history.append((tool, args, "ok"))
            if tool == "finish":
                break
        assert history[-1][0] == "finish"
        kinds |= set(agent.mistakes)
    assert {"blind_edit", "ignore_script", "early_eval", "invalid_action", "waste_eval"} <= kinds


def test_guidance_corrects_ignored_script() -> None:
    t = DF_TASKS[0]
    for seed in range(50):
        probe = ScriptedAgent(t, random.Random(seed), noise=0.5)
        hist: list = []
        for _ in range(3):  # the decisions up to the key step
            hist.append((probe.next_action(hist)[1], {}, "ok"))
        if probe.mistakes == ["ignore_script"]:
            break
    else:
        pytest.skip("no seed with an early ignore_script")
    alone = run_episode(t, ScriptedAgent(t, random.Random(seed), noise=0.5))
    guided = run_episode(t, ScriptedAgent(t, random.Random(seed), noise=0.5), annotate=True)
    assert "ignore_script" in alone.mistakes and "ignore_script" in guided.mistakes
    assert guided.guidance and "scripts/filter.py" in guided.guidance[0]
    assert guided.final_score > alone.final_score
    assert guided.final_score >= 70.0


def test_check_deviation_blind_edit() -> None:
    t = load_task("ld-train-01")
    plan = reference_plan(t)
    edit = next(s for s in plan if s["tool"] == "edit_file")
    steps = [("edit_file", edit["arguments"], "Edited config.json lines 3-4.")]
    g = check_deviation(t, steps)
    assert g is not None and g.startswith("Open config.json") and len(g.split()) <= 30
    # reading the file afterwards resolves it
    steps.append(("open_file", {"path": "config.json"}, "[config.json: lines 1-9 of 9]"))
    assert check_deviation(t, steps) is None


def test_check_deviation_ignored_script_and_early_eval() -> None:
    t = DF_TASKS[0]
    g = check_deviation(t, [("run_command", {"command": "head -n 300 data/x.jsonl > output/filtered.jsonl"}, "")])
    assert g is not None and "scripts/filter.py" in g and "--min-quality" in g and len(g.split()) <= 30
    ld = load_task("ld-train-01")
    plan = reference_plan(ld)
    steps = [(s["tool"], s["arguments"], "ok") for s in plan[:4]]
    steps[-1] = (steps[-1][0], steps[-1][1], "Started in background session 'train'")
    g = check_deviation(ld, [*steps, ("eval", {}, "Evaluation 1/3: overall_score=0")])
    assert g is not None and "check_session_idle" in g
    assert check_deviation(ld, steps) is None
    g = check_deviation(ld, [("run_command", {"command": "python scripts/train.py --config config.json"}, "")])
    assert g is not None and "huber" in g


def test_check_deviation_none_on_reference_prefixes() -> None:
    for t in TASKS:
        plan = reference_plan(t)
        steps = []
        for s in plan:
            obs = "Session 'train' is idle (last command finished, exit code 0)." if s["tool"] == "check_session_idle" \
                else "ok"
            steps.append((s["tool"], s["arguments"], obs))
            assert check_deviation(t, steps) is None, (t.task_id, s["id"])
