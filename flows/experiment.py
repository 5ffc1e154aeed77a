"""The ablation flow: the experiment's (variant, seed) cells through DVC, then the table.

Entrypoint of the Prefect deployment ``ablation`` (``infra/prefect.yaml``), triggerable from the UI
or ``prefect deployment run apollo-ablation/ablation -p variants='["full","untrained"]' -p seeds='[0]'``.
Parameters:

* ``variants`` / ``seeds`` — the cells (default: every variant and seed of ``params.yaml:
  experiment``); only the stages those cells need run, DVC skips the finished ones (a killed run
  resumes);
* ``samples_per_task`` — k, evaluation samples per test task; a value other than
  ``evaluate.samples_per_task`` in ``params.yaml`` runs the selected stages as a DVC experiment
  (``dvc exp run -S evaluate.samples_per_task=k``), listed by ``dvc exp show``, the workspace
  untouched.

It is :func:`flows.pipeline.pipeline` with these parameters (one code path for ``make run``,
``make experiment`` and the deployment). From a shell: ``python -m flows.experiment --seeds 0``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from prefect import flow

from apollo.config import load_params, project_root
from flows.pipeline import pipeline


@flow(name="apollo-ablation", log_prints=True, persist_result=True)
def ablation(variants: list[str] | None = None, seeds: list[int] | None = None,
             samples_per_task: int | None = None, root: str | None = None, wait_s: float = 0.0) -> dict[str, Any]:
    """Run the selected experiment cells and return the run summary (cells, stages, results path)."""
    root_path = Path(root).resolve() if root else project_root()
    k_now = load_params(root_path / "params.yaml").get("evaluate", {}).get("samples_per_task")
    overlay = None
    if samples_per_task is not None:
        if int(samples_per_task) < 1:
            raise ValueError(f"samples_per_task must be at least 1, got {samples_per_task}")
        if int(samples_per_task) != k_now:
            overlay = {"evaluate.samples_per_task": int(samples_per_task)}
    return pipeline(params=overlay, root=str(root_path), wait_s=wait_s, variants=variants, seeds=seeds)


def main(argv: list[str] | None = None) -> int:
    from flows.pipeline import main as pipeline_main

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=None)
    ap.add_argument("--seeds", nargs="+", type=int, default=None)
    ap.add_argument("--samples-per-task", type=int, default=None)
    args, rest = ap.parse_known_args(argv)
    extra = []
    if args.variants:
        extra += ["--variants", *args.variants]
    if args.seeds is not None:
        extra += ["--seeds", *map(str, args.seeds)]
    if args.samples_per_task is not None:
        extra += ["--set", f"evaluate.samples_per_task={args.samples_per_task}"]
    return pipeline_main(rest + extra)


if __name__ == "__main__":
    sys.exit(main())
