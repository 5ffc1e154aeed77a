"""The guidance store: running trajectories stream their steps in, annotators post guidance.

SQLite in WAL mode, safe across processes (the rollout workers and the simulated annotator are
separate processes). Guidance has a life cycle ``pending → delivered (trajectory, step, time)``;
acknowledgement is the guidance appearing in the saved trajectory record.

Delivery is exactly-once: :meth:`GuidanceStore.take_pending` marks the rows it returns as delivered
inside one ``BEGIN IMMEDIATE`` transaction, so two readers can never both take the same message.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from apollo.schema import Guidance

_SCHEMA = """
CREATE TABLE IF NOT EXISTS trajectories (
    trajectory_id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    status TEXT NOT NULL,
    started_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS steps (
    trajectory_id TEXT NOT NULL,
    step_index INTEGER NOT NULL,
    tool TEXT,
    arguments TEXT NOT NULL,
    observation TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (trajectory_id, step_index)
);
CREATE TABLE IF NOT EXISTS guidance (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    guidance_id TEXT UNIQUE NOT NULL,
    trajectory_id TEXT NOT NULL,
    text TEXT NOT NULL,
    author TEXT NOT NULL,
    created_at REAL NOT NULL,
    available_at REAL NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    delivered_at REAL,
    delivered_step INTEGER,
    meta TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS guidance_pending ON guidance (trajectory_id, status, available_at);
"""


class GuidanceStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._conn() as c:
            c.execute("PRAGMA journal_mode=WAL")
            c.executescript(_SCHEMA)

    @contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout=30000")
        try:
            yield conn
        finally:
            conn.close()

    # --- agent side -------------------------------------------------------------------------
    def register(self, trajectory_id: str, task_id: str) -> None:
        now = time.time()
        with self._conn() as c:
            c.execute(
                "INSERT OR REPLACE INTO trajectories VALUES (?, ?, 'running', ?, ?)",
                (trajectory_id, task_id, now, now),
            )

    def post_step(self, trajectory_id: str, step_index: int, tool: str | None,
                  arguments: dict[str, Any], observation: str) -> None:
        now = time.time()
        with self._conn() as c:
            c.execute(
                "INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?, ?, ?)",
                (trajectory_id, step_index, tool, json.dumps(arguments), observation, now),
            )
            c.execute("UPDATE trajectories SET updated_at=? WHERE trajectory_id=?", (now, trajectory_id))

    def end(self, trajectory_id: str, status: str = "finished") -> None:
        with self._conn() as c:
            c.execute(
                "UPDATE trajectories SET status=?, updated_at=? WHERE trajectory_id=?",
                (status, time.time(), trajectory_id),
            )

    def take_pending(self, trajectory_id: str, step_index: int, now: float | None = None) -> list[Guidance]:
        """Guidance that is due, in posting order, marked delivered at ``step_index`` (exactly once)."""
        now = time.time() if now is None else now
        with self._conn() as c:
            c.execute("BEGIN IMMEDIATE")
            try:
                rows = c.execute(
                    "SELECT * FROM guidance WHERE trajectory_id=? AND status='pending' AND available_at<=? "
                    "ORDER BY seq",
                    (trajectory_id, now),
                ).fetchall()
                for r in rows:
                    c.execute(
                        "UPDATE guidance SET status='delivered', delivered_at=?, delivered_step=? WHERE seq=?",
                        (now, step_index, r["seq"]),
                    )
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        return [
            Guidance(
                guidance_id=r["guidance_id"], text=r["text"], author=r["author"],
                created_at=r["created_at"], delivered_at=now, delivered_step=step_index,
            )
            for r in rows
        ]

    # --- annotator side ---------------------------------------------------------------------
    def post_guidance(self, trajectory_id: str, text: str, *, author: str = "annotator",
                      delay_s: float = 0.0, meta: dict[str, Any] | None = None) -> str:
        gid = uuid.uuid4().hex
        now = time.time()
        with self._conn() as c:
            c.execute(
                "INSERT INTO guidance (guidance_id, trajectory_id, text, author, created_at, available_at, meta) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (gid, trajectory_id, text, author, now, now + delay_s, json.dumps(meta or {})),
            )
        return gid

    def running(self) -> list[dict[str, Any]]:
        with self._conn() as c:
            return [dict(r) for r in c.execute("SELECT * FROM trajectories WHERE status='running'")]

    def steps(self, trajectory_id: str, since: int = 0) -> list[dict[str, Any]]:
        with self._conn() as c:
            rows = c.execute(
                "SELECT * FROM steps WHERE trajectory_id=? AND step_index>=? ORDER BY step_index",
                (trajectory_id, since),
            ).fetchall()
        return [{**dict(r), "arguments": json.loads(r["arguments"])} for r in rows]

    def guidance(self, trajectory_id: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        q, args = "SELECT * FROM guidance WHERE 1=1", []
        if trajectory_id is not None:
            q, args = q + " AND trajectory_id=?", [*args, trajectory_id]
        if status is not None:
            q, args = q + " AND status=?", [*args, status]
        with self._conn() as c:
            rows = c.execute(q + " ORDER BY seq", args).fetchall()
        return [{**dict(r), "meta": json.loads(r["meta"])} for r in rows]
