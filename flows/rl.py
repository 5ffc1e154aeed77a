"""The RL subflow: one ``rl@<variant>-<seed>`` cell as Prefect tasks, each a segment of training
that resumes from the previous one's checkpoint, then the stage through DVC (the executor of record).

The segments are :func:`apollo.stages.rl.resume_points`: APPO's iterations ``1 … n−1``, or every
``sao.agent.updates_per_task`` updates of SAO, SAO-guided and the GRPO baselines. Each task
(:func:`rl_segment`) runs the stage function :func:`apollo.stages.rl.run` with ``iterations=k``:
it resumes from ``data/checkpoints/<variant>/s<seed>/`` (APPO: the checkpoint of iteration ``k−1``;
SAO: the learner state and the persisted rollout buffer), trains up to ``k`` and checkpoints. So the
Prefect UI shows the cell's progress segment by segment with its reward, a failed segment is retried
from the last checkpoint (one retry), and a killed flow resumes where it stopped. The last task runs
``dvc repro --single-item rl@<variant>-<seed>``: the stage resumes after the last segment, finishes,
writes ``data/models/<variant>/s<seed>`` and DVC records it in ``dvc.lock`` with the params it ran
with (restored from DVC's run cache instead, the segments' checkpoints are removed). Per-segment metrics go to one MLflow run (``rl@<variant>-<seed>/segments``; APPO logs per
iteration, SAO per update) under the pipeline's parent run; the DVC stage's own child run holds the
summary and the registered policy.

The pipeline flow (``flows/pipeline.py``) calls :func:`rl_cell` as a subflow for every stale
``rl@…`` stage (an up-to-date one is left to ``dvc repro``, which skips it). From a shell:
``python -m flows.rl --variant sao --seed 0``.
"""

from __future__ import annotations

import os

os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "apollo")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from prefect import flow, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
from prefect.logging import get_run_logger  # noqa: E402

from apollo.config import Paths, load_params, project_root  # noqa: E402
from tasks.dvc_tasks import workspace_lock  # noqa: E402
from tasks.stage_tasks import DEFAULT_TIMEOUT_S, stage_task  # noqa: E402


def method_of(params: dict[str, Any], variant: str) -> str:
    """The variant's RL method (its ``policy`` in ``experiment.variants``), checked against the table."""
    from apollo.experiment.variants import variant as variant_row
    from apollo.stages.rl import check_variant

    method = variant_row(params, variant).policy
    check_variant(params, variant, method)
    return method


@task(name="rl-segment", task_run_name="{variant}-s{seed}-to-{upto}", cache_policy=NO_CACHE,
      retries=1, retry_delay_seconds=10, persist_result=True)
def rl_segment(root: str, variant: str, seed: int, upto: int, run_id: str | None) -> dict[str, Any]:
    """Train the cell up to iteration / update ``upto`` (resumed from its checkpoint)."""
    from apollo.stages import rl
    from apollo.tracking import Run, _client

    logger = get_run_logger()
    params = {**load_params(Path(root) / "params.yaml"), "seed": int(seed)}
    method = method_of(params, variant)
    tracker = Run(_client(Path(root)), run_id) if run_id else None
    summary = rl.run(params, tracker, Paths(Path(root)).cell(int(seed), "guided", variant), variant, method,
                     iterations=upto)
    if method == "appo":
        logger.info("%s s%d iteration %d: reward mean (last) %.3f", variant, seed, upto,
                    summary.get("appo.reward_last", float("nan")))
    else:
        logger.info("%s s%d: %d updates, reward (last third) %.3f", variant, seed, int(summary["sao.steps"]),
                    summary.get("sao.reward_last_third", float("nan")))
    return summary


@flow(name="apollo-rl", log_prints=True, persist_result=True)
def rl_cell(variant: str = "appo", seed: int = 0, root: str | None = None, wait_s: float = 0.0,
            stage_timeout_s: float = DEFAULT_TIMEOUT_S, parent_run_id: str | None = None,
            lock: bool = True, force: bool = False) -> dict[str, Any]:
    """The cell ``rl@<variant>-<seed>``: a task per segment, the last through DVC; returns the stage
    result. ``lock=False`` when the calling flow already holds the workspace lock (a subflow)."""
    from contextlib import nullcontext

    from apollo.stages.rl import resume_points
    from apollo.tracking import stage_run, tracking_uri

    logger = get_run_logger()
    root_path = Path(root).resolve() if root else project_root()
    params = load_params(root_path / "params.yaml")
    method = method_of(params, variant)
    points = resume_points({**params, "seed": int(seed)}, variant, method)
    parent = parent_run_id or os.environ.get("APOLLO_PARENT_RUN_ID")
    stage = f"rl@{variant}-{seed}"
    t0 = time.perf_counter()
    with workspace_lock(root_path, wait_s) if lock else nullcontext():
        logger.info("%s (%s): %d segment(s) as tasks, then the last through DVC", stage, method, len(points))
        with stage_run(f"{stage}/segments", parent_run_id=parent, root=root_path,
                       tags={"variant": variant, "seed": seed, "method": method, "dvc_stage": stage}) as run:
            for k in points:
                rl_segment(str(root_path), variant, seed, k, run.run_id)
        env = {"MLFLOW_TRACKING_URI": tracking_uri(root_path)}
        if parent:
            env["APOLLO_PARENT_RUN_ID"] = parent
        logger.info("%s: the last segment and the DVC record", stage)
        res = stage_task(stage, stage_timeout_s)(str(root_path), stage, force=force, env=env,
                                                 timeout_s=stage_timeout_s)
        if res["status"] != "ran":  # restored from the run cache: the segments' checkpoints are moot
            import shutil

            shutil.rmtree(Paths(root_path).cell(int(seed), "guided", variant).checkpoints(variant),
                          ignore_errors=True)
        # the cell's time: every segment and the DVC step (the pipeline's "stage seconds")
        return {**res, "seconds": round(time.perf_counter() - t0, 1), "segments": len(points)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", default="appo")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(rl_cell(variant=args.variant, seed=args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
