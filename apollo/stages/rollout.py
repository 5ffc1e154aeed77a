"""Rollout stage: the base policy works the train tasks while the simulated annotator watches.

Writes ``data/rollouts/train.jsonl`` (trajectory records with delivered guidance, token traces).
The guidance store (``data/store/guidance.sqlite``) is the live channel, not an artifact; the
guidance stage exports what it delivered. ``rollout.guidance.mode`` picks how the workers reach it
(``store``: directly, the default; ``service``: through the guidance service started in-process;
``remote``: through a separately started ``apollo serve``), see :mod:`apollo.guidance.runtime`.
In an experiment cell (``--rollouts guided|unguided --seed S``) it writes
``data/rollouts/<guided|unguided>/s<S>/``; the unguided rollouts (the ``no_human`` ablation) run the
same jobs and seeds with no annotator.

The episodes run on the async runtime (:mod:`apollo.runtime`), ``rollout.workers`` in flight,
against the engine of ``rollout.engine`` (``vllm_server``: a ``vllm serve`` started for the stage,
or ``rollout.server.url``). A trajectory that crashed (``finish_reason: error``) is recorded in
``data/rollouts/crashed.jsonl`` and kept out of ``train.jsonl`` (so out of training), counted in
``rollout.crashed``; the stage fails when every trajectory crashed, when the engine cannot be
reached, or when the simulated annotator process stops while rollouts run.
"""

from __future__ import annotations

import logging
from statistics import mean
from typing import Any

import multiprocessing as mp
from apollo.config import Paths, section
from apollo.guidance.annotator import AnnotatorConfig
from apollo.guidance.runtime import current_channel, stage_session
from apollo.schema import Trajectory, write_trajectories
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

log = logging.getLogger(__name__)


def plan(params: dict[str, Any]) -> list[RolloutJob]:
    return plan_jobs(params, "rollout", "train", seed_offset=0)


def _engine(job: RolloutJob, task: Any, p: dict[str, Any], shared: Any) -> Any:
    if p.get("engine") == "scripted":  # expert demonstrations from the noisy scripted agent
        from apollo.engines.scripted import ScriptedEngine

        return ScriptedEngine(task, noise=float(p.get("noise", 0.3)), seed=job.seed)
    return shared


def run_one(job: RolloutJob, params: dict[str, Any], paths: Paths | None = None) -> Trajectory:
    """One trajectory, blocking: what a lone worker (a Prefect task per trajectory) runs."""
    from apollo.env.tasks import load_task

    paths = paths or Paths.default()
    p = section(params, "rollout")
    task = load_task(job.task_id, view_hint=bool(p.get("view_hint", False)))
    shared = None if p.get("engine") == "scripted" else current_engine(p, p.get("model") or paths.base_model)
    return episode(task, _engine(job, task, p, shared), job, agent_config(p),
                   guidance=current_channel(paths.guidance_store), meta={"stage": "rollout", "sample": job.sample})


async def arun_one(job: RolloutJob, params: dict[str, Any], paths: Paths, engine: Any, channel: Any) -> Trajectory:
    from apollo.env.tasks import load_task

    p = section(params, "rollout")
    task = load_task(job.task_id, view_hint=bool(p.get("view_hint", False)))
    return await aepisode(task, _engine(job, task, p, engine), job, agent_config(p), guidance=channel,
                          meta={"stage": "rollout", "sample": job.sample})


def summarize(trajs: list[Trajectory], crashed: list[Trajectory] | None = None) -> dict[str, float]:
    steps = [s for t in trajs for s in t.steps]
    n_guid = sum(len(s.guidance) for s in steps)
    return {
        "rollout.trajectories": len(trajs),
        "rollout.crashed": len(crashed or []),
        "rollout.final_mean": mean(t.final_score or 0 for t in trajs) if trajs else 0.0,
        "rollout.best_mean": mean(t.best_score or 0 for t in trajs) if trajs else 0.0,
        "rollout.steps_mean": mean(len(t.steps) for t in trajs) if trajs else 0.0,
        "rollout.invalid_action_rate": (sum(not s.action.valid for s in steps) / len(steps)) if steps else 0.0,
        "rollout.guidance_delivered": n_guid,
        "rollout.guided_trajectories": sum(any(s.guidance for s in t.steps) for t in trajs),
        "rollout.gen_time_s": sum(s.gen_time_s for s in steps),
        "rollout.tool_time_s": sum(s.tool_time_s for s in steps),
    }


def finalize(trajs: list[Trajectory], paths: Paths | None = None, tracker=None) -> dict[str, float]:
    """Check and write the trajectories: crashed ones to ``crashed.jsonl`` (never trained on)."""
    from apollo.quality import check_trajectories

    paths = paths or Paths.default()
    trajs = sorted(trajs, key=lambda t: t.trajectory_id)
    crashed = [t for t in trajs if t.finish_reason == "error"]
    ok = [t for t in trajs if t.finish_reason != "error"]
    for t in crashed:
        log.warning("trajectory %s crashed (%s): recorded in crashed.jsonl, excluded from training",
                    t.trajectory_id, t.meta.get("error", "?"))
    if trajs and not ok:
        raise RuntimeError(f"rollout: all {len(trajs)} trajectories crashed, e.g. {crashed[0].trajectory_id}: "
                           f"{crashed[0].meta.get('error', '?')}")
    check_trajectories(trajs, paths.quality / "trajectories.json", tracker)  # before anything is written
    write_trajectories(paths.rollouts / "crashed.jsonl", crashed)
    write_trajectories(paths.rollouts / "train.jsonl", ok)
    return summarize(ok, crashed)


def annotator(params: dict[str, Any], paths: Paths | None = None):
    """The stage's guidance session (channel + simulated annotator); run_one uses it inside."""
    paths = paths or Paths.default()
    cfg = AnnotatorConfig.from_params(section(params, "rollout").get("annotator"))
    return stage_session(section(params, "rollout"), paths.guidance_store, cfg)


class ProcessWatch:
    """The child processes a guidance session started (the simulated annotator): each must stay
    alive while rollouts run, else guidance silently stops and the stage must fail."""

    def __init__(self, before: set[Any]):
        self.procs = [c for c in mp.active_children() if c not in before]

    def check(self) -> None:
        for c in self.procs:
            if not c.is_alive():
                raise RuntimeError(
                    f"rollout: the {c.name} process (pid {c.pid}) stopped with exit code {c.exitcode} while "
                    f"rollouts ran, so guidance stopped; see its error above and rerun the stage")


def run(params: dict[str, Any], tracker=None, paths: Paths | None = None) -> dict[str, float]:
    """The whole stage in one process (what ``dvc repro`` runs)."""
    paths = paths or Paths.default()
    p = section(params, "rollout")
    jobs = plan(params)
    workers = int(p.get("workers", 2))
    guided = not (paths.seed is not None and paths.rollouts_kind == "unguided")
    with engine_session(p, p.get("model") or paths.base_model) as engine:
        if guided:
            before = set(mp.active_children())
            with annotator(params, paths) as channel:
                watch = ProcessWatch(before)

                async def one(job: RolloutJob) -> Trajectory:
                    return await arun_one(job, params, paths, engine, channel)

                label = "rollout" if paths.seed is None else f"rollout[guided s{paths.seed}]"
                trajs = run_jobs(jobs, one, workers, label, check=watch.check, engine=engine)
        else:  # the no_human ablation's rollouts: the same jobs and seeds, no annotator at all
            async def one_unguided(job: RolloutJob) -> Trajectory:
                return await arun_one(job, params, paths, engine, None)

            trajs = run_jobs(jobs, one_unguided, workers, f"rollout[unguided s{paths.seed}]", engine=engine)
    metrics = finalize(trajs, paths, tracker)
    if tracker is not None:
        tracker.log_metrics(metrics)
    return metrics
