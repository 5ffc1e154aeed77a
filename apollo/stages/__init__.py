"""The pipeline stages. Each is ``run(params, tracker, paths[, variant]) -> metrics``.

``dvc.yaml`` runs them through ``apollo stage <name>``, whoever starts DVC (the Prefect flow,
``dvc repro``, ``dvc exp run``). :func:`run_stage` wraps every stage the same way: params read
once at the start and guarded (:mod:`apollo.stages.provenance`), an MLflow child run under the
invocation's parent with the effective params of the stage and of every upstream stage, tags
``git_commit``, ``dvc_lock_hash``, ``variant``, ``seed``, the data inputs (``log_input``, DVC
digests), system metrics while training, and the trained policy logged and registered.
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from typing import Any

from apollo.config import load_params
from apollo.tracking import stage_run

log = logging.getLogger(__name__)

STAGES = ("suite", "bootstrap", "rollout", "guidance", "mask", "build", "train", "evaluate", "rl", "experiment")
CELL_PATH_STAGES = ("rollout", "guidance", "mask", "build")  # their cell is in ``paths`` (no variant argument)


def stage_module(name: str):
    if name not in STAGES:
        raise ValueError(f"unknown stage '{name}' (known: {', '.join(STAGES)})")
    return importlib.import_module(f"apollo.stages.{name}")


def run_stage(name: str, params: dict[str, Any] | None = None, *, variant: str | None = None,
              parent_run_id: str | None = None, module: Any = None, seed: int | None = None,
              rollouts: str | None = None) -> dict[str, Any]:
    """Run one stage in this process inside its own MLflow (child) run. ``module`` (with a
    ``run(params, tracker[, variant])``) replaces ``apollo.stages.<name>``: a stage of another
    ``dvc.yaml`` gets the same provenance.

    ``seed`` makes it a stage of one experiment cell (:mod:`apollo.experiment.variants`): the
    top-level ``seed`` param becomes the cell's seed (rollout sampling, training order, evaluation
    sampling), and the stage reads and writes the cell's paths (:meth:`apollo.config.Paths.cell`);
    ``rollouts`` (guided | unguided) names the rollouts of a rollout/guidance/mask stage."""
    from apollo.config import project_root
    from apollo.stages import provenance as prov
    from apollo.tracking import log_inputs, log_policy, system_metrics, update_best_alias

    mod = module or stage_module(name)
    root = project_root()
    cell = f"{variant or rollouts}-{seed}" if seed is not None else variant
    run_name = f"{name}@{cell}" if cell else name
    info = prov.stage_info(root, os.environ.get("DVC_STAGE") or run_name)
    guard = prov.ParamsGuard(root / "params.yaml", info.param_keys) if info and params is None else None
    params = params if params is not None else load_params()
    paths = None
    if seed is not None:
        from apollo.config import Paths

        params = {**params, "seed": int(seed)}
        paths = Paths(root).cell(int(seed), rollouts or "guided", variant)
    if info:  # the params this stage and its upstream stages ran with, as dvc.yaml declares them
        logged = prov.select(params, sorted(set(info.param_keys) | set(info.upstream_param_keys)))
    else:
        logged = {k: v for k, v in params.items() if k in (name, "seed", "model")}
    tags = {"git_commit": prov.git_commit(root), "dvc_lock_hash": prov.lock_hash(root),
            "variant": variant or rollouts or "", "seed": params.get("seed", ""), "dvc_stage": info.address if info else run_name}
    if info and info.upstream:
        tags["upstream_stages"] = ",".join(info.upstream)
    if os.environ.get("DVC_EXP_NAME"):
        tags["dvc_experiment"] = os.environ["DVC_EXP_NAME"]
    t0 = time.perf_counter()
    with stage_run(run_name, logged, parent_run_id, tags=tags) as tracker:
        if info and info.data_deps:
            digests = prov.out_hashes(root)
            log_inputs(tracker, {d: digests.get(d, "") for d in info.data_deps})
        kwargs: dict[str, Any] = {"variant": variant} if variant and name not in CELL_PATH_STAGES else {}
        if paths is not None:
            kwargs["paths"] = paths
        if name == "train":
            with system_metrics(tracker):
                metrics = mod.run(params, tracker, **kwargs)
        else:
            metrics = mod.run(params, tracker, **kwargs)
        tracker.log_metrics({f"{name}.seconds": time.perf_counter() - t0})
        if guard is not None:
            guard.check()  # before DVC records anything: the outputs match the params it will record
        if name == "train":
            from apollo.config import Paths

            log_policy(tracker, (paths or Paths(root)).model(variant or "sft"), variant or "sft", seed=seed)
        elif name == "evaluate" and variant and "eval.weighted_final" in metrics:
            update_best_alias(tracker, variant, float(metrics["eval.weighted_final"]), seed=seed)
    log.info("stage %s done in %.1fs", run_name, time.perf_counter() - t0)
    return metrics
