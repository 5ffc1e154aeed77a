"""The report of one data-quality boundary and the error a failing one raises.

A leaf of :mod:`apollo.quality`: the package's checks and the GX runner
(:mod:`apollo.quality.context`) both build reports, and neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class DataQualityError(RuntimeError):
    """A suite failed; the message names the suite, each failing expectation and the failing rows."""

    def __init__(self, report: QualityReport):
        self.report = report
        super().__init__(report.summary())


@dataclass
class QualityReport:
    suite: str
    success: bool
    results: list[dict[str, Any]] = field(default_factory=list)
    docs: str = ""  # the Data Docs page of this run

    def failures(self) -> list[dict[str, Any]]:
        return [r for r in self.results if not r["success"]]

    def summary(self) -> str:
        if self.success:
            return f"suite '{self.suite}': all {len(self.results)} expectations passed"
        lines = [f"suite '{self.suite}' failed {len(self.failures())} of {len(self.results)} expectations:"]
        for r in self.failures():
            rows = r.get("rows") or []
            where = ("; rows " + ", ".join(_row_name(x) for x in rows[:5])
                     + (f" (+{len(rows) - 5} more)" if len(rows) > 5 else "")) if rows else ""
            lines.append(f"  - {r['frame']}: {r['expectation']}({r['kwargs']}): {r['observed']}{where}")
        if self.docs:
            lines.append(f"  Data Docs: {self.docs}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"suite": self.suite, "success": self.success, "docs": self.docs, "results": self.results}

    def metrics(self) -> dict[str, float]:
        return {
            f"quality.{self.suite}.success": float(self.success),
            f"quality.{self.suite}.failed": float(len(self.failures())),
        }


def _row_name(row: dict[str, Any]) -> str:
    tid = row.get("trajectory_id")
    step = row.get("step")
    return f"{tid} step {step}" if step is not None and step == step else str(tid)
