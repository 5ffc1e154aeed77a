"""The guidance store's tables, errors and small codecs (the schema :mod:`apollo.guidance.store` uses).

Columns are only ever added (``apollo.guidance.db.Database._migrate`` adds what an older file lacks).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Float, Index, Integer, MetaData, String, Table, Text
from sqlalchemy.engine import Connection, Engine

metadata = MetaData()

trajectories_t = Table(
    "trajectories", metadata,
    Column("trajectory_id", String(255), primary_key=True),
    Column("task_id", String(255), nullable=False),
    Column("status", String(32), nullable=False),
    Column("started_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("ended_at", Float),
    Column("session", String(64), nullable=False, server_default=""),
    Column("epoch", Integer, nullable=False, server_default="0"),
    Column("step_count", Integer, nullable=False, server_default="0"),
    Column("latest_score", Float),
    Column("final_score", Float),
    Column("meta", Text, nullable=False, server_default="{}"),
    Column("owner", String(64), nullable=False, server_default=""),
    Column("heartbeat_at", Float),
)

steps_t = Table(
    "steps", metadata,
    Column("trajectory_id", String(255), primary_key=True),
    Column("step_index", Integer, primary_key=True, autoincrement=False),
    Column("tool", String(255)),
    Column("arguments", Text, nullable=False),
    Column("observation", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("assistant_text", Text, nullable=False, server_default=""),
    Column("detail", Text, nullable=False, server_default="{}"),
)

guidance_t = Table(
    "guidance", metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("guidance_id", String(64), unique=True, nullable=False),
    Column("trajectory_id", String(255), nullable=False),
    Column("text", Text, nullable=False),
    Column("author", String(255), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("available_at", Float, nullable=False),
    Column("status", String(32), nullable=False, server_default="pending"),
    Column("delivered_at", Float),
    Column("delivered_step", Integer),
    Column("meta", Text, nullable=False, server_default="{}"),
    Column("acknowledged_at", Float),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("auth_tag", String(64)),
    Column("at_step", Integer),  # not before this step boundary (None: as soon as it is available)
    Index("guidance_pending", "trajectory_id", "status", "available_at"),
    sqlite_autoincrement=True,
)

records_t = Table(
    "records", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("trajectory_id", String(255), nullable=False),
    Column("step_index", Integer),
    Column("kind", String(32), nullable=False),
    Column("ref", String(1024), nullable=False, server_default=""),
    Column("key", String(255), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("data", Text, nullable=False),
    Index("records_key", "trajectory_id", "key", unique=True),
    Index("records_kind", "trajectory_id", "kind", "ref"),
    sqlite_autoincrement=True,
)

events_t = Table(
    "events", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("trajectory_id", String(255)),
    Column("kind", String(32), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("data", Text, nullable=False, server_default="{}"),
    Index("events_traj", "trajectory_id", "id"),
    sqlite_autoincrement=True,
)


_ENGINES: dict[tuple[Any, ...], tuple[Engine, Any]] = {}  # key -> (engine, its WriteLock or None)
_ENGINES_LOCK = threading.Lock()


class StoreError(ValueError):
    """A request the store refuses (the service answers 4xx)."""

    status = 400


class NotFound(StoreError):
    status = 404


class Forbidden(StoreError):
    """A write on a trajectory that another agent token registered."""

    status = 403


MAX_INDEX = 2**31 - 1


def as_index(v: Any, what: str = "step_index") -> int:
    """A step index from a request: an int in [0, 2**31-1] (a bool, a float or a string is refused)."""
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_INDEX:
        raise StoreError(f"{what} must be an integer between 0 and {MAX_INDEX}, not {v!r:.40}")
    return v


class NotRunning(StoreError):
    """Guidance for a rollout that has ended: it would never be delivered."""

    status = 409


class StaleSession(StoreError):
    """A write from an agent session that a resumed agent has replaced."""

    status = 409


def db_url(db: str | Path) -> str:
    """A SQLAlchemy URL from a URL or a file path (a path means SQLite)."""
    s = str(db)
    if "://" in s:
        return s
    return f"sqlite:///{Path(s).expanduser().resolve()}"


def _j(v: Any) -> str:
    return json.dumps(v, default=str, ensure_ascii=False)


def _unj(s: str | None, default: Any = None) -> Any:
    if not s:
        return {} if default is None else default
    try:
        return json.loads(s)
    except ValueError:
        return {} if default is None else default


def guidance_state(row: dict[str, Any]) -> str:
    st = row.get("status")
    if st == "delivered":
        return "acknowledged" if row.get("acknowledged_at") is not None else "delivered"
    return st if st in ("expired", "rejected") else "pending"


def _meta(s: str | None) -> dict[str, Any]:
    m = _unj(s)
    return m if isinstance(m, dict) else {}


def _guidance_dict(r: Any) -> dict[str, Any]:
    d = dict(r._mapping)
    d["meta"] = _unj(d.get("meta"))
    d["state"] = guidance_state(d)
    return d


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN itself (see _sqlite_on_begin)
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes (not power loss) in WAL
    cur.execute("PRAGMA busy_timeout=60000")
    cur.close()


def _sqlite_on_begin(conn: Connection) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("apollo_write") else "BEGIN")
