"""Guidance stage: delivered guidance, aligned to trajectory steps, as a versioned artifact.

Reads the rollouts (where each step records the guidance injected before it) and cross-checks them
with the guidance store: a message the store marked delivered must appear in its trajectory at the
same step (acknowledged). Writes ``data/guidance/guidance.jsonl`` (one row per message: who, when,
latency, step) and ``data/guidance/stats.json``.
"""

from __future__ import annotations

import json
from statistics import mean
from typing import Any

from apollo.config import Paths
from apollo.guidance.store import GuidanceStore
from apollo.schema import atomic_write_text, read_trajectories


def export_rows(trajectories) -> list[dict[str, Any]]:
    rows = []
    for t in trajectories:
        for s in t.steps:
            for g in s.guidance:
                rows.append({
                    "guidance_id": g.guidance_id,
                    "trajectory_id": t.trajectory_id,
                    "task_id": t.task_id,
                    "step_index": s.index,
                    "text": g.text,
                    "author": g.author,
                    "created_at": g.created_at,
                    "delivered_at": g.delivered_at,
                    "latency_s": (g.delivered_at - g.created_at) if g.delivered_at else None,
                })
    return rows


def run(params: dict[str, Any], tracker=None, paths: Paths | None = None) -> dict[str, float]:
    paths = paths or Paths.default()
    trajs = read_trajectories(paths.rollouts / "train.jsonl")
    rows = export_rows(trajs)
    acked = {(r["guidance_id"], r["trajectory_id"], r["step_index"]) for r in rows}
    store_delivered = store_pending = unacked = 0
    if paths.guidance_store.exists():
        store = GuidanceStore(paths.guidance_store)
        for t in trajs:
            for g in store.guidance(t.trajectory_id):
                if g["status"] == "delivered":
                    store_delivered += 1
                    if (g["guidance_id"], t.trajectory_id, g["delivered_step"]) not in acked:
                        unacked += 1
                else:
                    store_pending += 1  # posted after the trajectory's last step boundary
    lat = [r["latency_s"] for r in rows if r["latency_s"] is not None]
    stats = {
        "guidance.delivered": len(rows),
        "guidance.trajectories_with_guidance": len({r["trajectory_id"] for r in rows}),
        "guidance.latency_mean_s": mean(lat) if lat else 0.0,
        "guidance.latency_max_s": max(lat) if lat else 0.0,
        "guidance.store_delivered": store_delivered,
        "guidance.store_never_delivered": store_pending,
        "guidance.unacknowledged": unacked,
    }
    if unacked:
        raise RuntimeError(
            f"{unacked} guidance message(s) marked delivered in {paths.guidance_store} are missing from "
            f"{paths.rollouts / 'train.jsonl'}: the store and the rollouts disagree"
        )
    out = paths.guidance
    atomic_write_text(out / "guidance.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    atomic_write_text(out / "stats.json", json.dumps(stats, indent=2) + "\n")
    if tracker is not None:
        tracker.log_metrics(stats)
        tracker.log_artifact(out / "guidance.jsonl", "guidance")
    return stats
