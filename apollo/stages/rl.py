"""RL stage (``rl@<variant>-<seed>``): a policy trained by an RL method from the base policy →
``data/models/<variant>/s<seed>`` (evaluated by ``evaluate@<variant>-<seed>`` like any trained variant).

Methods: ``appo`` (:mod:`apollo.rl.appo_loop`; params ``appo``, a variant's overrides in
``appo.variants.<variant>``). The variant's row in ``experiment.variants`` is ``{policy: <method>}``
and the variant is listed in ``experiment.<method>`` (the ``rl`` matrix of ``dvc.yaml``) and in
``experiment.evaluated``. Per-iteration checkpoints go to ``data/checkpoints/<variant>/s<seed>/``
(outside the DVC output, which DVC clears before a run), so a killed stage resumes after its last
finished iteration. MLflow: one metric per iteration (``appo.reward.mean`` …, step = iteration),
the summary (``appo.reward_slope`` …), the policy registered as ``apollo-policy-<variant>``.

Run: ``python -m apollo stage rl --method appo --variant appo --seed 0`` (what ``dvc.yaml``
runs), through :func:`apollo.stages.run_stage` (params guard, MLflow child run, provenance tags).
"""

from __future__ import annotations

import logging
from typing import Any

from apollo.config import Paths

log = logging.getLogger(__name__)
METHODS = ("appo",)


def check_variant(params: dict[str, Any], variant: str, method: str) -> None:
    """The variant is a row ``{policy: <method>}`` of the table, listed in ``experiment.<method>``
    (the rl matrix) and ``experiment.evaluated``."""
    from apollo.experiment.variants import VariantTableError, check_table, experiment_section

    table = check_table(params)
    if variant not in table:
        raise VariantTableError(f"params.yaml: experiment.variants has no variant '{variant}'")
    if table[variant].policy != method:
        raise VariantTableError(f"params.yaml: experiment.variants.{variant}.policy is "
                                f"'{table[variant].policy}', not '{method}'")
    listed = experiment_section(params).get(method)
    want = sorted(v.name for v in table.values() if v.policy == method)
    if not isinstance(listed, list) or sorted(listed) != want:
        raise VariantTableError(f"params.yaml: experiment.{method} is {listed!r} but the variant table gives {want}: "
                                f"dvc.yaml's rl matrix reads experiment.{method}; list the same variants")


def run(params: dict[str, Any], tracker=None, paths: Paths | None = None, variant: str = "appo",
        method: str = "appo", iterations: int | None = None) -> dict[str, Any]:
    """Run (or resume) the method's iterations; ``iterations`` stops after that many (Prefect: one
    task per iteration). Returns the summary metrics."""
    from apollo.rl.appo_loop import AppoConfig, run_appo

    if method not in METHODS:
        raise ValueError(f"rl: unknown method {method!r} (known: {', '.join(METHODS)})")
    if "experiment" in params:
        check_variant(params, variant, method)
    paths = paths or Paths.default()
    cfg = AppoConfig.from_params(params, variant)
    seed = int(params.get("seed", 0))

    def on_metrics(it: int, m: dict[str, float]) -> None:
        if tracker is not None:
            tracker.log_metrics({f"appo.{k}": v for k, v in m.items()}, step=it)

    summary = run_appo(cfg, base_model=paths.base_model, out=paths.model(variant),
                       checkpoint_dir=paths.checkpoints(variant), seed=seed, variant=variant,
                       on_metrics=on_metrics, iterations=iterations)
    if tracker is not None:
        tracker.log_metrics(summary)
    if iterations is None or iterations >= cfg.iterations:
        from transformers import AutoModelForCausalLM

        AutoModelForCausalLM.from_pretrained(paths.model(variant))  # the policy must load
    return summary


def run_cell(method: str | None, variant: str | None, seed: int | None, *, iterations: int | None = None,
             parent_run_id: str | None = None, register: bool = True) -> dict[str, Any]:
    """The stage as ``dvc repro`` runs it: :func:`apollo.stages.run_stage` with this module.
    ``method`` None: the variant's ``policy`` in ``experiment.variants``; ``variant`` None: the method."""
    import sys

    from apollo.stages import run_stage

    if variant is None and method is None:
        raise ValueError("rl: give --variant (its method comes from params.yaml experiment.variants) or --method")
    if variant is None:
        variant = method
    if method is None:
        from apollo.config import load_params
        from apollo.experiment.variants import variant as variant_row

        method = variant_row(load_params(), variant).policy

    mod = sys.modules[__name__]

    class _Bound:  # run_stage calls module.run(params, tracker, paths=..., variant=...)
        @staticmethod
        def run(params, tracker=None, paths=None, variant=variant):
            metrics = mod.run(params, tracker, paths, variant, method, iterations)
            if register and tracker is not None and (iterations is None or metrics.get("appo.iterations", 0)
                                                      >= int(params["appo"]["iterations"])):
                from apollo.config import project_root
                from apollo.tracking import log_policy

                try:
                    log_policy(tracker, (paths or Paths(project_root())).model(variant), variant, seed=seed)
                except Exception as e:  # the registry is a view; the policy is the DVC output
                    log.warning("could not register the policy in MLflow: %s", e)
            return metrics

    return run_stage("rl", variant=variant, seed=seed, module=_Bound, parent_run_id=parent_run_id)
