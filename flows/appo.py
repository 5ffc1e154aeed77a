"""The APPO subflow: one Prefect task per iteration of an ``rl@<variant>-<seed>`` stage, then the
stage through DVC (the executor of record).

Iterations ``1 … n−1`` run as tasks of their own (:func:`appo_iteration`: the stage function
:func:`apollo.stages.rl.run` with ``iterations=k``; it resumes from the checkpoint of iteration
``k−1`` in ``data/checkpoints/<variant>/s<seed>/``, runs iteration ``k`` and checkpoints it), so the
Prefect UI shows each iteration with its reward, a failed iteration is retried from the last
checkpoint, and a killed flow resumes where it stopped. The last task runs ``dvc repro
--single-item rl@<variant>-<seed>``: the stage resumes after iteration ``n−1``, runs the last one,
writes ``data/models/<variant>/s<seed>`` and DVC records it in ``dvc.lock`` with the params it ran
with. Per-iteration metrics go to one MLflow run (``rl@<variant>-<seed>/iterations``, step =
iteration) under the pipeline's parent run; the DVC stage's own child run holds the summary and the
registered policy.

From a shell: ``python -m flows.appo --variant appo --seed 0``. Called from another flow it is a
subflow (``appo_rl(variant, seed)``).
"""

from __future__ import annotations

import os

os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "apollo")

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from prefect import flow, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
from prefect.logging import get_run_logger  # noqa: E402

from apollo.config import Paths, load_params, project_root  # noqa: E402
from tasks.dvc_tasks import workspace_lock  # noqa: E402
from tasks.stage_tasks import DEFAULT_TIMEOUT_S, stage_task  # noqa: E402


@task(name="appo-iteration", task_run_name="{variant}-s{seed}-iteration-{iteration}", cache_policy=NO_CACHE,
      retries=1, retry_delay_seconds=10, persist_result=True)
def appo_iteration(root: str, variant: str, seed: int, iteration: int, run_id: str | None) -> dict[str, Any]:
    """Iteration ``iteration`` of the cell (resumed from the previous one's checkpoint)."""
    from apollo.stages import rl
    from apollo.tracking import Run, _client

    logger = get_run_logger()
    params = {**load_params(Path(root) / "params.yaml"), "seed": int(seed)}
    tracker = Run(_client(Path(root)), run_id) if run_id else None
    summary = rl.run(params, tracker, Paths(Path(root)).cell(int(seed), "guided", variant), variant, "appo",
                     iterations=iteration)
    logger.info("%s s%d iteration %d: reward mean (last) %.3f", variant, seed, iteration,
                summary.get("appo.reward_last", float("nan")))
    return summary


@flow(name="apollo-appo", log_prints=True, persist_result=True)
def appo_rl(variant: str = "appo", seed: int = 0, root: str | None = None, wait_s: float = 0.0,
            stage_timeout_s: float = DEFAULT_TIMEOUT_S, parent_run_id: str | None = None,
            lock: bool = True) -> dict[str, Any]:
    """The cell ``rl@<variant>-<seed>``: a task per iteration, the last through DVC; returns the stage
    result. ``lock=False`` when the calling flow already holds the workspace lock (a subflow)."""
    from contextlib import nullcontext

    from apollo.rl.appo_loop import AppoConfig
    from apollo.stages.rl import check_variant
    from apollo.tracking import stage_run, tracking_uri

    logger = get_run_logger()
    root_path = Path(root).resolve() if root else project_root()
    params = load_params(root_path / "params.yaml")
    check_variant(params, variant, "appo")
    n = AppoConfig.from_params(params, variant).iterations
    parent = parent_run_id or os.environ.get("APOLLO_PARENT_RUN_ID")
    with workspace_lock(root_path, wait_s) if lock else nullcontext():
        with stage_run(f"rl@{variant}-{seed}/iterations", parent_run_id=parent, root=root_path,
                       tags={"variant": variant, "seed": seed, "dvc_stage": f"rl@{variant}-{seed}"}) as run:
            for k in range(1, n):
                appo_iteration(str(root_path), variant, seed, k, run.run_id)
        env = {"MLFLOW_TRACKING_URI": tracking_uri(root_path)}
        if parent:
            env["APOLLO_PARENT_RUN_ID"] = parent
        stage = f"rl@{variant}-{seed}"
        logger.info("%s: the last iteration and the DVC record", stage)
        return stage_task(stage, stage_timeout_s)(str(root_path), stage, env=env, timeout_s=stage_timeout_s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", default="appo")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(appo_rl(variant=args.variant, seed=args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
