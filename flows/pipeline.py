"""The pipeline flow: one Prefect task per stage of ``dvc.yaml``, each running the stage through
DVC (``dvc repro --single-item <stage>``), so ``make run``, a Prefect UI trigger and ``dvc repro``
run the same code and DVC records the provenance (params read when the stage starts, run cache
used, ``dvc.lock`` written by DVC).

Parameters (also what a UI trigger fills in):
* ``force`` — stages to re-run although DVC finds them up to date (``dvc repro --force``); a name
  is a stage (``rollout``, ``evaluate@base``) or a foreach group (``evaluate``: all of them). Only
  the named stages are forced; a downstream stage re-runs when DVC finds it stale, i.e. when the
  forced stage's outputs changed. Unknown names fail before anything runs.
* ``params`` — a params overlay ``{"rollout.temperature": 0.5, …}``: the run becomes a DVC
  experiment (``dvc exp run --temp -S key=value …``) listed by ``dvc exp show``; the workspace's
  ``params.yaml`` and ``dvc.lock`` stay untouched.
* ``wait_s`` — one pipeline run per workspace: a second run waits this long, then is refused.
* ``variants``, ``seeds`` — which experiment cells (``params.yaml: experiment``) to run: only the
  stages those cells need (their evaluation and everything upstream, plus ``reference``). With every
  cell selected the ``experiment`` stage aggregates them through DVC (``data/experiment/``);
  with a subset (``make run``: seed 0) the table of the selected cells is computed in this process
  and written to ``data/run/`` (not a DVC output). DVC caches each finished stage, so a killed run
  resumes where it stopped.

A stale ``rl@<variant>-<seed>`` stage runs as the RL subflow (:func:`flows.rl.rl_cell`): a task per
training segment (APPO iteration, or ``sao.agent.updates_per_task`` updates), each resuming from the
last one's checkpoint, the last segment through DVC; an up-to-date one is a plain ``dvc repro``
(skipped). A stage that is stale but in DVC's run cache still trains its segments before the final
``dvc repro`` restores it (``dvc status`` does not tell the two apart).

Entrypoint for deployments: ``flows/pipeline.py:pipeline``. From a shell: ``python -m flows.pipeline``
(every cell; ``make experiment``), ``--seeds 0`` (``make run``), ``--variants full untrained``,
``--force STAGE``, ``--set key=value`` (an experiment).
"""

from __future__ import annotations

import os

os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "apollo")  # apollo.* logs in every flow run

import argparse  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from prefect import flow  # noqa: E402
from prefect.logging import get_run_logger  # noqa: E402

from apollo.config import load_params, project_root  # noqa: E402
from apollo.tracking import end_run, run_url, start_parent_run, tracking_uri  # noqa: E402
from tasks.dvc_tasks import (experiment_name, resolve_force, stage_closure, stage_is_stale, stage_order,  # noqa: E402
                             workspace_lock)
from tasks.stage_tasks import DEFAULT_TIMEOUT_S, experiment_task, stage_task  # noqa: E402

log = logging.getLogger("apollo.pipeline")


def _results_markdown(root: Path, summary: dict[str, Any]) -> str:
    lines = ["# Apollo pipeline", ""]
    if summary.get("experiment"):
        lines += [f"DVC experiment **{summary['experiment']}** (`dvc exp show`), overlay "
                  f"`{summary['overlay']}`", ""]
    if summary.get("stages"):
        lines += ["| stage | status | seconds |", "|---|---|---|"]
        lines += [f"| {s['stage']} | {s['status']} | {s['seconds']} |" for s in summary["stages"]]
        lines.append("")
    results = Path(summary.get("results") or root / "data" / "experiment" / "results.md")
    if results.exists() and not summary.get("experiment"):
        lines += [results.read_text(), ""]
    if summary.get("metrics"):
        lines += ["```", str(summary["metrics"])[:4000], "```", ""]
    if summary.get("mlflow_url"):
        lines.append(f"MLflow parent run: [{summary.get('mlflow_run_id')}]({summary['mlflow_url']})")
    return "\n".join(lines)


def _on_failure(flow_obj, flow_run, state) -> None:
    """Failure notification inside the run: an ERROR log line and a failure artifact (an automation
    in ``infra/automations.yaml`` turns the failed state into a notification)."""
    from prefect.artifacts import create_markdown_artifact

    msg = state.message or "failed"
    logging.getLogger("apollo.pipeline").error("pipeline run %s failed: %s", flow_run.name, msg)
    try:
        create_markdown_artifact(key="apollo-pipeline-failure", markdown=f"# Pipeline failed\n\n{msg}\n",
                                 description=f"flow run {flow_run.name}")
    except Exception:  # no API to write to: the log line is the notification
        pass


@flow(name="apollo-pipeline", log_prints=True, persist_result=True, on_failure=[_on_failure])
def pipeline(force: list[str] | None = None, params: dict[str, Any] | None = None, root: str | None = None,
             wait_s: float = 0.0, stage_timeout_s: float = DEFAULT_TIMEOUT_S, variants: list[str] | None = None,
             seeds: list[int] | None = None) -> dict[str, Any]:
    """Run every stale stage of dvc.yaml through DVC (or, with ``params``, one DVC experiment);
    ``variants``/``seeds`` select the experiment cells (default: all)."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.runtime import flow_run

    logger = get_run_logger()
    root_path = Path(root).resolve() if root else project_root()
    if not (root_path / "dvc.yaml").exists():
        raise FileNotFoundError(f"{root_path}: no dvc.yaml; run from the project root (or pass root=)")
    order = stage_order(root_path)
    forced = resolve_force(force, order)  # fails on an unknown name before anything runs
    selection = select_cells(root_path, variants, seeds)
    if not selection["all"]:
        needed = stage_closure(root_path, selection["targets"])
        order = [s for s in order if s in needed]
        forced = [s for s in forced if s in needed]
    summary: dict[str, Any] = {"stages": [], "ran": [], "restored": [], "skipped": [], "seconds": {},
                               "cells": selection["cells"], "all_cells": selection["all"]}
    t_all = time.perf_counter()
    with workspace_lock(root_path, wait_s):
        from apollo.stages import provenance as prov

        parent = start_parent_run("pipeline", root=root_path, tags={
            "prefect.flow_run_id": flow_run.id or "", "apollo.started_by": "prefect",
            "git_commit": prov.git_commit(root_path), "dvc_lock_hash": prov.lock_hash(root_path),
            "apollo.cells": " ".join(f"{v}/{s}" for v, s in selection["cells"])[:5000]})
        env = {"APOLLO_PARENT_RUN_ID": parent.run_id, "MLFLOW_TRACKING_URI": tracking_uri(root_path)}
        logger.info("stages: %s; MLflow parent run %s (%s)", ", ".join(order), parent.run_id, env["MLFLOW_TRACKING_URI"])
        try:
            if params:
                name = experiment_name(params)
                summary.update(experiment=name, overlay=params)
                parent.set_tags({"apollo.experiment": name})
                res = experiment_task(str(root_path), params, name, env=env, timeout_s=stage_timeout_s,
                                      targets=None if selection["all"] else selection["targets"])
                summary["metrics"] = res["metrics"]
                summary["ran"].append(res["stage"])
                summary["seconds"][res["stage"]] = res["seconds"]
            else:
                for i, stage in enumerate(order, 1):
                    logger.info("[%d/%d] %s", i, len(order), stage)  # progress over the selected cells' stages
                    if stage.startswith("rl@") and (stage in forced or stage_is_stale(root_path, stage)):
                        res = rl_subflow(root_path, stage, force=stage in forced, parent_run_id=parent.run_id,
                                         timeout_s=stage_timeout_s)
                    else:
                        res = stage_task(stage, stage_timeout_s)(str(root_path), stage, force=stage in forced,
                                                                 env=env, timeout_s=stage_timeout_s)
                    summary["stages"].append(res)
                    summary[res["status"]].append(stage)
                    if res["status"] != "skipped":
                        summary["seconds"][stage] = res["seconds"]
        except BaseException:
            end_run(parent, "FAILED")
            raise
        parent.log_metrics({"pipeline.seconds": time.perf_counter() - t_all,
                            "pipeline.stages_run": len(summary["ran"]),
                            "pipeline.stages_restored": len(summary["restored"])})
        if not params:
            out, results = results_of(root_path, selection)
            summary["results"] = str(out / "results.md")
            if results is not None:  # a subset of the cells: the table and curves live on the parent run
                from apollo.stages.experiment import log_curves, metrics_of

                parent.log_metrics(metrics_of(results))
                log_curves(parent, results)
            for name in ("results.md", "results.json", "tts.png", "tts.html"):
                if (out / name).exists():
                    parent.log_artifact(out / name, "experiment")
        end_run(parent)
    summary["mlflow_run_id"] = parent.run_id
    summary["mlflow_url"] = run_url(parent, root_path)
    try:
        create_markdown_artifact(key="apollo-pipeline-results", markdown=_results_markdown(root_path, summary),
                                 description="stage results, the results table and the MLflow run")
    except Exception as e:  # an artifact is a view; the run's results are already recorded
        logger.warning("could not create the results artifact: %s", e)
    return summary


def rl_subflow(root: Path, stage: str, *, force: bool, parent_run_id: str, timeout_s: float) -> dict[str, Any]:
    """A stale ``rl@<variant>-<seed>`` stage as the RL subflow (:func:`flows.rl.rl_cell`: a task per
    training segment, the last through DVC), inside this flow's workspace lock."""
    from apollo.experiment.variants import seeds as table_seeds
    from flows.rl import rl_cell

    cell = stage.split("@", 1)[1]
    params = load_params(root / "params.yaml")
    for seed in table_seeds(params):
        if cell.endswith(f"-{seed}"):
            variant = cell[: -len(f"-{seed}")]
            return rl_cell(variant=variant, seed=seed, root=str(root), stage_timeout_s=timeout_s,
                           parent_run_id=parent_run_id, lock=False, force=force)
    raise ValueError(f"{stage}: not an rl@<variant>-<seed> cell of params.yaml experiment.seeds")


def select_cells(root: Path, variants: list[str] | None, seeds: list[int] | None) -> dict[str, Any]:
    """The experiment cells to run and the stages that evaluate them; unknown names fail."""
    from apollo.experiment import variants as vt

    p = load_params(root / "params.yaml")
    if "experiment" not in p and not variants and seeds is None:  # a DAG without experiment cells
        return {"cells": [], "targets": [], "all": True}
    cells = vt.cells(p, variants, seeds)
    targets = [vt.eval_stage(p, v, s) for v, s in cells] + ["reference"]
    return {"cells": [list(c) for c in cells], "targets": targets, "all": set(cells) == set(vt.cells(p))}


def results_of(root: Path, selection: dict[str, Any]) -> tuple[Path, dict[str, Any] | None]:
    """Where the ablation table of this run is: ``data/experiment/`` (the DVC stage, every cell), or
    ``data/run/`` computed here from the selected cells' evaluations (returned too)."""
    if selection["all"]:
        return root / "data" / "experiment", None
    from apollo.config import Paths
    from apollo.stages.experiment import aggregate, write

    out = root / "data" / "run"
    results = aggregate(load_params(root / "params.yaml"), [tuple(c) for c in selection["cells"]], Paths(root))
    write(results, out)
    return out, results


def _parse_set(items: list[str]) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item}: expected key=value, e.g. --set rollout.temperature=0.5")
        out[key] = yaml.safe_load(value)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--force", action="append", default=[],
                    help="re-run this stage (or foreach group) even if DVC finds it up to date")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="params overlay: run as a DVC experiment (dvc exp run -S)")
    ap.add_argument("--variants", nargs="+", default=None, help="experiment variants to run (default: all)")
    ap.add_argument("--seeds", nargs="+", type=int, default=None, help="experiment seeds to run (default: all)")
    ap.add_argument("--wait", type=float, default=0.0, help="seconds to wait for another run in this workspace")
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    for noisy in ("httpx", "alembic", "mlflow", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    t0 = time.perf_counter()
    try:
        summary = pipeline(force=args.force, params=_parse_set(args.set) or None, wait_s=args.wait,
                           variants=args.variants, seeds=args.seeds)
    except Exception as e:
        if args.debug:
            raise
        print(f"pipeline: {e}", file=sys.stderr)
        return 1
    root = project_root()
    print()
    if summary.get("experiment"):
        print(f"experiment: {summary['experiment']} (dvc exp show; dvc exp apply {summary['experiment']})")
    print(f"stages run: {', '.join(summary['ran']) or 'none (everything up to date)'}")
    if summary["restored"]:
        print(f"stages restored from DVC's run cache: {', '.join(summary['restored'])}")
    if summary["seconds"]:
        print("stage seconds: " + ", ".join(f"{k} {v}s" for k, v in summary["seconds"].items()))
    results = Path(summary.get("results") or root / "data" / "experiment" / "results.md")
    if results.exists() and not summary.get("experiment"):
        print(results.read_text())
    cells = ", ".join(f"{v}/{s}" for v, s in summary.get("cells", []))
    print(f"cells: {cells}{' (all)' if summary.get('all_cells') else ''}")
    print(f"results: {results}  test-time scaling: {results.with_name('tts.png')} {results.with_name('tts.html')}")
    print(f"MLflow: {summary.get('mlflow_url') or tracking_uri()}  (make ui)")
    print(f"pipeline finished in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
