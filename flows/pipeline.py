"""The pipeline flow: walk ``dvc.yaml``; DVC says whether a stage is stale, Prefect runs and
observes it, ``dvc commit`` records it. A second run with nothing changed runs no stage.

Entrypoint for deployments: ``flows/pipeline.py:pipeline``. From a shell: ``python -m flows.pipeline``
(``make run``). ``--force STAGE`` re-runs a stage even when DVC finds it up to date.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.logging import get_run_logger

from apollo.config import load_params, project_root
from apollo.tracking import end_run, start_parent_run, tracking_uri
from tasks.dvc_tasks import dvc_commit, dvc_status, stage_order
from tasks.stage_tasks import evaluate_flow, rollout_flow, run_stage_task, with_workers


def _split(stage: str) -> tuple[str, str | None]:
    name, _, variant = stage.partition("@")
    return name, (variant or None)


def _describe(status: dict[str, Any]) -> str:
    parts = []
    for entries in status.values():
        for e in entries if isinstance(entries, list) else [entries]:
            if isinstance(e, dict):
                for kind, changes in e.items():
                    if isinstance(changes, dict):
                        parts.append(f"{kind}: " + ", ".join(f"{k} {v}" for k, v in list(changes.items())[:3]))
                    else:
                        parts.append(str(kind))
            else:
                parts.append(str(e))
    return "; ".join(parts)[:300]


@flow(name="apollo-pipeline", log_prints=True)
def pipeline(force: list[str] | None = None, root: str | None = None) -> dict[str, Any]:
    """Run every stale stage of dvc.yaml in DAG order, tracked in one MLflow parent run."""
    logger = get_run_logger()
    root_path = Path(root).resolve() if root else project_root()
    os.environ["APOLLO_ROOT"] = str(root_path)
    os.chdir(root_path)
    params = load_params(root_path / "params.yaml")
    force = set(force or [])
    order = stage_order(root_path)
    logger.info("stages in order: %s", ", ".join(order))
    logger.info("MLflow: %s", tracking_uri())

    parent = None
    summary: dict[str, Any] = {"ran": [], "skipped": [], "seconds": {}}
    t_all = time.perf_counter()
    try:
        for stage in order:
            status = dvc_status(root_path, stage)
            if not status and stage not in force:
                logger.info("%-20s up to date, skipped", stage)
                summary["skipped"].append(stage)
                continue
            if parent is None:
                from prefect.runtime import flow_run

                parent = start_parent_run("pipeline", params, tags={"prefect.flow_run_id": flow_run.id or ""})
            logger.info("%-20s stale (%s): running", stage, _describe(status) or "forced")
            t0 = time.perf_counter()
            name, variant = _split(stage)
            if name == "rollout":
                with_workers(rollout_flow, params, "rollout")(params, parent.run_id)
            elif name == "evaluate":
                with_workers(evaluate_flow, params, "evaluate")(params, parent.run_id, variant)
            else:
                run_stage_task(name, params, parent.run_id, variant)
            dvc_commit(root_path, stage)
            summary["ran"].append(stage)
            summary["seconds"][stage] = round(time.perf_counter() - t0, 1)
            logger.info("%-20s done in %.1fs, committed to dvc.lock", stage, summary["seconds"][stage])
    except BaseException:
        if parent is not None:
            end_run(parent, "FAILED")
        raise
    if parent is not None:
        report = root_path / "data" / "report"
        parent.log_artifact(report / "results.md", "report")
        parent.log_artifact(report / "scores.png", "report")
        parent.log_metrics({"pipeline.seconds": time.perf_counter() - t_all,
                            "pipeline.stages_run": len(summary["ran"])})
        end_run(parent)
        summary["mlflow_run_id"] = parent.run_id
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--force", action="append", default=[], help="stage to re-run even if up to date")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    for noisy in ("httpx", "alembic", "mlflow", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    t0 = time.perf_counter()
    summary = pipeline(force=args.force)
    root = project_root()
    print()
    print(f"stages run: {', '.join(summary['ran']) or 'none (everything up to date)'}")
    if summary["ran"]:
        print("stage seconds: " + ", ".join(f"{k} {v}s" for k, v in summary["seconds"].items()))
    results = root / "data" / "report" / "results.md"
    if results.exists():
        print(results.read_text())
    print(f"results: {results}  plot: {root / 'data/report/scores.png'}")
    print(f"MLflow: {tracking_uri()}  (make ui)")
    print(f"pipeline finished in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
