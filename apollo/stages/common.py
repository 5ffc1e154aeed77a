"""Shared plumbing of the rollout-like stages: engines cached per process, parallel rollouts."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from apollo.agent.react import AgentConfig, run_episode
from apollo.engines.base import Engine, make_engine
from apollo.schema import Trajectory

log = logging.getLogger(__name__)
_ENGINES: dict[tuple, Engine] = {}
_LOCK = threading.Lock()


def get_engine(kind: str, model_path: str | Path, **kwargs: Any) -> Engine:
    """One engine per (kind, model, settings) per process: loading a model is the expensive part."""
    key = (kind, str(Path(model_path).resolve()) if kind != "openai" else str(model_path),
           tuple(sorted(kwargs.items())))
    with _LOCK:
        if key not in _ENGINES:
            log.info("loading %s engine for %s", kind, model_path)
            _ENGINES[key] = make_engine(kind, str(model_path), **kwargs)
        return _ENGINES[key]


@dataclass(frozen=True)
class RolloutJob:
    task_id: str
    sample: int
    seed: int
    split: str


def plan_jobs(params: dict[str, Any], section_name: str, split: str, seed_offset: int = 0) -> list[RolloutJob]:
    """(task, sample) jobs of a split, optionally limited to ``params[section].tasks``; unknown ids fail."""
    from apollo.config import section
    from apollo.env.tasks import list_tasks

    p = section(params, section_name)
    tasks = list_tasks(split=split)
    if p.get("tasks"):
        wanted = set(p["tasks"])
        unknown = sorted(wanted - {t.task_id for t in tasks})
        if unknown:
            raise ValueError(f"params.yaml: {section_name}.tasks: no {split} task {unknown}")
        tasks = [t for t in tasks if t.task_id in wanted]
    n = int(p.get("samples_per_task", 1))
    seed = int(params.get("seed", 0)) + seed_offset
    return [RolloutJob(t.task_id, s, seed * 100_000 + i * 100 + s, split)
            for i, t in enumerate(tasks) for s in range(n)]


def agent_config(p: dict[str, Any]) -> AgentConfig:
    return AgentConfig(
        max_steps=p.get("max_steps"),
        max_wall_s=p.get("max_wall_s"),
        context_tokens=int(p.get("context_tokens", 4096)),
        command_timeout_s=float(p.get("command_timeout_s", 20.0)),
        max_output_chars=int(p.get("max_output_chars", 1500)),
    )


def run_jobs(jobs: list[RolloutJob], one: Callable[[RolloutJob], Trajectory], workers: int,
             desc: str) -> list[Trajectory]:
    """Run rollouts on a thread pool (model calls release the GIL; tool calls wait on processes)."""
    out: list[Trajectory | None] = [None] * len(jobs)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as ex, tqdm(total=len(jobs), desc=desc) as bar:
        futs = {ex.submit(one, j): i for i, j in enumerate(jobs)}
        for fut in as_completed(futs):
            t = fut.result()
            out[futs[fut]] = t
            bar.set_postfix(last=f"{t.task_id}:{t.final_score:.0f}")
            bar.update(1)
    return [t for t in out if t is not None]


def episode(task: Any, engine: Engine, job: RolloutJob, cfg: AgentConfig, guidance: Any = None,
            meta: dict[str, Any] | None = None) -> Trajectory:
    return run_episode(task, engine, guidance=guidance, config=cfg, seed=job.seed,
                       trajectory_id=f"{job.task_id}-s{job.sample}-{uuid.uuid4().hex[:8]}", meta=meta)
