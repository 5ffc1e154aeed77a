"""Liveness of trajectories a process writes to the guidance store directly.

A process that registers a trajectory in a store (not through the service) keeps its
``heartbeat_at`` fresh from a daemon thread until it ends the trajectory, so a rollout whose worker
died without ending it shows as *lost* (:mod:`apollo.guidance.views`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)


class Heartbeats:
    """Trajectories this process registered directly in a store and has not ended: a daemon thread
    refreshes their ``heartbeat_at`` every ``every_s`` while the process lives."""

    every_s = 5.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, Any] = {}
        self._thread: threading.Thread | None = None

    def add(self, store: Any, trajectory_id: str) -> None:
        with self._lock:
            self._live[trajectory_id] = store
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True, name="guidance-heartbeat")
                self._thread.start()

    def discard(self, trajectory_id: str) -> None:
        with self._lock:
            self._live.pop(trajectory_id, None)

    def _run(self) -> None:
        while True:
            time.sleep(self.every_s)
            with self._lock:
                by_store: dict[int, tuple[Any, list[str]]] = {}
                for tid, st in self._live.items():
                    by_store.setdefault(id(st.engine), (st, []))[1].append(tid)
            for st, ids in by_store.values():
                try:
                    st.heartbeat(ids)
                except Exception:  # a disposed engine, a locked database: next time
                    log.debug("heartbeat failed", exc_info=True)


LIVE = Heartbeats()  # the process-wide registry the store adds to and discards from
