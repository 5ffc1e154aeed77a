"""The file-backed Great Expectations context in ``<project>/gx`` and the Checkpoint runs.

One Checkpoint per boundary table, named ``<boundary>.<table>`` (e.g. ``trajectories.steps``), with
one ValidationDefinition (the pandas asset of that table × its suite), result format COMPLETE with
``trajectory_id``/``step`` as the unexpected-index columns, and an ``UpdateDataDocsAction``.
Validation results stay per run in ``gx/uncommitted/validations/``.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from apollo.config import project_root

# GX logs ~200 "Skipping registering function" lines at INFO per import; keep its warnings only
for _name in ("great_expectations", "great_expectations.expectations.registry"):
    logging.getLogger(_name).setLevel(logging.WARNING)

log = logging.getLogger(__name__)
DOCS = Path("gx") / "uncommitted" / "data_docs" / "local_site" / "index.html"


def gx_root(root: Path | None = None) -> Path:
    return Path(root or project_root()).resolve()


def get_context(root: Path | None = None):
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="file", project_root_dir=str(gx_root(root)))
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return ctx


def _checkpoint(ctx, name: str, expectations: list[Any], index_cols: list[str]):
    import great_expectations as gx
    from great_expectations.checkpoint import UpdateDataDocsAction

    ds = ctx.data_sources.add_or_update_pandas("apollo")
    asset = next((a for a in ds.assets if a.name == name), None) or ds.add_dataframe_asset(name)
    bd = next((b for b in asset.batch_definitions if b.name == "whole"), None) \
        or asset.add_batch_definition_whole_dataframe("whole")
    suite = ctx.suites.add_or_update(gx.ExpectationSuite(name=name, expectations=expectations))
    vd = ctx.validation_definitions.add_or_update(gx.ValidationDefinition(name=name, data=bd, suite=suite))
    return ctx.checkpoints.add_or_update(gx.Checkpoint(
        name=name, validation_definitions=[vd],
        actions=[UpdateDataDocsAction(name="update_data_docs")],
        result_format={"result_format": "COMPLETE", "unexpected_index_column_names": index_cols,
                       "partial_unexpected_count": 20}))


def run_checkpoints(boundary: str, frames: dict[str, Any], expectations: dict[str, list[Any]],
                    root: Path | None = None):
    """Run the checkpoint of each table of ``boundary``; one report for the boundary."""


    config = gx_root(root) / "gx" / "great_expectations.yml"
    committed = config.read_bytes() if config.exists() else None
    try:
        return _run(boundary, frames, expectations, root)
    finally:
        # GX rewrites its config with fresh datasource ids on every run; keep the committed file
        if committed is not None and config.read_bytes() != committed:
            config.write_bytes(committed)


def _run(boundary: str, frames: dict[str, Any], expectations: dict[str, list[Any]], root: Path | None):
    from great_expectations.core.run_identifier import RunIdentifier

    from apollo.quality.report import QualityReport
    from apollo.quality.suites import INDEX

    ctx = get_context(root)
    run_name = f"{os.environ.get('DVC_STAGE') or boundary}-{time.strftime('%Y%m%dT%H%M%S')}"
    results: list[dict[str, Any]] = []
    for table, exps in expectations.items():
        df = frames[table]
        index_cols = [c for c in INDEX.get(table.split("_")[0] if table.startswith("rows_") else table,
                                           INDEX["dataset"]) if c in df.columns]
        cp = _checkpoint(ctx, f"{boundary}.{table}", exps, index_cols)
        res = cp.run(batch_parameters={"dataframe": df}, run_id=RunIdentifier(run_name=run_name))
        for vres in res.run_results.values():
            for r in vres.results:
                results.append(_result(table, r, index_cols))
    docs = gx_root(root) / DOCS
    return QualityReport(boundary, all(r["success"] for r in results), results, str(docs) if docs.exists() else "")


def _result(table: str, r, index_cols: list[str]) -> dict[str, Any]:
    cfg = r.expectation_config
    kwargs = {k: v for k, v in cfg.kwargs.items() if k not in ("batch_id",)}
    res = r.result or {}
    observed = res.get("observed_value")
    rows = []
    if not r.success and res.get("unexpected_index_list"):
        for item in res["unexpected_index_list"][:50]:
            if isinstance(item, dict):
                rows.append({k: _plain(item.get(k)) for k in index_cols})
    if observed is None and "unexpected_count" in res:
        observed = {"unexpected": res.get("unexpected_count"),
                    "examples": [_plain(x) for x in (res.get("partial_unexpected_list") or [])[:3]]}
    return {"frame": table, "expectation": cfg.type, "kwargs": kwargs, "success": bool(r.success),
            "observed": _plain(observed), "rows": rows}


def _plain(x: Any) -> Any:
    return x.item() if hasattr(x, "item") else x
