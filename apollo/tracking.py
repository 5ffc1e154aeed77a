"""MLflow helpers: one parent run per pipeline run, one child run per stage.

Child runs are created through ``MlflowClient`` with an explicit parent (the ``mlflow.parentRunId``
tag), never through MLflow's thread-local "active run", because Prefect tasks run in threads.
The parent run id travels in ``APOLLO_PARENT_RUN_ID`` so a stage started by ``dvc repro`` from the
flow, or in-process, joins the same parent; a stage run alone gets a run of its own.
"""

from __future__ import annotations

import logging
import math
import os
from contextlib import contextmanager
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from apollo.config import flatten, project_root

log = logging.getLogger(__name__)
EXPERIMENT = os.environ.get("APOLLO_EXPERIMENT", "apollo")


def tracking_uri() -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    db = project_root() / "mlflow" / "mlflow.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{db}"


def _client():
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri())


def experiment_id(client=None, name: str = EXPERIMENT) -> str:
    client = client or _client()
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    artifacts = (project_root() / "mlflow" / "artifacts").as_uri()
    try:
        return client.create_experiment(name, artifact_location=artifacts)
    except Exception:  # created concurrently
        return client.get_experiment_by_name(name).experiment_id


class Run:
    """A thin handle on one MLflow run (safe to use from any thread)."""

    def __init__(self, client, run_id: str):
        self.client, self.run_id = client, run_id

    def log_params(self, params: dict[str, Any], prefix: str = "") -> None:
        from mlflow.entities import Param

        flat = flatten(params, prefix)
        items = [Param(k[:250], str(v)[:6000]) for k, v in flat.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i : i + 100])

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        import time

        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        items = [
            Metric(k[:250], float(v), ts, step or 0)
            for k, v in flatten(metrics).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
        ]
        for i in range(0, len(items), 500):
            self.client.log_batch(self.run_id, metrics=items[i : i + 500])

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        p = Path(path)
        if p.is_dir():
            self.client.log_artifacts(self.run_id, str(p), artifact_path)
        elif p.exists():
            self.client.log_artifact(self.run_id, str(p), artifact_path)


def start_parent_run(run_name: str, params: dict[str, Any], tags: dict[str, Any] | None = None) -> Run:
    client = _client()
    run = client.create_run(experiment_id(client), run_name=run_name,
                            tags={"apollo.kind": "pipeline", **(tags or {})})
    r = Run(client, run.info.run_id)
    r.log_params(params)
    return r


def end_run(run: Run, status: str = "FINISHED") -> None:
    run.client.set_terminated(run.run_id, status)


@contextmanager
def stage_run(stage: str, params: dict[str, Any] | None = None,
              parent_run_id: str | None = None) -> Iterator[Run]:
    """A child run for one stage (or a standalone run when no parent is known)."""
    client = _client()
    parent = parent_run_id or os.environ.get("APOLLO_PARENT_RUN_ID")
    tags = {"apollo.stage": stage, "apollo.kind": "stage"}
    if parent:
        tags["mlflow.parentRunId"] = parent
    run = client.create_run(experiment_id(client), run_name=stage, tags=tags)
    r = Run(client, run.info.run_id)
    if params:
        r.log_params(params)
    try:
        yield r
    except BaseException:
        client.set_terminated(r.run_id, "FAILED")
        raise
    client.set_terminated(r.run_id, "FINISHED")
