"""MLflow helpers: one parent run per pipeline invocation, one child run per stage.

Child runs are created through ``MlflowClient`` with an explicit parent (the ``mlflow.parentRunId``
tag), never through MLflow's thread-local "active run", because Prefect tasks run in threads.

Whatever starts the stages, they land under one parent run named ``pipeline``:
* the Prefect flow creates it and passes its id in ``APOLLO_PARENT_RUN_ID`` to ``dvc repro``;
* a stage started by a plain ``dvc repro`` / ``dvc exp run`` finds the ``dvc`` process that started
  it (its pid and start time are the invocation id, tag ``apollo.invocation``) and joins the parent
  run of that invocation, creating it for the first stage;
* a stage run alone (``apollo stage X``) gets a parent run of its own.

Trained policies are logged with the ``transformers`` flavor and registered as
``apollo-policy-<variant>`` with the aliases ``newest`` (MLflow reserves ``latest``; the URI
``models:/apollo-policy-sft/latest`` resolves it too) and ``best`` (the version with the best weighted
final score of its evaluate stage).
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


def tracking_uri(root: Path | None = None) -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    db = Path(root or project_root()).resolve() / "mlflow" / "mlflow.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{db}"


def _client(root: Path | None = None):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri(root))


def experiment_id(client=None, name: str = EXPERIMENT, root: Path | None = None) -> str:
    client = client or _client(root)
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    uri = tracking_uri(root)
    base = Path(uri.removeprefix("sqlite:///")).parent if uri.startswith("sqlite:///") else Path(root or project_root()) / "mlflow"
    artifacts = (base / "artifacts").as_uri()
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

    def set_tags(self, tags: dict[str, Any]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        p = Path(path)
        if p.is_dir():
            self.client.log_artifacts(self.run_id, str(p), artifact_path)
        elif p.exists():
            self.client.log_artifact(self.run_id, str(p), artifact_path)


PARENT_NAME = "pipeline"


def start_parent_run(run_name: str = PARENT_NAME, params: dict[str, Any] | None = None, *,
                     root: Path | None = None, tags: dict[str, Any] | None = None) -> Run:
    client = _client(root)
    run = client.create_run(experiment_id(client, root=root), run_name=run_name,
                            tags={"apollo.kind": "pipeline", **(tags or {})})
    r = Run(client, run.info.run_id)
    if params:
        r.log_params(params)
    return r


def end_run(run: Run, status: str = "FINISHED") -> None:
    run.client.set_terminated(run.run_id, status)


def run_url(run: Run, root: Path | None = None) -> str:
    """A link to the run: the server's UI page, or the ``make ui`` address for a local store."""
    uri = tracking_uri(root)
    info = run.client.get_run(run.run_id).info
    base = uri.rstrip("/") if uri.startswith("http") else "http://127.0.0.1:5000"
    return f"{base}/#/experiments/{info.experiment_id}/runs/{run.run_id}"


def dvc_invocation() -> tuple[str, str] | None:
    """``(invocation id, command)`` of the ``dvc repro``/``dvc exp run`` process above this one, if any
    (the outermost, so ``dvc exp run --temp`` and its executor count as one)."""
    try:
        import psutil
    except ImportError:
        return None
    found = None
    try:
        for proc in psutil.Process().parents():
            cmd = proc.cmdline()
            names = [os.path.basename(c) for c in cmd[:3]]
            if any(n == "dvc" or n.startswith("dvc") for n in names) or cmd[1:3] == ["-m", "dvc"]:
                if {"repro", "exp", "exec-run"} & set(cmd):
                    found = (f"{proc.pid}-{int(proc.create_time() * 1000)}", " ".join(
                        c for c in cmd[cmd.index("-m") + 1 if "-m" in cmd else 0:])[:200])
    except (psutil.Error, ValueError):
        return found
    return found


def invocation_parent(root: Path | None = None) -> str | None:
    """The parent run id of this stage run (see the module docstring), or None when run alone."""
    parent = os.environ.get("APOLLO_PARENT_RUN_ID")
    if parent:
        return parent
    inv = dvc_invocation()
    if inv is None:
        return None
    key, cmd = inv
    client = _client(root)
    eid = experiment_id(client, root=root)
    found = client.search_runs([eid], filter_string=f"tags.`apollo.invocation` = '{key}'", max_results=1)
    if found:
        return found[0].info.run_id
    tags = {"apollo.invocation": key, "apollo.started_by": cmd}
    if os.environ.get("DVC_EXP_NAME"):
        tags["apollo.experiment"] = os.environ["DVC_EXP_NAME"]
    return start_parent_run(PARENT_NAME, root=root, tags=tags).run_id


@contextmanager
def stage_run(stage: str, params: dict[str, Any] | None = None, parent_run_id: str | None = None,
              tags: dict[str, Any] | None = None, root: Path | None = None) -> Iterator[Run]:
    """A child run for one stage under the invocation's parent run (see the module docstring)."""
    client = _client(root)
    parent = parent_run_id or invocation_parent(root)
    all_tags = {"apollo.stage": stage, "apollo.kind": "stage", **{k: str(v) for k, v in (tags or {}).items()}}
    if parent:
        all_tags["mlflow.parentRunId"] = parent
    run = client.create_run(experiment_id(client, root=root), run_name=stage, tags=all_tags)
    r = Run(client, run.info.run_id)
    if params:
        r.log_params(params)
    try:
        yield r
    except BaseException:
        client.set_terminated(r.run_id, "FAILED")
        raise
    client.set_terminated(r.run_id, "FINISHED")
    if parent and not parent_run_id and not os.environ.get("APOLLO_PARENT_RUN_ID"):
        client.set_terminated(parent, "FINISHED")  # a dvc-started invocation: done as of its last stage


@contextmanager
def system_metrics(run: Run, interval_s: float = 5.0) -> Iterator[None]:
    """MLflow's system metrics (CPU, memory, GPU when present) on ``run`` while the block runs."""
    try:
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        mon = SystemMetricsMonitor(run.run_id, sampling_interval=interval_s, samples_before_logging=1,
                                   tracking_uri=tracking_uri())
        mon.start()
    except Exception as e:  # psutil missing or an unsupported platform: train without them
        log.warning("system metrics off: %s", e)
        mon = None
    try:
        yield
    finally:
        if mon is not None:
            mon.finish()


def log_inputs(run: Run, inputs: dict[str, str], context: str = "input") -> None:
    """Log each ``path -> digest`` as an MLflow dataset input (source: the local path)."""
    import warnings

    from mlflow.data.dataset_source_registry import resolve_dataset_source  # the local-path source class
    from mlflow.data.meta_dataset import MetaDataset                        # is registered at run time
    from mlflow.entities import DatasetInput, InputTag

    items = []
    for path, digest in inputs.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "can be interpreted in multiple ways"
            source = resolve_dataset_source(str(Path(path).resolve()))
        ds = MetaDataset(source=source, name=path,
                         digest=(digest or "unknown")[:36])
        items.append(DatasetInput(dataset=ds._to_mlflow_entity(),
                                  tags=[InputTag(key="mlflow.data.context", value=context)]))
    if items:
        run.client.log_inputs(run.run_id, datasets=items)


NEWEST = "newest"  # MLflow reserves the alias "latest" (models:/<name>/latest is built in)


def policy_model_name(variant: str) -> str:
    return f"apollo-policy-{variant}"


def log_policy(run: Run, model_dir: Path, variant: str, seed: int | None = None) -> str | None:
    """Log the HF folder with the transformers flavor, register it, alias the version ``newest``
    (an experiment cell's version is tagged with its ``apollo.seed``)."""
    import mlflow
    import tokenizers
    import torch
    import transformers

    name = policy_model_name(variant)
    mlflow.set_tracking_uri(tracking_uri())
    # requirements given, not inferred: inference imports every installed torch extra (torchvision…)
    reqs = [f"torch=={torch.__version__.split('+')[0]}", f"transformers=={transformers.__version__}",
            f"tokenizers=={tokenizers.__version__}"]
    with mlflow.start_run(run_id=run.run_id):
        info = mlflow.transformers.log_model(transformers_model=str(model_dir), name="policy",
                                             task="text-generation", registered_model_name=name,
                                             pip_requirements=reqs, await_registration_for=60)
    version = str(info.registered_model_version or "")
    if version:
        run.client.set_registered_model_alias(name, NEWEST, version)
        run.client.set_model_version_tag(name, version, "apollo.variant", variant)
        if seed is not None:
            run.client.set_model_version_tag(name, version, "apollo.seed", str(seed))
        run.set_tags({"apollo.model_version": f"{name}/{version}"})
    return version or None


def update_best_alias(run: Run, variant: str, score: float, seed: int | None = None) -> str | None:
    """Record ``score`` on the ``newest`` version of ``apollo-policy-<variant>`` (with ``seed``: the
    newest version trained by that experiment cell) and point ``best`` at the version with the
    highest recorded score."""
    from mlflow.exceptions import MlflowException

    name = policy_model_name(variant)
    try:
        latest = run.client.get_model_version_by_alias(name, NEWEST)
    except MlflowException:
        return None  # this variant is not a registered model (base, reference)
    if seed is not None:  # the cells of one variant train in any order: score the version of this seed
        own = [mv for mv in run.client.search_model_versions(f"name='{name}'")
               if mv.tags.get("apollo.seed") == str(seed)]
        if not own:
            return None
        latest = max(own, key=lambda mv: int(mv.version))
    run.client.set_model_version_tag(name, latest.version, "apollo.eval.weighted_final", f"{score:.4f}")
    best = None
    for mv in run.client.search_model_versions(f"name='{name}'"):
        s = mv.tags.get("apollo.eval.weighted_final")
        if s is not None and (best is None or float(s) > best[0]):
            best = (float(s), mv.version)
    if best:
        run.client.set_registered_model_alias(name, "best", best[1])
        return str(best[1])
    return None
