"""Prefect tasks around the apollo stages (rollout-like stages are mapped per trajectory)."""

from __future__ import annotations

import time
from typing import Any

from prefect import flow, task, unmapped
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from prefect.task_runners import ThreadPoolTaskRunner

from apollo.config import Paths, section
from apollo.schema import Trajectory
from apollo.stages.common import RolloutJob
from apollo.tracking import stage_run


@task(name="stage", cache_policy=NO_CACHE, task_run_name="{name}")
def run_stage_task(name: str, params: dict[str, Any], parent_run_id: str, variant: str | None = None) -> dict[str, Any]:
    from apollo.stages import run_stage

    logger = get_run_logger()
    t0 = time.perf_counter()
    metrics = run_stage(name, params, variant=variant, parent_run_id=parent_run_id)
    logger.info("stage %s finished in %.1fs", name if not variant else f"{name}@{variant}", time.perf_counter() - t0)
    return metrics


@task(name="rollout-one", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=1,
      task_run_name="rollout-{job.task_id}-s{job.sample}")
def rollout_one(job: RolloutJob, params: dict[str, Any]) -> Trajectory:
    from apollo.stages import rollout

    t = rollout.run_one(job, params)
    get_run_logger().info("%s: %d steps, final %.1f, best %.1f, guidance %d", t.trajectory_id,
                          len(t.steps), t.final_score or 0, t.best_score or 0,
                          sum(len(s.guidance) for s in t.steps))
    return t


@task(name="evaluate-one", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=1,
      task_run_name="evaluate-{variant}-{job.task_id}-s{job.sample}")
def evaluate_one(job: RolloutJob, params: dict[str, Any], variant: str) -> Trajectory:
    from apollo.stages import evaluate

    t = evaluate.run_one(job, params, variant)
    get_run_logger().info("%s: %d steps, final %.1f, best %.1f", t.trajectory_id, len(t.steps),
                          t.final_score or 0, t.best_score or 0)
    return t


def with_workers(flow_obj, params: dict[str, Any], name: str):
    """The subflow with a thread pool sized by ``params[name].workers``."""
    n = int(section(params, name).get("workers", 2))
    return flow_obj.with_options(task_runner=ThreadPoolTaskRunner(max_workers=max(1, n)))


@flow(name="rollout-stage")
def rollout_flow(params: dict[str, Any], parent_run_id: str) -> dict[str, Any]:
    """Rollouts mapped over (task, sample), the simulated annotator watching in its own process."""
    from apollo.stages import rollout

    with stage_run("rollout", {"rollout": params["rollout"], "seed": params.get("seed")}, parent_run_id) as tracker:
        jobs = rollout.plan(params)
        t0 = time.perf_counter()
        with rollout.annotator(params):
            futures = rollout_one.map(jobs, params=unmapped(params))
            trajs = [f.result() for f in futures]
        metrics = rollout.finalize(trajs, tracker=tracker)
        tracker.log_metrics({**metrics, "rollout.seconds": time.perf_counter() - t0})
    return metrics


@flow(name="evaluate-stage", flow_run_name="evaluate-{variant}")
def evaluate_flow(params: dict[str, Any], parent_run_id: str, variant: str) -> dict[str, Any]:
    from apollo.stages import evaluate

    with stage_run(f"evaluate@{variant}", {"evaluate": params["evaluate"], "seed": params.get("seed")},
                   parent_run_id) as tracker:
        jobs = evaluate.plan(params)
        t0 = time.perf_counter()
        futures = evaluate_one.map(jobs, params=unmapped(params), variant=unmapped(variant))
        trajs = [f.result() for f in futures]
        metrics = evaluate.finalize(trajs, variant)
        tracker.log_metrics({**metrics, "evaluate.seconds": time.perf_counter() - t0})
        tracker.log_artifact(Paths.default().eval(variant) / "table.md", "eval")
    return metrics
