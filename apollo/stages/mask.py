"""Mask stage: the same trajectory records with a mask decision on every step."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from apollo.config import Paths, project_root, section
from apollo.schema import atomic_write_text, read_trajectories, write_trajectories
from apollo.supervision.symbolic import load_rules, mask_trajectory


def run(params: dict[str, Any], tracker=None, paths: Paths | None = None) -> dict[str, float]:
    paths = paths or Paths.default()
    p = section(params, "mask")
    rules_path = p.get("rules")
    rules = load_rules(project_root() / rules_path if rules_path else None)
    trajs = read_trajectories(paths.rollouts / "train.jsonl")
    from apollo.supervision.quality import check_trajectories

    check_trajectories(trajs, paths.quality / "trajectories_in.json", tracker)
    masked = [mask_trajectory(t, rules) for t in trajs]
    steps = [s for t in masked for s in t.steps]
    dropped = [s for s in steps if not s.mask.keep]
    by_cat = Counter(s.mask.category for s in dropped)
    by_src = Counter(s.mask.source for s in dropped)
    n = max(1, len(steps))
    metrics: dict[str, float] = {
        "mask.steps": len(steps),
        "mask.dropped": len(dropped),
        "mask.drop_rate": len(dropped) / n,
        "mask.kept_fraction": 1 - len(dropped) / n,
        **{f"mask.drop_rate.{c}": k / n for c, k in by_cat.items()},
        **{f"mask.drop_rate.source.{c}": k / n for c, k in by_src.items()},
    }
    from apollo.supervision.quality import check_masks

    check_masks(masked, min_kept=float(p.get("min_kept_fraction", 0.0)),
                max_kept=float(p.get("max_kept_fraction", 1.0)), out=paths.quality / "masks.json", tracker=tracker)
    write_trajectories(paths.masked / "train.jsonl", masked)
    atomic_write_text(paths.masked / "stats.json", json.dumps(metrics, indent=2) + "\n")
    if tracker is not None:
        tracker.log_metrics(metrics)
    return metrics
