"""Guidance stage: delivered guidance, aligned to trajectory steps, as a versioned artifact.

Reads the rollouts (where each step records the guidance injected before it) and cross-checks them
with the guidance store (SQLite file or the database URL of ``rollout.guidance.db`` /
``$APOLLO_GUIDANCE_DB``): a message the store has *acknowledged* at a step must appear in its
trajectory at that step. Writes ``data/guidance/guidance.jsonl`` (one row per delivered message:
who, when it was sent / became due / was delivered / was acknowledged, the latency, the step) and
``data/guidance/stats.json``, for the mask stage and for analysis.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean, median
from typing import Any

from apollo.config import Paths
from apollo.guidance.runtime import settings_from, store_target
from apollo.guidance.store import GuidanceStore
from apollo.schema import atomic_write_text, read_trajectories


def export_rows(trajectories, store_rows: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One row per message delivered in a trajectory; ``store_rows`` (by guidance id) adds the store's view."""
    store_rows = store_rows or {}
    rows = []
    for t in trajectories:
        for s in t.steps:
            for g in s.guidance:
                st = store_rows.get(g.guidance_id) or {}
                rows.append({
                    "guidance_id": g.guidance_id,
                    "trajectory_id": t.trajectory_id,
                    "task_id": t.task_id,
                    "step_index": s.index,
                    "text": g.text,
                    "author": g.author,
                    "created_at": g.created_at,
                    "available_at": st.get("available_at"),
                    "delivered_at": g.delivered_at,
                    "acknowledged_at": st.get("acknowledged_at"),
                    "latency_s": (g.delivered_at - g.created_at) if g.delivered_at else None,
                    "seq": st.get("seq"),
                    "attempts": st.get("attempts"),
                    "acknowledged": bool(st.get("acknowledged_at")) and st.get("delivered_step") == s.index,
                    "meta": st.get("meta") or {},
                })
    return rows


def _open_store(params: dict[str, Any], paths: Paths) -> GuidanceStore | None:
    target = store_target(settings_from(params.get("rollout") if isinstance(params.get("rollout"), dict) else None),
                          paths.guidance_store)
    if "://" not in target and not Path(target).exists():
        return None  # no rollout has run against a store here: nothing to cross-check
    return GuidanceStore(target)


def run(params: dict[str, Any], tracker=None, paths: Paths | None = None) -> dict[str, float]:
    paths = paths or Paths.default()
    trajs = read_trajectories(paths.rollouts / "train.jsonl")
    store = _open_store(params, paths)
    by_traj: dict[str, list[dict[str, Any]]] = {}
    if store is not None:
        for t in trajs:
            by_traj[t.trajectory_id] = store.guidance(t.trajectory_id)
        store.close()
    store_rows = {g["guidance_id"]: g for rows in by_traj.values() for g in rows}
    rows = export_rows(trajs, store_rows)
    in_traj = {(r["guidance_id"], r["trajectory_id"], r["step_index"]) for r in rows}
    acknowledged = delivered_unacked = never = unacked = 0
    for tid, grows in by_traj.items():
        for g in grows:
            if g["state"] == "acknowledged":
                acknowledged += 1
                if (g["guidance_id"], tid, g["delivered_step"]) not in in_traj:
                    unacked += 1
            elif g["state"] == "delivered":
                delivered_unacked += 1  # taken by an agent that never recorded the step
            else:
                never += 1  # posted after the trajectory's last step boundary
    unconfirmed = sum(1 for r in rows if store is not None and not r["acknowledged"])
    lat = [r["latency_s"] for r in rows if r["latency_s"] is not None]
    stats = {
        "guidance.delivered": len(rows),
        "guidance.trajectories_with_guidance": len({r["trajectory_id"] for r in rows}),
        "guidance.latency_mean_s": mean(lat) if lat else 0.0,
        "guidance.latency_median_s": median(lat) if lat else 0.0,
        "guidance.latency_max_s": max(lat) if lat else 0.0,
        "guidance.store_delivered": acknowledged + delivered_unacked,
        "guidance.store_acknowledged": acknowledged,
        "guidance.store_delivered_unacknowledged": delivered_unacked,
        "guidance.store_never_delivered": never,
        "guidance.unacknowledged": unacked,
        "guidance.unconfirmed_in_store": unconfirmed,
    }
    if unacked:
        raise RuntimeError(
            f"{unacked} guidance message(s) acknowledged in the guidance store are missing from "
            f"{paths.rollouts / 'train.jsonl'}: the store and the rollouts disagree"
        )
    out = paths.guidance
    atomic_write_text(out / "guidance.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    atomic_write_text(out / "stats.json", json.dumps(stats, indent=2) + "\n")
    if tracker is not None:
        tracker.log_metrics(stats)
        tracker.log_artifact(out / "guidance.jsonl", "guidance")
    return stats
