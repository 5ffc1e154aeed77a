"""Data-quality checks at the stage boundaries, run the way Great Expectations users run them.

* a **file-backed context** in the repo (``gx/``, ``great_expectations.yml`` committed); the suites
  are code (:mod:`apollo.quality.suites`) and are written into the context when a check runs;
* one **Checkpoint** per boundary table (``trajectories.steps``, ``masks.masks``, …) with its
  **ValidationDefinition** (data asset × suite) and an ``UpdateDataDocsAction``;
* **Data Docs** built to ``gx/uncommitted/data_docs/local_site/index.html``; validation results
  **kept per run** in ``gx/uncommitted/validations/`` (the run name is the stage's, with a timestamp);
* failing rows are **identified** by ``trajectory_id`` and ``step`` (``unexpected_index_list``);
* a short JSON report per boundary in ``data/quality/`` and in the stage's MLflow run.

Each stage validates what it is about to write *before* writing it, so a failing check stops the
pipeline with a readable summary and leaves the previous outputs intact. Expectations that only
repeat the pydantic schema (score ranges, step numbering, drop reasons, mask sources) are not here:
a record that breaks them cannot be loaded in the first place.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from apollo.quality.report import DataQualityError, QualityReport
from apollo.schema import Trajectory, atomic_write_text

log = logging.getLogger(__name__)

__all__ = ["DataQualityError", "QualityReport", "check_dataset", "check_masks", "check_trajectories"]


def _check(report: QualityReport, out: Path | None, tracker: Any = None) -> QualityReport:
    if out is not None:
        atomic_write_text(out, json.dumps(report.to_json(), indent=2, default=str) + "\n")
    if tracker is not None:
        tracker.log_metrics(report.metrics())
        if out is not None:
            tracker.log_artifact(out, "quality")
    if not report.success:
        raise DataQualityError(report)
    return report


def check_trajectories(trajs: list[Trajectory], out: Path | None = None, tracker: Any = None,
                       root: Path | None = None) -> QualityReport:
    from apollo.quality import suites
    from apollo.quality.context import run_checkpoints

    if not trajs:
        raise DataQualityError(QualityReport("trajectories", False, [{
            "frame": "trajectories", "expectation": "expect_table_row_count_to_be_between",
            "kwargs": {"min_value": 1}, "success": False, "observed": 0}]))
    frames = suites.trajectory_frames(trajs)
    exps = suites.trajectory_suites(has_guidance=len(frames["guidance"]) > 0)
    return _check(run_checkpoints("trajectories", {k: frames[k] for k in exps}, exps, root), out, tracker)


def check_masks(trajs: list[Trajectory], *, min_kept: float = 0.0, max_kept: float = 1.0,
                known_categories: list[str] | None = None, max_flagged: float = 1.0,
                out: Path | None = None, tracker: Any = None, root: Path | None = None) -> QualityReport:
    """Every step masked; every drop with a (known) category; kept and flagged fractions within bounds."""
    from apollo.quality import suites
    from apollo.quality.context import run_checkpoints

    df = suites.mask_frame(trajs)
    exps = suites.mask_suite(min_kept, max_kept, known_categories, max_flagged)
    return _check(run_checkpoints("masks", {"masks": df}, {"masks": exps}, root), out, tracker)


def check_dataset(rows: list[dict[str, Any]], *, max_length: int, upsample: dict[str, int],
                  base_counts: dict[str, int], out: Path | None = None, tracker: Any = None,
                  root: Path | None = None) -> QualityReport:
    """Every example trains at least one token within the context limit; upsampling as configured."""
    from apollo.quality import suites
    from apollo.quality.context import run_checkpoints

    frames, exps = suites.dataset_suites(rows, max_length, upsample, base_counts)
    return _check(run_checkpoints("dataset", frames, exps, root), out, tracker)
