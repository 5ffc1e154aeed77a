"""The mini InnovatorBench suite: composition, layout, generator, and every task's reference and
baseline scores (the reference run is the noise-free scripted agent with the annotator watching)."""

from __future__ import annotations

import filecmp
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from apollo.agent.actions import format_action, parse_action
from apollo.env import (
    DOMAINS,
    Workspace,
    evaluate_workspace,
    list_tasks,
    load_task,
    reference_plan,
    run_baseline,
)
from apollo.engines.scripted import run_scripted
from apollo.env.families import FAMILIES
from apollo.env.families._common import REQUIRED_SECTIONS
from apollo.env.generate import SUITE, Instance, generate_suite, suite_instances
from apollo.env.tasks import default_suite_root
from apollo.evaluation.report import DOMAIN_ORDER

TASKS = list_tasks()
SUITE_ROOT = default_suite_root()  # generated for the session by tests/conftest.py
TRAIN_COUNTS = {"data_construction": 4, "data_filtering": 3, "data_augmentation": 3, "loss_design": 2,
                "scaffold_construction": 3, "reward_design": 3}
TEST_COUNTS = {"data_construction": 4, "data_filtering": 3, "data_augmentation": 5, "loss_design": 3,
               "reward_design": 2, "scaffold_construction": 3}
PATIENT = {"loss_design", "reward_design"}  # background training of a few seconds


def run_episode(task, seed: int = 0, *, noise: float = 0.0, annotate: bool = False) -> SimpleNamespace:
    """The scripted agent (an engine) in the one episode loop, viewed as (tool, arguments, thought) steps."""
    traj, engine = run_scripted(task, noise=noise, seed=seed, annotate=annotate)
    steps = [SimpleNamespace(tool=s.action.tool, arguments=s.action.arguments,
                             thought=s.assistant_text.split("<tool_call>")[0].strip()) for s in traj.steps]
    return SimpleNamespace(steps=steps, evals=traj.evals, final_score=traj.final_score,
                           mistakes=list(engine.agent.mistakes),
                           guidance=[g.text for s in traj.steps for g in s.guidance])


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[SimpleNamespace, float, float]]:
    """Per task: (reference episode with the annotator watching, its wall time, baseline score).

    Run in parallel: the patient tasks mostly sleep while their training runs.
    """
    def reference(t):
        t0 = time.perf_counter()
        ep = run_episode(t, 1, annotate=True)
        return ep, time.perf_counter() - t0

    with ThreadPoolExecutor(max_workers=12) as pool:
        ordered = sorted(TASKS, key=lambda t: t.domain not in PATIENT)  # start the slow ones first
        ref = {t.task_id: pool.submit(reference, t) for t in ordered}
        base = {t.task_id: pool.submit(run_baseline, t) for t in ordered}
        return {k: (*ref[k].result(), base[k].result()) for k in ref}


# --- composition ---------------------------------------------------------------------------------------


def test_suite_composition() -> None:
    assert DOMAINS == tuple(DOMAIN_ORDER)  # the report's columns
    assert set(FAMILIES) == set(DOMAINS) and all(FAMILIES[f].DOMAIN == f for f in FAMILIES)
    assert len(TASKS) == 38 and len(SUITE) == 38
    for split, want in (("train", TRAIN_COUNTS), ("test", TEST_COUNTS)):
        tasks = list_tasks(split)
        got = {d: sum(t.domain == d for t in tasks) for d in DOMAINS}
        assert got == want, (split, got)
        assert all(t.split == split for t in tasks)
    assert len(list_tasks("train")) == 18 and len(list_tasks("test")) == 20
    ids = [t.task_id for t in TASKS]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    for prefix in ("df-train-0", "df-test-0", "ld-train-0", "ld-test-0"):  # the first ids are kept
        assert any(i.startswith(prefix + "1") for i in ids)
    manifest = json.loads((SUITE_ROOT / "suite.json").read_text())
    assert [(m["task_id"], m["domain"], m["split"]) for m in manifest] == [
        (i.task_id, FAMILIES[i.family].DOMAIN, i.split) for i in SUITE]


def test_task_layout() -> None:
    for t in TASKS:
        assert t.max_evals == 3 and t.max_steps > 0 and t.max_wall_s > 0
        text = t.description
        assert len(text) <= 900, t.task_id
        assert all(f"## {s}" in text for s in REQUIRED_SECTIONS), t.task_id
        ev = t.eval_dir / "task"
        assert (ev / "evaluation.py").is_file() and (ev / "config.py").is_file() and (ev / "params.json").is_file()
        assert t.hint.strip()
        assert (t.workspace_template / "scripts").is_dir() and (t.workspace_template / "data").is_dir()
        plan = reference_plan(t)
        assert plan and all({"id", "thought", "tool", "arguments"} <= set(s) for s in plan)
        assert any(s.get("key") for s in plan) and any("naive" in s for s in plan), t.task_id
        assert len(plan) + 2 <= 14, t.task_id  # fits the bootstrap demonstrations' step budget
    with pytest.raises(KeyError):
        load_task("nope-01")


def test_train_and_test_instances_differ() -> None:
    descs = {t.task_id: t.description for t in TASKS}
    assert len(set(descs.values())) == len(descs)
    hidden = {t.task_id: "".join(f.read_text() for f in sorted((t.eval_dir / "task").rglob("*.*"))) for t in TASKS}
    assert len(set(hidden.values())) == len(hidden)


def test_suite_is_small() -> None:
    sizes = [p.stat().st_size for p in SUITE_ROOT.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert max(sizes) <= 50_000 and sum(sizes) <= 8_000_000


def test_generator_is_deterministic(tmp_path: Path) -> None:
    generate_suite(tmp_path)
    first = sorted(p.relative_to(SUITE_ROOT) for p in SUITE_ROOT.rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts)
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert first == fresh
    for rel in fresh:
        assert filecmp.cmp(SUITE_ROOT / rel, tmp_path / rel, shallow=False), rel


def test_suite_seed_shifts_instances() -> None:
    assert suite_instances(0) == SUITE
    shifted = suite_instances(3)
    assert [i.task_id for i in shifted] == [i.task_id for i in SUITE]
    assert all(a.seed != b.seed for a, b in zip(shifted, SUITE))
    assert max(i.seed for i in shifted) < 50_000 or min(i.seed for i in shifted) > 100_000  # not a demo seed
    with pytest.raises(ValueError):
        suite_instances(-1)


def test_no_suite_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="apollo stage suite"):
        list_tasks(suite_root=tmp_path / "missing")


def test_suite_stage_writes_data_suite(tmp_path: Path) -> None:
    from apollo.config import Paths
    from apollo.stages import suite as stage

    metrics = stage.run({"suite": {"seed": 0}}, None, Paths(tmp_path))
    assert metrics["suite.tasks"] == 38 and metrics["suite.train"] == 18 and metrics["suite.test"] == 20
    out = tmp_path / "data" / "suite"
    assert (out / "suite.json").read_text() == (SUITE_ROOT / "suite.json").read_text()
    assert len(list_tasks(suite_root=out)) == 38
    assert not [p for p in (tmp_path / "data").iterdir() if p.name != "suite"]  # no temp folder left


def test_fresh_instances_generate_for_every_family(tmp_path: Path) -> None:
    """Bootstrap demonstrations use fresh seeds (50_000+): every family must calibrate on them."""
    insts = [Instance(f"{m.PREFIX}-demo-{k:03d}", f, "train", 50_000 + 1000 * k + k)
             for f, m in FAMILIES.items() for k in range(3)]
    t0 = time.perf_counter()
    generate_suite(tmp_path, insts)
    assert time.perf_counter() - t0 < 10
    assert len(list_tasks("train", suite_root=tmp_path)) == len(insts)


def test_bench_list_cli() -> None:
    out = subprocess.run([sys.executable, "-m", "apollo", "bench", "list"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip().splitlines()[-1] == "38 tasks"
    assert all(t.task_id in out for t in TASKS)


# --- scores --------------------------------------------------------------------------------------------


def _without_extra_waits(ep: SimpleNamespace) -> list[tuple[str, dict]]:
    """The episode's actions without the extra (sleep, check again) rounds a slow machine may need."""
    out: list[tuple[str, dict]] = []
    skip_check = False
    for s in ep.steps:
        if s.tool == "sleep" and s.thought.startswith("Training still runs"):
            skip_check = True
            continue
        if skip_check and s.tool == "check_session_idle":
            skip_check = False
            continue
        out.append((s.tool, s.arguments))
    return out


@pytest.mark.parametrize("task_id", [t.task_id for t in TASKS])
def test_reference_and_baseline(runs, task_id: str) -> None:
    ep, wall, base = runs[task_id]
    task = load_task(task_id)
    plan = reference_plan(task)
    assert _without_extra_waits(ep) == [(p["tool"], p["arguments"]) for p in plan] + [("eval", {}), ("finish", {})]
    assert 70.0 <= ep.final_score <= 90.0 and ep.evals[0].score == ep.final_score
    assert abs(ep.final_score - 80.0) < 0.5  # calibrated: reference -> 80
    assert base <= 5.0
    assert ep.mistakes == [] and ep.guidance == []  # check_deviation is None at every prefix
    assert wall < 30.0  # ≤ 10 s alone; the threads share two cores here
    for s in ep.steps:
        assert len(s.thought.split()) <= 15
        action = parse_action(format_action(s.thought, s.tool, s.arguments))
        assert action.valid and action.tool == s.tool and action.arguments == s.arguments


# --- invalid outputs score 0 with a readable message ----------------------------------------------------

_INVALID = {
    "data_construction": [
        (None, "output/train.jsonl not found"),
        ({"output/train.jsonl": "not json\n"}, "not valid JSON"),
        ({"output/train.jsonl": '{"src": "a b", "tgt": "c"}\n'}, "same, non-zero number of words"),
        ({"output/train.jsonl": '{"src": "a", "tgt": "b"}\n'}, "records; write between"),
    ],
    "data_augmentation": [
        (None, "output/augmented.jsonl not found"),
        ({"output/augmented.jsonl": '{"id": 0, "x": [1], "label": 5}\n'}, "neither an unchanged original"),
        ({"output/augmented.jsonl": '{"id": "s", "x": [1], "label": 1, "synthetic": true}\n'}, "finite features"),
    ],
    "reward_design": [
        (None, "output/policy.json not found"),
        ({"output/policy.json": '{"policy": ["UUX"]}'}, "letters from U, D, L, R"),
    ],
    "scaffold_construction": [
        ({"scaffold.json": "{"}, "not valid JSON"),
        ({"scaffold.json": '{"routes": {"what": "oracle"}}'}, "unknown tool"),
        ({"scaffold.json": '{"max_retries": 99}'}, "max_retries"),
    ],
}


@pytest.mark.parametrize("family", sorted(_INVALID))
def test_invalid_output_scores_zero_with_message(family: str, tmp_path: Path) -> None:
    task = next(t for t in TASKS if t.family == family)
    for files, expect in _INVALID[family]:
        with Workspace(task, tmp_path) as w:
            if files is None and family == "scaffold_construction":
                (w.path / "scaffold.json").unlink()
            for rel, text in (files or {}).items():
                (w.path / rel).parent.mkdir(parents=True, exist_ok=True)
                (w.path / rel).write_text(text)
            score, _, message = evaluate_workspace(task, w.path)
            assert score == 0.0 and expect in message, (family, files, message)


def test_reward_design_needs_unchanged_training_settings(tmp_path: Path) -> None:
    task = next(t for t in TASKS if t.family == "reward_design")
    with Workspace(task, tmp_path) as w:
        cfg = json.loads((w.path / "config.json").read_text())
        (w.path / "config.json").write_text(json.dumps({**cfg, "episodes": 5000}))
        grid = json.loads((w.path / "data" / "grid.json").read_text())
        (w.path / "output" / "policy.json").write_text(json.dumps({"policy": ["U" * grid["width"]] * grid["height"]}))
        score, _, message = evaluate_workspace(task, w.path)
        assert score == 0.0 and "episodes" in message


def test_partial_solutions_score_in_between(tmp_path: Path) -> None:
    """Scores are linear between baseline and reference: a half-way scaffold lands in between."""
    task = next(t for t in TASKS if t.family == "scaffold_construction")
    ref_cfg = json.loads("{" + reference_plan(task)[3]["arguments"]["content"] + "}")
    with Workspace(task, tmp_path) as w:
        (w.path / "scaffold.json").write_text(json.dumps({**ref_cfg, "verify": False}))
        score, metrics, _ = evaluate_workspace(task, w.path)
    assert 20.0 < score < 79.0 and 0 < metrics["accuracy"] < 1
