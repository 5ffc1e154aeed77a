"""The simulated annotator run inline: a guidance channel for one episode, deterministic.

The pipeline runs the simulated annotator (:mod:`apollo.guidance.annotator`) as a separate process
that polls the guidance store, so when its advice arrives depends on timing. Tests, the labeled
set and demonstrations need the same advice at the same step every time: :class:`InlineAnnotator`
is a guidance channel backed by a private store (a temporary SQLite file) on which the same
annotator's polling pass (:func:`apollo.guidance.annotator.annotate_once`) runs right after each
posted step, with no delay, so guidance noticed after step ``i`` enters the context before step
``i + 1``. It is the one simulated annotator, only scheduled synchronously.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from apollo.guidance.annotator import AnnotatorConfig, annotate_once
from apollo.guidance.store import GuidanceStore
from apollo.schema import Guidance


class InlineAnnotator:
    """A ``GuidanceChannel`` for one episode of ``task``; close it (or use ``with``) when done."""

    def __init__(self, task: Any, cfg: AnnotatorConfig | None = None):
        self.task = task
        self.cfg = cfg or AnnotatorConfig(delay_s=0.0, max_per_trajectory=1_000)
        self._dir = Path(tempfile.mkdtemp(prefix="inline-annotator-"))
        self.store = GuidanceStore(self._dir / "guidance.sqlite")
        self._state: dict[str, dict[str, Any]] = {}
        self.sent: list[str] = []

    def register(self, trajectory_id: str, task_id: str, *, meta: dict[str, Any] | None = None) -> Any:
        self._state[trajectory_id] = {"seen": 0, "sent": self.sent, "task": self.task}
        return self.store.register(trajectory_id, task_id, meta=meta)

    def post_step(self, trajectory_id: str, step_index: int, tool: str | None, arguments: dict[str, Any],
                  observation: str, **kw: Any) -> Any:
        out = self.store.post_step(trajectory_id, step_index, tool, arguments, observation, **kw)
        annotate_once(self.store, self.cfg, self._state)
        return out

    def take_pending(self, trajectory_id: str, step_index: int) -> list[Guidance]:
        return self.store.take_pending(trajectory_id, step_index)

    def end(self, trajectory_id: str, status: str = "finished", *, final_score: float | None = None) -> None:
        self.store.end(trajectory_id, status, final_score=final_score)

    def close(self) -> None:
        self.store.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> InlineAnnotator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
