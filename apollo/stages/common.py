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


def clear_engines() -> None:
    with _LOCK:
        _ENGINES.clear()


@dataclass(frozen=True)
class RolloutJob:
    task_id: str
    sample: int
    seed: int
    split: str


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
