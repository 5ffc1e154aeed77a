"""Data-quality suites at stage boundaries, run with Great Expectations (ephemeral context).

Each stage validates what it is about to write *before* writing it, so a failing suite stops the
pipeline with a short readable summary and leaves the previous outputs intact.

Suites:
* ``trajectories`` — scores in 0–100, every step's action recorded (parsed, or invalid with the reason), step indices increasing by one,
  guidance pointing at existing steps, final ≤ best.
* ``masks`` — every step masked; every drop has a reason and a known category; sources valid; the
  kept fraction (and the judge-flagged fraction) within configured bounds.
* ``dataset`` — every example has at least one trained token, lengths within the context limit,
  upsampling counts as configured.

Great Expectations is imported lazily (it takes seconds to import).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apollo.schema import Trajectory, atomic_write_text


class DataQualityError(RuntimeError):
    """A suite failed; the message names the suite and each failing expectation."""

    def __init__(self, report: QualityReport):
        self.report = report
        super().__init__(report.summary())


@dataclass
class QualityReport:
    suite: str
    success: bool
    results: list[dict[str, Any]] = field(default_factory=list)

    def failures(self) -> list[dict[str, Any]]:
        return [r for r in self.results if not r["success"]]

    def summary(self) -> str:
        if self.success:
            return f"suite '{self.suite}': all {len(self.results)} expectations passed"
        lines = [f"suite '{self.suite}' failed {len(self.failures())} of {len(self.results)} expectations:"]
        for r in self.failures():
            lines.append(f"  - {r['expectation']}({r['kwargs']}): {r['observed']}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"suite": self.suite, "success": self.success, "results": self.results}

    def metrics(self) -> dict[str, float]:
        return {
            f"quality.{self.suite}.success": float(self.success),
            f"quality.{self.suite}.failed": float(len(self.failures())),
        }


def _validate(suite_name: str, frames: dict[str, Any], expectations: dict[str, list[Any]]) -> QualityReport:
    import great_expectations as gx

    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    source = ctx.data_sources.add_pandas(f"apollo-{suite_name}")
    results: list[dict[str, Any]] = []
    for frame_name, exps in expectations.items():
        df = frames[frame_name]
        asset = source.add_dataframe_asset(frame_name)
        batch = asset.add_batch_definition_whole_dataframe("all").get_batch(batch_parameters={"dataframe": df})
        suite = gx.ExpectationSuite(name=f"{suite_name}.{frame_name}", expectations=exps)
        res = batch.validate(suite)
        for r in res.results:
            cfg = r.expectation_config
            kwargs = {k: v for k, v in cfg.kwargs.items() if k not in ("batch_id",)}
            observed = r.result.get("observed_value")
            if observed is None and "unexpected_count" in r.result:
                observed = {"unexpected": r.result.get("unexpected_count"),
                            "examples": r.result.get("partial_unexpected_list", [])[:3]}
            results.append({
                "frame": frame_name,
                "expectation": cfg.type,
                "kwargs": kwargs,
                "success": bool(r.success),
                "observed": observed if not hasattr(observed, "item") else observed.item(),
            })
    return QualityReport(suite_name, all(r["success"] for r in results), results)


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


# --------------------------------------------------------------------------------- trajectories
def trajectory_frames(trajs: list[Trajectory]):
    import pandas as pd

    t_rows, s_rows, g_rows = [], [], []
    for t in trajs:
        t_rows.append({"trajectory_id": t.trajectory_id, "final_score": t.final_score, "best_score": t.best_score,
                       "best_minus_final": (t.best_score or 0) - (t.final_score or 0), "n_steps": len(t.steps),
                       "n_evals": len(t.evals)})
        prev = -1
        for s in t.steps:
            s_rows.append({"trajectory_id": t.trajectory_id, "index": s.index, "increment": s.index - prev,
                           # an action is either parsed (tool) or recorded as invalid (parse_error):
                           # an empty generation is data for the mask stage, never a silent hole
                           "action_recorded": s.action.tool is not None or bool(s.action.parse_error)})
            prev = s.index
            for g in s.guidance:
                g_rows.append({"trajectory_id": t.trajectory_id, "delivered_step": g.delivered_step,
                               "points_at_step": g.delivered_step == s.index and 0 <= s.index < len(t.steps)})
    cols_g = ["trajectory_id", "delivered_step", "points_at_step"]
    return {"trajectories": pd.DataFrame(t_rows), "steps": pd.DataFrame(s_rows, columns=["trajectory_id", "index", "increment", "action_recorded"]),
            "guidance": pd.DataFrame(g_rows, columns=cols_g)}


def check_trajectories(trajs: list[Trajectory], out: Path | None = None, tracker: Any = None) -> QualityReport:
    import great_expectations as gx

    E = gx.expectations
    if not trajs:
        raise DataQualityError(QualityReport("trajectories", False, [{
            "frame": "trajectories", "expectation": "expect_table_row_count_to_be_between",
            "kwargs": {"min_value": 1}, "success": False, "observed": 0}]))
    frames = trajectory_frames(trajs)
    exps = {
        "trajectories": [
            E.ExpectColumnValuesToNotBeNull(column="final_score"),
            E.ExpectColumnValuesToBeBetween(column="final_score", min_value=0, max_value=100),
            E.ExpectColumnValuesToBeBetween(column="best_score", min_value=0, max_value=100),
            E.ExpectColumnValuesToBeBetween(column="best_minus_final", min_value=0),
            E.ExpectColumnValuesToBeBetween(column="n_evals", min_value=1),
            E.ExpectColumnValuesToBeUnique(column="trajectory_id"),
        ],
        "steps": [
            E.ExpectColumnValuesToBeInSet(column="action_recorded", value_set=[True]),
            E.ExpectColumnValuesToBeBetween(column="increment", min_value=1, max_value=1),
        ],
    }
    if len(frames["guidance"]):
        exps["guidance"] = [E.ExpectColumnValuesToBeInSet(column="points_at_step", value_set=[True])]
    return _check(_validate("trajectories", frames, exps), out, tracker)


# --------------------------------------------------------------------------------------- masks
def check_masks(trajs: list[Trajectory], *, min_kept: float = 0.0, max_kept: float = 1.0,
                known_categories: list[str] | None = None, max_flagged: float = 1.0,
                out: Path | None = None, tracker: Any = None) -> QualityReport:
    """Every step masked; every drop with a reason and a (known) category; kept and flagged
    fractions within bounds."""
    import great_expectations as gx
    import pandas as pd

    E = gx.expectations
    rows = []
    for t in trajs:
        for s in t.steps:
            m = s.mask
            drop = m is not None and not m.keep
            rows.append({"has_mask": m is not None, "keep": float(m.keep) if m else None,
                         "source": m.source if m else None,
                         "drop_category": (m.category or "<none>") if drop else None,
                         "flagged": float(m.flagged) if m else None,
                         "drop_has_reason": True if not drop else bool(m.reason.strip()),
                         "drop_has_category": True if not drop else bool(m.category)})
    cols = ["has_mask", "keep", "source", "drop_category", "flagged", "drop_has_reason", "drop_has_category"]
    df = pd.DataFrame(rows, columns=cols)
    exps = [
        E.ExpectTableRowCountToBeBetween(min_value=1),
        E.ExpectColumnValuesToBeInSet(column="has_mask", value_set=[True]),
        E.ExpectColumnValuesToBeInSet(column="drop_has_reason", value_set=[True]),
        E.ExpectColumnValuesToBeInSet(column="drop_has_category", value_set=[True]),
        E.ExpectColumnValuesToBeInSet(column="source", value_set=["symbolic", "rule", "llm"]),
        E.ExpectColumnMeanToBeBetween(column="keep", min_value=min_kept, max_value=max_kept),
    ]
    if known_categories is not None:
        exps.append(E.ExpectColumnValuesToBeInSet(column="drop_category", value_set=sorted(known_categories)))
    if max_flagged < 1.0:
        exps.append(E.ExpectColumnMeanToBeBetween(column="flagged", min_value=0.0, max_value=max_flagged))
    return _check(_validate("masks", {"masks": df}, {"masks": exps}), out, tracker)


# ------------------------------------------------------------------------------------- dataset
def check_dataset(rows: list[dict[str, Any]], *, max_length: int, upsample: dict[str, int],
                  base_counts: dict[str, int], out: Path | None = None, tracker: Any = None) -> QualityReport:
    import great_expectations as gx
    import pandas as pd

    E = gx.expectations
    df = pd.DataFrame([{"kind": r["kind"], "n_tokens": r["n_tokens"], "n_trained": r["n_trained"],
                        "labels_match": len(r["labels"]) == len(r["input_ids"])} for r in rows],
                      columns=["kind", "n_tokens", "n_trained", "labels_match"])
    exps: list[Any] = [
        E.ExpectTableRowCountToBeBetween(min_value=1),
        E.ExpectColumnValuesToBeBetween(column="n_trained", min_value=1),
        E.ExpectColumnValuesToBeBetween(column="n_tokens", min_value=1, max_value=max_length),
        E.ExpectColumnValuesToBeInSet(column="labels_match", value_set=[True]),
        E.ExpectColumnValuesToBeInSet(column="kind", value_set=sorted(upsample)),
    ]
    frames = {"dataset": df}
    expectations = {"dataset": exps}
    for kind, factor in upsample.items():
        frames[f"rows_{kind}"] = df[df["kind"] == kind]
        expectations[f"rows_{kind}"] = [E.ExpectTableRowCountToEqual(value=base_counts.get(kind, 0) * factor)]
    return _check(_validate("dataset", frames, expectations), out, tracker)
