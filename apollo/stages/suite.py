"""Suite stage: generate the mini InnovatorBench-format task suite → ``data/suite/``.

The suite is a generated artifact, deterministic in ``params.yaml`` ``suite.seed``: every task
family in :mod:`apollo.env.families` writes its instances (Apollo's 18 train tasks, InnovatorBench's
20 test tasks) in InnovatorBench's layout. It is written beside ``data/suite`` and renamed into
place, so a reader never sees half a suite. Every stage that reads tasks depends on ``data/suite``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from apollo.config import Paths
from apollo.schema import atomic_write_dir


def suite_dir(paths: Paths) -> Path:
    return paths.data / "suite"


def write_suite(out: Path, seed: int) -> list[dict[str, Any]]:
    """Generate the suite of ``seed`` into a temporary folder beside ``out``, then rename it into place."""
    from apollo.env.generate import generate_suite

    atomic_write_dir(out, lambda tmp: generate_suite(tmp, seed=seed))
    return json.loads((out / "suite.json").read_text(encoding="utf-8"))


def run(params: dict[str, Any], tracker=None, paths: Paths | None = None) -> dict[str, Any]:
    paths = paths or Paths.default()
    p = params.get("suite") or {}
    seed = int(p.get("seed", 0))
    t0 = time.perf_counter()
    manifest = write_suite(suite_dir(paths), seed)
    splits = Counter(m["split"] for m in manifest)
    metrics = {"suite.tasks": len(manifest), "suite.train": splits["train"], "suite.test": splits["test"],
               "suite.seconds": time.perf_counter() - t0}
    if tracker is not None:
        tracker.log_metrics(metrics)
    return metrics
