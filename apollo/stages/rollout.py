"""Rollout stage: the base policy works the train tasks while the simulated annotator watches.

Writes ``data/rollouts/train.jsonl`` (trajectory records with delivered guidance, token traces).
The guidance store (``data/store/guidance.sqlite``) is the live channel, not an artifact; the
guidance stage exports what it delivered. ``rollout.guidance.mode`` picks how the workers reach it
(``store``: directly, the default; ``service``: through the guidance service started in-process;
``remote``: through a separately started ``apollo serve``), see :mod:`apollo.guidance.runtime`.
"""

from __future__ import annotations

import logging
from statistics import mean
from typing import Any

from apollo.config import Paths, section
from apollo.guidance.annotator import AnnotatorConfig
from apollo.guidance.runtime import current_channel, stage_session
from apollo.schema import Trajectory, write_trajectories
from apollo.stages.common import RolloutJob, agent_config, plan_jobs, episode, get_engine, run_jobs

log = logging.getLogger(__name__)


def plan(params: dict[str, Any]) -> list[RolloutJob]:
    return plan_jobs(params, "rollout", "train", seed_offset=0)


def engine_for(params: dict[str, Any], model_path, *, section_name: str):
    p = section(params, section_name)
    kind = p.get("engine", "hf")
    kw: dict[str, Any] = {
        "temperature": float(p.get("temperature", 0.7)),
        "max_new_tokens": int(p.get("max_new_tokens", 192)),
    }
    if kind == "openai":
        kw["base_url"] = p.get("base_url") or None
    return get_engine(kind, model_path, **kw)


def run_one(job: RolloutJob, params: dict[str, Any], paths: Paths | None = None) -> Trajectory:
    from apollo.env.tasks import load_task

    paths = paths or Paths.default()
    p = section(params, "rollout")
    task = load_task(job.task_id)
    if p.get("engine") == "scripted":  # expert demonstrations from the noisy scripted agent
        from apollo.engines.scripted import ScriptedEngine

        engine = ScriptedEngine(task, noise=float(p.get("noise", 0.3)), seed=job.seed)
    else:
        engine = engine_for(params, p.get("model") or paths.base_model, section_name="rollout")
    return episode(task, engine, job, agent_config(p), guidance=current_channel(paths.guidance_store),
                   meta={"stage": "rollout", "sample": job.sample})


def summarize(trajs: list[Trajectory]) -> dict[str, float]:
    steps = [s for t in trajs for s in t.steps]
    n_guid = sum(len(s.guidance) for s in steps)
    return {
        "rollout.trajectories": len(trajs),
        "rollout.final_mean": mean(t.final_score or 0 for t in trajs) if trajs else 0.0,
        "rollout.best_mean": mean(t.best_score or 0 for t in trajs) if trajs else 0.0,
        "rollout.steps_mean": mean(len(t.steps) for t in trajs) if trajs else 0.0,
        "rollout.invalid_action_rate": (sum(not s.action.valid for s in steps) / len(steps)) if steps else 0.0,
        "rollout.guidance_delivered": n_guid,
        "rollout.guided_trajectories": sum(any(s.guidance for s in t.steps) for t in trajs),
    }


def finalize(trajs: list[Trajectory], paths: Paths | None = None, tracker=None) -> dict[str, float]:
    from apollo.quality import check_trajectories

    paths = paths or Paths.default()
    trajs = sorted(trajs, key=lambda t: t.trajectory_id)
    check_trajectories(trajs, paths.quality / "trajectories.json", tracker)  # before anything is written
    write_trajectories(paths.rollouts / "train.jsonl", trajs)
    return summarize(trajs)


def annotator(params: dict[str, Any], paths: Paths | None = None):
    """The stage's guidance session (channel + simulated annotator); run_one uses it inside."""
    paths = paths or Paths.default()
    a = section(params, "rollout").get("annotator", {}) or {}
    cfg = AnnotatorConfig(
        delay_s=float(a.get("delay_s", 1.0)),
        poll_s=float(a.get("poll_s", 0.2)),
        max_per_trajectory=int(a.get("max_per_trajectory", 3)),
    )
    return stage_session(section(params, "rollout"), paths.guidance_store, cfg)


def run(params: dict[str, Any], tracker=None, paths: Paths | None = None) -> dict[str, float]:
    """The whole stage in one process (what ``dvc repro`` runs)."""
    paths = paths or Paths.default()
    jobs = plan(params)
    workers = int(section(params, "rollout").get("workers", 2))
    with annotator(params, paths):
        trajs = run_jobs(jobs, lambda j: run_one(j, params, paths), workers, "rollout")
    metrics = finalize(trajs, paths, tracker)
    if tracker is not None:
        tracker.log_metrics(metrics)
    return metrics
