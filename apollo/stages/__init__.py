"""The pipeline stages. Each is ``run(params, tracker, paths[, variant]) -> metrics``.

``dvc.yaml`` runs them through ``apollo stage <name>``; the Prefect flow runs the very same
functions (the rollout-like stages as mapped tasks) and observes them.
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Any

from apollo.config import load_params
from apollo.tracking import stage_run

log = logging.getLogger(__name__)

STAGES = ("suite", "bootstrap", "rollout", "guidance", "mask", "build", "train", "evaluate", "report")


def stage_module(name: str):
    if name not in STAGES:
        raise ValueError(f"unknown stage '{name}' (known: {', '.join(STAGES)})")
    return importlib.import_module(f"apollo.stages.{name}")


def run_stage(name: str, params: dict[str, Any] | None = None, *, variant: str | None = None,
              parent_run_id: str | None = None) -> dict[str, Any]:
    """Run one stage in this process inside its own MLflow (child) run."""
    params = params if params is not None else load_params()
    mod = stage_module(name)
    run_name = f"{name}@{variant}" if variant else name
    stage_params = {k: v for k, v in params.items() if k in (name, "seed", "model")}
    t0 = time.perf_counter()
    with stage_run(run_name, stage_params, parent_run_id) as tracker:
        kwargs = {"variant": variant} if variant else {}
        metrics = mod.run(params, tracker, **kwargs)
        tracker.log_metrics({f"{name}.seconds": time.perf_counter() - t0})
    log.info("stage %s done in %.1fs", run_name, time.perf_counter() - t0)
    return metrics
