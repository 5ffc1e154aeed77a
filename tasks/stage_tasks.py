"""Prefect tasks that wrap a DVC stage run: ``dvc repro --single-item <stage>`` (or one
``dvc exp run`` for a params overlay), with timeouts, retries where a re-run is safe and useful,
persisted results, and the stage's own log lines (``apollo.*``) forwarded into the task's log.

The stage code is the one ``dvc repro`` runs (``python -m apollo stage <name>``): there is no
second, Prefect-only path through the stages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from tasks.dvc_tasks import exp_metrics, exp_run, repro_stage

# Stages whose failure is usually transient (a model server, a task script, the annotator); the
# others are deterministic, so a retry would only repeat the failure.
RETRY_STAGES = ("rollout", "evaluate", "evaluate_untrained", "reference", "guidance")
DEFAULT_TIMEOUT_S = 4 * 3600.0


def _forward(logger):
    def on_line(line: str) -> None:
        logger.info("%s", line)

    return on_line


@task(name="dvc-repro", task_run_name="{stage}", cache_policy=NO_CACHE, persist_result=True)
def repro_task(root: str, stage: str, force: bool = False, env: dict[str, str] | None = None,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """One stage through DVC; returns ``{stage, status: ran|restored|skipped, seconds}``."""
    logger = get_run_logger()
    res = repro_stage(Path(root), stage, force=force, env=env, on_line=_forward(logger), timeout_s=timeout_s)
    logger.info("%s: %s in %.1fs", stage, {"ran": "ran", "restored": "restored from DVC's run cache",
                                          "skipped": "up to date, skipped"}[res.status], res.seconds)
    return res.to_json()


def stage_task(stage: str, timeout_s: float = DEFAULT_TIMEOUT_S):
    """``repro_task`` with the stage's timeout and retry policy."""
    retries = 1 if stage.split("@", 1)[0] in RETRY_STAGES else 0
    return repro_task.with_options(timeout_seconds=timeout_s + 60, retries=retries, retry_delay_seconds=10)


@task(name="dvc-exp-run", task_run_name="experiment-{name}", cache_policy=NO_CACHE, persist_result=True)
def experiment_task(root: str, overlay: dict[str, Any], name: str, env: dict[str, str] | None = None,
                    timeout_s: float = DEFAULT_TIMEOUT_S, targets: list[str] | None = None) -> dict[str, Any]:
    """The pipeline with a params overlay as one DVC experiment; returns its metrics."""
    logger = get_run_logger()
    res = exp_run(Path(root), overlay, name, env=env, on_line=_forward(logger), timeout_s=timeout_s, targets=targets)
    metrics = exp_metrics(Path(root), name)
    logger.info("experiment %s done in %.1fs (dvc exp show lists it)", name, res.seconds)
    return {**res.to_json(), "experiment": name, "metrics": metrics}
