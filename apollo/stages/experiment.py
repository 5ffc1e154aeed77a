"""Experiment stage: every (variant, seed) cell's evaluation → the ablation table with intervals.

Reads ``data/eval/<variant>/s<seed>/trajectories.jsonl`` for every cell of ``params.yaml:
experiment`` and writes ``data/experiment/``: ``results.json`` (per variant ``final_mean``,
``final_ci``, ``best_mean``, ``best_ci``, ``seeds``, ``diff_vs_untrained``; DVC metrics),
``results.md`` (the table), ``tts.json`` (the test-time-scaling curves with intervals, as rows),
``tts_steps.json`` / ``tts_wall_s.json`` (best-so-far per variant vs budget: DVC plots),
``tts.png`` and ``tts.html`` (the figure, static and interactive). Logs the table and the curves to
its MLflow run (each curve a metric with ``step`` = budget). :func:`aggregate` is what ``make run``
uses on a subset of the cells (seed 0) without going through DVC.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from apollo.config import Paths
from apollo.experiment import variants as vt
from apollo.experiment.plots import tts_html, tts_png
from apollo.experiment.results import experiment_results, markdown, results_json, tts_records, tts_wide
from apollo.schema import atomic_write_text, read_trajectories

log = logging.getLogger(__name__)


def load_cells(paths: Paths, cells: list[tuple[str, int]]) -> dict[tuple[str, int], list]:
    out = {}
    for v, s in cells:
        f = paths.cell(s).eval(v) / "trajectories.jsonl"
        if not f.exists():
            raise FileNotFoundError(f"{f}: missing; run the evaluation of variant {v}, seed {s} first")
        out[(v, s)] = read_trajectories(f)
    return out


def aggregate(params: dict[str, Any], cells: list[tuple[str, int]], paths: Paths) -> dict[str, Any]:
    e = vt.experiment_section(params)
    b = e.get("bootstrap", {}) or {}
    tts = e.get("tts", {}) or {}
    budgets = {k: tts[k] for k in ("steps", "wall_s") if tts.get(k)}
    return experiment_results(load_cells(paths, cells), baseline=str(e.get("baseline", "untrained")),
                              budgets=budgets, confidence=float(b.get("confidence", 0.95)),
                              resamples=int(b.get("resamples", 4000)), rng_seed=int(b.get("seed", 0)))


def write(results: dict[str, Any], out) -> None:
    atomic_write_text(out / "results.json", json.dumps(results_json(results), indent=2) + "\n")
    atomic_write_text(out / "results.md", "# Ablation on the test tasks\n\n" + markdown(results))
    atomic_write_text(out / "tts.json", json.dumps(tts_records(results), indent=1) + "\n")
    for axis in ("steps", "wall_s"):  # DVC plots: best-so-far per variant vs the budget
        atomic_write_text(out / f"tts_{axis}.json", json.dumps(tts_wide(results, axis), indent=1) + "\n")
    if results.get("tts"):
        tts_png(results["tts"], out / "tts.png")
        tts_html(results["tts"], out / "tts.html")


def metrics_of(results: dict[str, Any]) -> dict[str, float]:
    m: dict[str, float] = {}
    for v, r in results["variants"].items():
        m[f"experiment.{v}.final_mean"] = r["final_mean"]
        m[f"experiment.{v}.final_low"], m[f"experiment.{v}.final_high"] = r["final_ci"]
        m[f"experiment.{v}.best_mean"] = r["best_mean"]
        d = r.get("diff_vs_untrained")
        if d and v != results["meta"]["baseline"]:
            m[f"experiment.{v}.diff_vs_untrained"] = d["mean"]
            m[f"experiment.{v}.diff_low"], m[f"experiment.{v}.diff_high"] = d["ci"]
    return m


def log_curves(tracker, results: dict[str, Any]) -> None:
    """Each TTS curve as an MLflow metric, ``step`` = the budget (seconds rounded to integers)."""
    for axis, a in results.get("tts", {}).items():
        for v, curves in a["variants"].items():
            for kind, c in curves.items():
                for b, y in zip(a["budgets"], c["mean"]):
                    tracker.log_metrics({f"tts.{axis}.{kind}.{v}": y}, step=int(round(b)))


def run(params: dict[str, Any], tracker=None, paths: Paths | None = None) -> dict[str, Any]:
    paths = paths or Paths.default()
    results = aggregate(params, vt.cells(params), paths)
    write(results, paths.experiment)
    log.info("experiment:\n%s", markdown(results))
    metrics = metrics_of(results)
    if tracker is not None:
        tracker.log_metrics(metrics)
        log_curves(tracker, results)
        for name in ("results.md", "results.json", "tts.png", "tts.html"):
            if (paths.experiment / name).exists():
                tracker.log_artifact(paths.experiment / name, "experiment")
    return metrics
