"""Evaluate stage: a model variant on the test tasks, InnovatorBench-style.

Variants: ``base`` (``data/models/base``), ``sft`` (``data/models/sft``) and ``reference`` (the
scripted reference agent, an upper anchor). No guidance at test time. Writes
``data/eval/<variant>/{trajectories.jsonl, results.json, table.md}``. Episodes run on the async
runtime against ``evaluate.engine`` (``vllm_server``: a server for the variant's model, started for
the stage); crashed trajectories are scored as the workspace was left and counted (``eval.crashed``).
"""

from __future__ import annotations

import json
from typing import Any

from apollo.config import Paths, section
from apollo.evaluation.report import action_stats, action_table, markdown_table, per_task, summarize, task_table
from apollo.schema import Trajectory, atomic_write_text, write_trajectories
from apollo.stages.common import (
    RolloutJob,
    aepisode,
    agent_config,
    current_engine,
    engine_session,
    episode,
    plan_jobs,
    run_jobs,
)


BASE_POLICY_VARIANTS = ("base", "untrained")  # evaluate the shared base model


def policy_dir(paths: Paths, variant: str):
    """The model a variant evaluates: ``untrained`` (= ``base``) is the shared base policy."""
    return paths.base_model if variant in BASE_POLICY_VARIANTS else paths.model(variant)


def plan(params: dict[str, Any]) -> list[RolloutJob]:
    return plan_jobs(params, "evaluate", "test", seed_offset=7919)


def _engine(job: RolloutJob, task: Any, variant: str, shared: Any) -> Any:
    if variant == "reference":
        from apollo.engines.scripted import ScriptedEngine

        return ScriptedEngine(task, noise=0.0, seed=job.seed, policy_id="scripted-reference")
    return shared


def run_one(job: RolloutJob, params: dict[str, Any], variant: str, paths: Paths | None = None) -> Trajectory:
    """One trajectory, blocking: what a lone worker (a Prefect task per trajectory) runs."""
    from apollo.env.tasks import load_task

    paths = paths or Paths.default()
    p = section(params, "evaluate")
    task = load_task(job.task_id, view_hint=bool(p.get("view_hint", False)))
    shared = None if variant == "reference" else current_engine(p, policy_dir(paths, variant))
    return episode(task, _engine(job, task, variant, shared), job, agent_config(p), guidance=None,
                   meta={"stage": "evaluate", "variant": variant, "sample": job.sample})


async def arun_one(job: RolloutJob, params: dict[str, Any], variant: str, engine: Any) -> Trajectory:
    from apollo.env.tasks import load_task

    p = section(params, "evaluate")
    task = load_task(job.task_id, view_hint=bool(p.get("view_hint", False)))
    return await aepisode(task, _engine(job, task, variant, engine), job, agent_config(p),
                          guidance=None, meta={"stage": "evaluate", "variant": variant, "sample": job.sample})


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
        "eval.crashed": sum(t.finish_reason == "error" for t in trajs),  # scored as the workspace was left
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
    p = section(params, "evaluate")
    workers = int(p.get("workers", 2))
    session = engine_session({**p, "engine": "scripted"} if variant == "reference" else p, policy_dir(paths, variant))
    with session as engine:
        async def one(job: RolloutJob) -> Trajectory:
            return await arun_one(job, params, variant, engine)

        label = f"evaluate[{variant}]" if paths.seed is None else f"evaluate[{variant} s{paths.seed}]"
        trajs = run_jobs(jobs, one, workers, label, engine=engine)
    metrics = finalize(trajs, variant, paths)
    if tracker is not None:
        tracker.log_metrics(metrics)
        tracker.log_artifact(paths.eval(variant) / "table.md", "eval")
        tracker.log_artifact(paths.eval(variant) / "results.json", "eval")
    return metrics
