"""Evaluate stage: a model variant on the test tasks, InnovatorBench-style.

Variants: ``base`` (``data/models/base``), ``sft`` (``data/models/sft``) and ``reference`` (the
scripted reference agent, an upper anchor). No guidance at test time. Writes
``data/eval/<variant>/{trajectories.jsonl, results.json, table.md}``.
"""

from __future__ import annotations

import json
from typing import Any

from apollo.config import Paths, section
from apollo.evaluation.report import action_stats, action_table, markdown_table, per_task, summarize, task_table
from apollo.schema import Trajectory, atomic_write_text, write_trajectories
from apollo.stages.common import RolloutJob, agent_config, plan_jobs, episode, run_jobs


def plan(params: dict[str, Any]) -> list[RolloutJob]:
    return plan_jobs(params, "evaluate", "test", seed_offset=7919)


def run_one(job: RolloutJob, params: dict[str, Any], variant: str, paths: Paths | None = None) -> Trajectory:
    from apollo.env.tasks import load_task
    from apollo.stages.rollout import engine_for

    paths = paths or Paths.default()
    p = section(params, "evaluate")
    task = load_task(job.task_id, view_hint=bool(p.get("view_hint", False)))
    if variant == "reference":
        from apollo.engines.scripted import ScriptedEngine

        engine = ScriptedEngine(task, noise=0.0, seed=job.seed, policy_id="scripted-reference")
    else:
        engine = engine_for(params, paths.model(variant), section_name="evaluate")
    return episode(task, engine, job, agent_config(p), guidance=None,
                   meta={"stage": "evaluate", "variant": variant, "sample": job.sample})


def finalize(trajs: list[Trajectory], variant: str, paths: Paths | None = None) -> dict[str, Any]:
    paths = paths or Paths.default()
    trajs = sorted(trajs, key=lambda t: t.trajectory_id)
    rows = per_task(trajs)
    summary = summarize(rows)
    summary["actions"] = action_stats(trajs)
    out = paths.eval(variant)
    write_trajectories(out / "trajectories.jsonl", trajs)
    atomic_write_text(out / "results.json", json.dumps(
        {"variant": variant, "tasks": rows, **summary}, indent=2) + "\n")
    atomic_write_text(out / "table.md", markdown_table({variant: summary}) + "\n\n"
                      + action_table({variant: summary["actions"]}) + "\n\n" + task_table(rows) + "\n")
    metrics: dict[str, float] = {
        "eval.weighted_final": summary["weighted"]["final"],
        "eval.weighted_best": summary["weighted"]["best"],
    }
    metrics.update({f"eval.actions.{k}": v for k, v in summary["actions"].items()})
    for d, v in summary["domains"].items():
        metrics[f"eval.{d}.final"] = v["final"]
        metrics[f"eval.{d}.best"] = v["best"]
    for r in rows:
        metrics[f"eval.task.{r['task_id']}.final"] = r["final"]
    return metrics


def run(params: dict[str, Any], tracker=None, paths: Paths | None = None, variant: str = "base") -> dict[str, Any]:
    paths = paths or Paths.default()
    jobs = plan(params)
    workers = int(section(params, "evaluate").get("workers", 2))
    trajs = run_jobs(jobs, lambda j: run_one(j, params, variant, paths), workers, f"evaluate[{variant}]")
    metrics = finalize(trajs, variant, paths)
    if tracker is not None:
        tracker.log_metrics(metrics)
        tracker.log_artifact(paths.eval(variant) / "table.md", "eval")
        tracker.log_artifact(paths.eval(variant) / "results.json", "eval")
    return metrics
