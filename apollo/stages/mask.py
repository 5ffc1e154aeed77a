"""Mask stage: the same trajectory records with a mask decision on every step.

Order (nothing is written before every check passed, so a failing check leaves the previous
outputs intact):

1. read ``data/rollouts/train.jsonl`` and run the ``trajectories`` suite on it (input validation);
2. mask: symbolic rules → rule detectors → LLM judge (if ``mask.judge.backend`` is set), combined
   with the precedence of :mod:`apollo.supervision.masker`;
3. run the ``masks`` suite (every drop has a reason and a known category, kept fraction within
   ``min_kept_fraction``..``max_kept_fraction``, flagged fraction ≤ ``max_flagged_fraction``);
4. score the masker on the blind labeled set (``mask.labeled``: whole set and its test split, with
   95% Wilson intervals; skipped when the file is absent);
5. write ``data/masked/train.jsonl``, ``stats.json``, ``labeled_report.{txt,json}`` and log metrics
   (drop rate per category and per source, judge calls/cache hits, labeled precision/recall with
   intervals: ``mask.labeled.*`` whole set, ``mask.labeled.test.*`` test split) and the reports to
   the stage's MLflow run.

Task facts come from each record's ``task_facts`` (rollout fills them), else ``mask.tasks`` (task
infos for tasks outside the suite), else the suite; an unknown task id stops the stage with an
error naming the trajectory and the task.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from apollo.config import Paths, project_root, section
from apollo.schema import atomic_write_text, read_trajectories, write_trajectories
from apollo.supervision.labeled import DEFAULT_LABELS, LabeledReport, evaluate_labeled, load_labeled, load_split
from apollo.supervision.masker import Masker, MaskConfig

log = logging.getLogger(__name__)


def _cache_path(cfg: MaskConfig, paths: Paths) -> Path | None:
    c = cfg.judge.cache
    if not c:
        return None
    p = Path(c)
    return p if p.is_absolute() else paths.root / p


def labeled_reports(masker: Masker, labels_path: Path) -> list[LabeledReport]:
    """The masker scored on a labeled set: the whole set, then each split of its ``split.json``."""
    labels, trajs = load_labeled(labels_path)
    split = load_split(labels_path)
    out = [evaluate_labeled(masker, labels, trajs, title="all")]
    for name in ("test", "dev"):
        if split.get(name):
            out.append(evaluate_labeled(masker, labels, trajs, only=split[name], title=f"{name} split"))
    return out


def run(params: dict[str, Any], tracker=None, paths: Paths | None = None) -> dict[str, float]:
    paths = paths or Paths.default()
    p = section(params, "mask")
    cfg = MaskConfig.from_params(p)
    root = project_root()
    trajs = read_trajectories(paths.rollouts / "train.jsonl")
    from apollo.quality import check_masks, check_trajectories

    check_trajectories(trajs, paths.quality / "trajectories_in.json", tracker)
    masker = Masker(cfg, root=root, cache_path=_cache_path(cfg, paths) if cfg.judge.enabled else None)
    try:
        masked, metrics = masker.mask(trajs, copy=False)
        check_masks(masked, min_kept=float(p.get("min_kept_fraction", 0.0)),
                    max_kept=float(p.get("max_kept_fraction", 1.0)),
                    max_flagged=float(p.get("max_flagged_fraction", 1.0)),
                    known_categories=masker.categories, out=paths.quality / "masks.json", tracker=tracker)
        reports: list[LabeledReport] = []
        labeled = p.get("labeled", DEFAULT_LABELS)
        if labeled and (root / labeled).is_file():
            reports = labeled_reports(masker, root / labeled)
            for r in reports:
                metrics.update(r.metrics("mask.labeled" if r.title == "all" else f"mask.labeled.{r.title.split()[0]}"))
        elif labeled:
            log.info("mask: no labeled set at %s; precision/recall not reported", root / labeled)
    finally:
        masker.close()
    write_trajectories(paths.masked / "train.jsonl", masked)
    atomic_write_text(paths.masked / "stats.json", json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    if reports:
        text = "\n\n".join(r.table(errors=r.title == "all") for r in reports)
        atomic_write_text(paths.masked / "labeled_report.txt", text + "\n")
        atomic_write_text(paths.masked / "labeled_report.json",
                          json.dumps([r.to_json() for r in reports], indent=2) + "\n")
        log.info("mask: labeled set\n%s", "\n\n".join(r.table(errors=False) for r in reports))
    if tracker is not None:
        tracker.log_metrics(metrics)
        tracker.log_artifact(paths.masked / "stats.json", "mask")
        if reports:
            tracker.log_artifact(paths.masked / "labeled_report.txt", "mask")
            tracker.log_artifact(paths.masked / "labeled_report.json", "mask")
    return metrics
