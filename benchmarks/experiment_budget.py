"""Where an experiment's time goes, and what ``make run`` / ``make experiment`` cost on this machine.

Reads the stage runs of one flow invocation from MLflow (the children of a ``pipeline`` parent run:
each stage run logs ``<stage>.seconds``, the time inside the stage; the parent logs
``pipeline.seconds``, wall time including DVC and MLflow overhead) and prints the seconds per stage
group and per cell, then projects the cost of every cell of ``params.yaml: experiment`` (the
shared stages once, each per-seed stage once per seed) against the budgets of issue 11: 15 min for
``make run`` (seed 0), 75 min for ``make experiment``. Only stages that ran count (restored or
skipped ones log nothing).

    .venv/bin/python benchmarks/experiment_budget.py [--db mlflow/mlflow.db] [--parent RUN_ID]

Not part of ``make bench``: it measures a pipeline run, it does not run one.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHARED = ("suite", "bootstrap", "evaluate@reference", "experiment")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="mlflow/mlflow.db")
    ap.add_argument("--parent", default=None, help="a pipeline run id (default: the latest with stage runs)")
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args()
    db = sqlite3.connect(f"file:{args.db}?mode=ro", uri=True)
    parents = db.execute("select r.run_uuid from runs r join tags t on r.run_uuid=t.run_uuid where "
                         "t.key='apollo.kind' and t.value='pipeline' order by r.start_time desc").fetchall()
    parent = args.parent
    for (p,) in parents if parent is None else []:
        if db.execute("select count(*) from tags where key='mlflow.parentRunId' and value=?", (p,)).fetchone()[0]:
            parent = p
            break
    if parent is None:
        print(f"{args.db}: no pipeline run with stage runs", file=sys.stderr)
        return 1
    rows = db.execute("""select r.name, m.key, m.value from runs r join tags t on r.run_uuid=t.run_uuid
                         join metrics m on m.run_uuid=r.run_uuid
                         where t.key='mlflow.parentRunId' and t.value=? and m.key like '%.seconds'""", (parent,)).fetchall()
    secs = {name: v for name, k, v in rows if k == f"{name.split('@')[0]}.seconds"}
    wall = db.execute("select value from metrics where run_uuid=? and key='pipeline.seconds'", (parent,)).fetchone()
    print(f"pipeline run {parent}: {len(secs)} stages ran; flow wall time "
          f"{wall[0]:.0f}s" if wall else f"pipeline run {parent}: {len(secs)} stages ran")
    groups: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for name, v in sorted(secs.items()):
        g = name.split("@")[0] if name not in SHARED else name
        groups[g] += v
        counts[g] += 1
        print(f"  {name:<28} {v:8.1f}s")
    total = sum(secs.values())
    print(f"inside stages: {total:.0f}s" + (f"; overhead (DVC, MLflow, process starts): {wall[0] - total:.0f}s"
                                            if wall else ""))
    params = yaml.safe_load(Path(args.params).read_text())
    seeds = len(params["experiment"]["seeds"])
    ran_seeds = {n.rsplit("-", 1)[-1] for n in secs if n not in SHARED and "-" in n} or {"0"}
    per_seed = sum(v for g, v in groups.items() if g not in SHARED) / len(ran_seeds)
    shared = sum(v for g, v in groups.items() if g in SHARED)
    overhead = ((wall[0] - total) / max(1, len(secs))) if wall else 0.0
    n_per_seed = sum(c for g, c in counts.items() if g not in SHARED) / len(ran_seeds)
    run_s = shared + per_seed + overhead * (n_per_seed + len(SHARED))
    exp_s = shared + seeds * per_seed + overhead * (seeds * n_per_seed + len(SHARED))
    print(f"projection (this machine, stages that ran here): make run (1 seed) {run_s / 60:.1f} min "
          f"(budget 15: {run_s / 900:.2f}x); make experiment ({seeds} seeds) {exp_s / 60:.1f} min "
          f"(budget 75: {exp_s / 4500:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
