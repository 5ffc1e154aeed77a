"""The expectation suites, as code: the tables each boundary checks and what they must hold.

Every table carries ``trajectory_id`` and ``step`` (for a dataset row: the last step of its
window), the columns Great Expectations reports for each failing row.
"""

from __future__ import annotations

from typing import Any

from apollo.schema import Trajectory

INDEX = {  # the columns that identify a failing row, per table
    "trajectories": ["trajectory_id"],
    "steps": ["trajectory_id", "step"],
    "guidance": ["trajectory_id", "step"],
    "masks": ["trajectory_id", "step"],
    "dataset": ["trajectory_id", "step"],
}


def _E():
    import great_expectations as gx

    return gx.expectations


def trajectory_frames(trajs: list[Trajectory]):
    import pandas as pd

    t_rows, s_rows, g_rows = [], [], []
    for t in trajs:
        t_rows.append({"trajectory_id": t.trajectory_id, "final_score": t.final_score,
                       "best_minus_final": (t.best_score or 0) - (t.final_score or 0), "n_evals": len(t.evals)})
        for s in t.steps:
            # an action is either parsed (tool) or recorded as invalid (parse_error):
            # an empty generation is data for the mask stage, never a silent hole
            s_rows.append({"trajectory_id": t.trajectory_id, "step": s.index,
                           "action_recorded": s.action.tool is not None or bool(s.action.parse_error)})
            for g in s.guidance:
                g_rows.append({"trajectory_id": t.trajectory_id, "step": s.index,
                               "points_at_step": g.delivered_step == s.index})
    return {"trajectories": pd.DataFrame(t_rows, columns=["trajectory_id", "final_score", "best_minus_final", "n_evals"]),
            "steps": pd.DataFrame(s_rows, columns=["trajectory_id", "step", "action_recorded"]),
            "guidance": pd.DataFrame(g_rows, columns=["trajectory_id", "step", "points_at_step"])}


def trajectory_suites(has_guidance: bool) -> dict[str, list[Any]]:
    E = _E()
    exps = {
        "trajectories": [
            E.ExpectColumnValuesToNotBeNull(column="final_score"),   # every rollout ends with a final eval
            E.ExpectColumnValuesToBeBetween(column="best_minus_final", min_value=0),
            E.ExpectColumnValuesToBeBetween(column="n_evals", min_value=1),
            E.ExpectColumnValuesToBeUnique(column="trajectory_id"),
        ],
        "steps": [E.ExpectColumnValuesToBeInSet(column="action_recorded", value_set=[True])],
    }
    if has_guidance:
        exps["guidance"] = [E.ExpectColumnValuesToBeInSet(column="points_at_step", value_set=[True])]
    return exps


def mask_frame(trajs: list[Trajectory]):
    import pandas as pd

    rows = []
    for t in trajs:
        for s in t.steps:
            m = s.mask
            drop = m is not None and not m.keep
            rows.append({"trajectory_id": t.trajectory_id, "step": s.index, "has_mask": m is not None,
                         "keep": float(m.keep) if m else None,
                         "drop_category": (m.category or "<none>") if drop else None,
                         "flagged": float(m.flagged) if m else None,
                         "drop_has_category": True if not drop else bool(m.category)})
    cols = ["trajectory_id", "step", "has_mask", "keep", "drop_category", "flagged", "drop_has_category"]
    return pd.DataFrame(rows, columns=cols)


def mask_suite(min_kept: float, max_kept: float, known_categories: list[str] | None,
               max_flagged: float) -> list[Any]:
    E = _E()
    exps = [
        E.ExpectTableRowCountToBeBetween(min_value=1),
        E.ExpectColumnValuesToBeInSet(column="has_mask", value_set=[True]),
        E.ExpectColumnValuesToBeInSet(column="drop_has_category", value_set=[True]),
        E.ExpectColumnMeanToBeBetween(column="keep", min_value=min_kept, max_value=max_kept),
    ]
    if known_categories is not None:
        exps.append(E.ExpectColumnValuesToBeInSet(column="drop_category", value_set=sorted(known_categories)))
    if max_flagged < 1.0:
        exps.append(E.ExpectColumnMeanToBeBetween(column="flagged", min_value=0.0, max_value=max_flagged))
    return exps


def dataset_suites(rows: list[dict[str, Any]], max_length: int, upsample: dict[str, int],
                   base_counts: dict[str, int]):
    import pandas as pd

    E = _E()
    df = pd.DataFrame([{"trajectory_id": r.get("trajectory_id", ""), "step": r.get("window_last", -1),
                        "kind": r["kind"], "n_tokens": r["n_tokens"], "n_trained": r["n_trained"],
                        "labels_match": len(r["labels"]) == len(r["input_ids"])} for r in rows],
                      columns=["trajectory_id", "step", "kind", "n_tokens", "n_trained", "labels_match"])
    frames = {"dataset": df}
    exps: dict[str, list[Any]] = {"dataset": [
        E.ExpectTableRowCountToBeBetween(min_value=1),
        E.ExpectColumnValuesToBeBetween(column="n_trained", min_value=1),
        E.ExpectColumnValuesToBeBetween(column="n_tokens", min_value=1, max_value=max_length),
        E.ExpectColumnValuesToBeInSet(column="labels_match", value_set=[True]),
        E.ExpectColumnValuesToBeInSet(column="kind", value_set=sorted(upsample)),
    ]}
    for kind, factor in upsample.items():
        frames[f"rows_{kind}"] = df[df["kind"] == kind]
        exps[f"rows_{kind}"] = [E.ExpectTableRowCountToEqual(value=base_counts.get(kind, 0) * factor)]
    return frames, exps
