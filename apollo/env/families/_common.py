"""Helpers shared by the task families: deterministic writers for the InnovatorBench task layout.

A task directory ``<suite>/<split>/<task_id>/`` holds::

    task.yaml                                  metadata (domain, family, max_working_time, ...)
    task/task_description.md                   what the agent reads (≤ 900 characters)
    workspace/scripts/, workspace/data/        copied into the agent's sandbox
    evaluations/<task_id>/task/evaluation.py   hidden: TaskBenchmark(config).validate()
    evaluations/<task_id>/task/config.py       hidden: TaskConfig(eval_workspace=..., workspace=...)
    evaluations/<task_id>/task/params.json     hidden: calibration (baseline / reference metrics)
    evaluations/<task_id>/task/data/           hidden: clean test data
    evaluations/<task_id>/reference_plan.json  hidden: the reference solution, ordered steps
    evaluations/<task_id>/baseline_plan.json   hidden: the baseline (scores 0 by construction)
    evaluations/<task_id>/hint.md              hidden: the hint (``view_hint``, off in the main evaluation)
    evaluations/<task_id>/answer.json          hidden: the calibrated answer (the values the hint states)

Answers are drawn from per-split pools (:func:`answer_pool`): a test instance's calibrated answer is
never a train instance's answer, nor stated by any train instance's advice or hint, so guided
training data cannot teach test answers (InnovatorBench's test tasks are unseen tasks too).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

TEMPLATES = Path(__file__).resolve().parent / "templates"
MAX_DESCRIPTION_CHARS = 900
REQUIRED_SECTIONS = ("Motivation", "Task", "Data", "Constraint", "Evaluation", "Environment", "Scripts")


def write_text(path: Path, text: str) -> None:
    """Write UTF-8 text with ``\\n`` newlines, creating parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)


def write_json(path: Path, obj: Any, indent: int | None = 2) -> None:
    write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False) + "\n")


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    write_text(path, "".join(json.dumps(r) + "\n" for r in records))


def copy_template(family: str, name: str, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(TEMPLATES / family / name, dest)


def load_template_module(family: str, name: str) -> ModuleType:
    """Import a template script (e.g. the trainer) to calibrate a task at generation time."""
    path = TEMPLATES / family / name
    spec = importlib.util.spec_from_file_location(f"_apollo_tpl_{family}_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def answer_pool(pools: dict[str, tuple[Any, ...]], split: str, family: str) -> tuple[Any, ...]:
    """The answers a ``split`` instance may draw (train and test pools are disjoint)."""
    if split not in pools:
        raise ValueError(f"{family}: no answer pool for split {split!r} (known: {sorted(pools)})")
    return pools[split]


def write_answer(task_dir: Path, task_id: str, answer: dict[str, Any]) -> None:
    """Record the calibrated answer (hidden) so tests can check train/test disjointness."""
    write_json(task_dir / "evaluations" / task_id / "answer.json", answer)


def write_hint(task_dir: Path, task_id: str, text: str) -> None:
    """``evaluations/<task_id>/hint.md``, where InnovatorBench keeps it: outside the workspace."""
    write_text(task_dir / "evaluations" / task_id / "hint.md", text)


def write_description(task_dir: Path, title: str, sections: dict[str, str]) -> None:
    """Write ``task/task_description.md``; checks the sections and the length budget."""
    missing = [s for s in REQUIRED_SECTIONS if s not in sections]
    if missing:
        raise ValueError(f"description lacks sections {missing}")
    text = f"# {title}\n" + "".join(f"## {s}\n{sections[s].strip()}\n" for s in REQUIRED_SECTIONS)
    if len(text) > MAX_DESCRIPTION_CHARS:
        raise ValueError(f"description of {task_dir.name} has {len(text)} > {MAX_DESCRIPTION_CHARS} chars")
    write_text(task_dir / "task" / "task_description.md", text)


def write_task_meta(
    task_dir: Path,
    *,
    task_id: str,
    split: str,
    domain: str,
    family: str,
    seed: int,
    max_steps: int,
    max_working_time: float,
    max_eval_num: int = 3,
) -> None:
    """Write ``task.yaml`` (names mirror InnovatorBench's research_gym/configs/tasks/task_<i>.yaml)."""
    meta = {
        "task_id": task_id,
        "split": split,
        "domain": domain,
        "family": family,
        "seed": seed,
        "max_steps": max_steps,
        "max_working_time": float(max_working_time),
        "max_eval_num": max_eval_num,
        "computer_pool": "cpu",
    }
    write_text(task_dir / "task.yaml", yaml.safe_dump(meta, sort_keys=False))


def write_evaluation(task_dir: Path, task_id: str, family: str, params: dict[str, Any]) -> Path:
    """Write the hidden evaluation folder; returns ``evaluations/<task_id>/task``."""
    ev = task_dir / "evaluations" / task_id / "task"
    copy_template(family, "evaluation.py", ev / "evaluation.py")
    copy_template("common", "config.py", ev / "config.py")
    write_json(ev / "params.json", params)
    return ev


def step(
    sid: str, thought: str, tool: str, arguments: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    """One plan step. Optional ``extra`` keys used by the scripted agent and the annotator:

    ``key`` (bool): an essential step; ``match`` (list[str]): substrings of the JSON arguments that
    show an agent did this step; ``avoid`` (list[str]): substrings that, without ``match``, show the
    agent doing it the wrong way; ``advice``: a short imperative guidance text; ``naive``: the
    naive alternative action ``{"thought", "tool", "arguments"}`` (the "ignore the script" mistake).
    """
    if len(thought.split()) > 15:
        raise ValueError(f"thought too long: {thought!r}")
    return {"id": sid, "thought": thought, "tool": tool, "arguments": arguments, **extra}


def write_plans(task_dir: Path, task_id: str, reference: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> None:
    ev = task_dir / "evaluations" / task_id
    write_json(ev / "reference_plan.json", reference)
    write_json(ev / "baseline_plan.json", baseline)


def r(x: float, nd: int) -> float:
    """Round and normalise -0.0 so the files are stable."""
    v = round(float(x), nd)
    return 0.0 if v == 0 else v
