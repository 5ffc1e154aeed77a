"""The guidance store: running trajectories stream their steps in, annotators post guidance.

SQLAlchemy Core over SQLite (WAL, the default, a file under ``data/store/``) or PostgreSQL (give a
``postgresql+psycopg://…`` URL). Safe across processes: rollout workers, the simulated annotator
and the service (``apollo serve``) may all open the same database.

Guidance life cycle::

    pending ──take/deliver at a step boundary──▶ delivered (trajectory, step index, time)
            ──the step is posted──▶ acknowledged (the message is part of a recorded step)

``status`` is ``pending`` or ``delivered``; ``acknowledged_at`` marks the acknowledgement. A
delivery that is never acknowledged (the agent died between taking the message and recording the
step) is *provisional*: :meth:`GuidanceStore.register` of the same trajectory (a resumed agent) and
:meth:`GuidanceStore.end` put it back to ``pending`` (``attempts`` counts the tries), so a message
ends up in exactly one recorded step, or in none (then it is still pending and the guidance stage
reports it as never delivered).

Exactly-once: delivery is a conditional ``UPDATE … WHERE status='pending'`` inside one write
transaction (``BEGIN IMMEDIATE`` on SQLite), so two readers can never both take the same message.
Every agent-side write is idempotent (a step is keyed by its index, a delivery by the message id, a
record by its key, a message by its client-chosen id), so clients retry freely after a timeout or a
service restart. A resumed agent registers with a new ``session``; writes carrying an older session
are refused (:class:`StaleSession`), so a zombie agent cannot deliver or record anything.

Every change also appends a row to ``events``: the service's live feed (SSE) reads it, which works
across processes and across service restarts.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    create_engine,
    event,
    func,
    inspect,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.pool import StaticPool

from apollo.guidance.records import derive_record, score_of
from apollo.schema import Guidance

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


_ENGINES: dict[tuple[Any, ...], tuple[Engine, threading.Lock | None]] = {}
_ENGINES_LOCK = threading.Lock()


class StoreError(ValueError):
    """A request the store refuses (the service answers 4xx)."""

    status = 400


class NotFound(StoreError):
    status = 404


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
    if row.get("status") == "delivered":
        return "acknowledged" if row.get("acknowledged_at") is not None else "delivered"
    return "pending"


def _guidance_dict(r: Any) -> dict[str, Any]:
    d = dict(r._mapping)
    d["meta"] = _unj(d.get("meta"))
    d["state"] = guidance_state(d)
    return d


class GuidanceStore:
    """The store; open it with a file path (SQLite) or a SQLAlchemy URL (PostgreSQL)."""

    def __init__(self, path: str | Path, *, pool_size: int = 8):
        self.url = db_url(path)
        self.is_sqlite = self.url.startswith("sqlite")
        self.path: Path | None = None
        if self.is_sqlite:
            file = self.url.split(":///", 1)[1] if ":///" in self.url else ""
            if file and file != ":memory:":
                self.path = Path(file)
                self.path.parent.mkdir(parents=True, exist_ok=True)
        # one engine (pool) per database per process: the rollout stage opens a store per job
        key = self._cache_key()
        with _ENGINES_LOCK:
            shared = _ENGINES.get(key) if key else None
        if shared is not None:
            self.engine, self._wlock = shared
            return
        if self.is_sqlite:
            pool: dict[str, Any] = ({"pool_size": pool_size, "max_overflow": 4 * pool_size, "pool_timeout": 60}
                                    if self.path is not None else {"poolclass": StaticPool})  # :memory: is per connection
            self.engine: Engine = create_engine(
                self.url, connect_args={"check_same_thread": False, "timeout": 60.0}, **pool)
            event.listen(self.engine, "connect", _sqlite_on_connect)
            event.listen(self.engine, "begin", _sqlite_on_begin)
        else:
            self.engine = create_engine(self.url, pool_size=pool_size, max_overflow=4 * pool_size,
                                        pool_pre_ping=True)
        # writers inside one process queue on a lock (fast hand-off) rather than on SQLite's busy
        # handler (sleeps up to 100 ms); across processes BEGIN IMMEDIATE + busy_timeout serialize them
        self._wlock = threading.Lock() if self.is_sqlite else None
        self._create_schema()
        key = self._cache_key()  # a new SQLite file exists now
        if key:
            with _ENGINES_LOCK:
                _ENGINES.setdefault(key, (self.engine, self._wlock))

    def _cache_key(self) -> tuple[Any, ...] | None:
        if not self.is_sqlite:
            return (self.url, os.getpid())
        if self.path is None:
            return None  # in-memory: every store is its own database
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (self.url, os.getpid(), st.st_dev, st.st_ino)  # a deleted and re-created file is another database

    # --- plumbing ---------------------------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator[Connection]:
        lock = self._wlock
        if lock is not None:
            lock.acquire()
        try:
            with self.engine.connect() as conn:
                conn.execution_options(apollo_write=True)
                with conn.begin():
                    yield conn
        finally:
            if lock is not None:
                lock.release()

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            with conn.begin():
                yield conn

    def _create_schema(self) -> None:
        for attempt in range(5):
            try:
                with self._write() as c:
                    metadata.create_all(c, checkfirst=True)
                    self._migrate(c)
                return
            except (OperationalError, ProgrammingError, IntegrityError):
                if attempt == 4:  # another process creating the same schema at the same time
                    raise
                time.sleep(0.2 * (attempt + 1))

    def _migrate(self, c: Connection) -> None:
        """Add the columns an older store file lacks (additive only)."""
        insp = inspect(c)
        for table in metadata.sorted_tables:
            have = {col["name"] for col in insp.get_columns(table.name)}
            for col in table.columns:
                if col.name in have:
                    continue
                ddl = f"ALTER TABLE {table.name} ADD COLUMN {col.name} {col.type.compile(c.dialect)}"
                if col.server_default is not None:
                    ddl += f" NOT NULL DEFAULT '{col.server_default.arg}'"
                c.exec_driver_sql(ddl)

    def close(self) -> None:
        """Release this process's connections to the database (every store on it shares them)."""
        with _ENGINES_LOCK:
            for k in [k for k, (e, _) in _ENGINES.items() if e is self.engine]:
                del _ENGINES[k]
        self.engine.dispose()

    @staticmethod
    def _event(c: Connection, kind: str, trajectory_id: str | None, **data: Any) -> None:
        c.execute(insert(events_t).values(trajectory_id=trajectory_id, kind=kind, created_at=time.time(),
                                          data=_j(data)))

    @staticmethod
    def _check_session(c: Connection, trajectory_id: str, session: str | None) -> dict[str, Any]:
        row = c.execute(select(trajectories_t).where(trajectories_t.c.trajectory_id == trajectory_id)).first()
        if row is None:
            raise NotFound(f"trajectory {trajectory_id!r} is not registered")
        if session and row.session and row.session != session:
            raise StaleSession(f"trajectory {trajectory_id!r} was resumed by another agent session")
        return dict(row._mapping)

    # --- agent side -------------------------------------------------------------------------
    def register(self, trajectory_id: str, task_id: str, *, meta: dict[str, Any] | None = None,
                 session: str | None = None) -> dict[str, Any]:
        """Start (or resume) a trajectory.

        Resuming puts back to ``pending`` what was delivered to the previous session but never
        acknowledged. Returns ``{"session", "epoch", "next_step", "requeued", "resumed"}``.
        """
        with self._write() as c:
            return self._register(c, trajectory_id, task_id, meta, session)

    def _register(self, c: Connection, trajectory_id: str, task_id: str, meta: dict[str, Any] | None,
                  session: str | None) -> dict[str, Any]:
        now = time.time()
        session = session or uuid.uuid4().hex
        t = trajectories_t
        row = c.execute(select(t).where(t.c.trajectory_id == trajectory_id)).first()
        if row is not None and row.session == session:  # a retried register: nothing to do
            return {"session": session, "epoch": row.epoch, "next_step": row.step_count,
                    "requeued": 0, "resumed": row.epoch > 1}
        requeued = 0
        if row is None:
            epoch, step_count = 1, 0
            c.execute(insert(t).values(trajectory_id=trajectory_id, task_id=task_id, status="running",
                                       started_at=now, updated_at=now, session=session, epoch=epoch,
                                       meta=_j(meta or {})))
        else:
            epoch = (row.epoch or 0) + 1
            merged = {**_unj(row.meta), **(meta or {})}
            step_count = c.execute(select(func.count()).select_from(steps_t)
                                   .where(steps_t.c.trajectory_id == trajectory_id)).scalar_one()
            c.execute(update(t).where(t.c.trajectory_id == trajectory_id).values(
                task_id=task_id, status="running", updated_at=now, ended_at=None, session=session,
                epoch=epoch, meta=_j(merged), step_count=step_count))
            requeued = self._requeue(c, trajectory_id)
        self._event(c, "trajectory", trajectory_id, status="running", epoch=epoch, requeued=requeued)
        return {"session": session, "epoch": epoch, "next_step": step_count, "requeued": requeued,
                "resumed": row is not None}

    def _requeue(self, c: Connection, trajectory_id: str) -> int:
        g = guidance_t
        rows = c.execute(
            update(g).where(and_(g.c.trajectory_id == trajectory_id, g.c.status == "delivered",
                                 g.c.acknowledged_at.is_(None)))
            .values(status="pending", delivered_at=None, delivered_step=None, attempts=g.c.attempts + 1)
            .returning(g.c.guidance_id)
        ).all()
        for r in rows:
            self._event(c, "guidance", trajectory_id, guidance_id=r.guidance_id, state="pending", requeued=True)
        return len(rows)

    def post_step(self, trajectory_id: str, step_index: int, tool: str | None, arguments: dict[str, Any],
                  observation: str, *, assistant_text: str | None = None, detail: dict[str, Any] | None = None,
                  guidance_ids: list[str] | None = None, session: str | None = None,
                  step: Any = None, summary: Any = None) -> dict[str, Any]:
        """Record a finished step (idempotent by index) and acknowledge the guidance delivered at it.

        ``step`` (an :class:`apollo.schema.Step`) or ``assistant_text``/``detail`` add what the
        annotator UI shows: the model's text, the observation flags, the context window reference;
        ``summary`` (the :class:`apollo.schema.Summary` the step's window starts with) lets the
        service rebuild that window exactly.
        """
        if step is not None:
            assistant_text, extra = step_detail(step)
            detail = {**extra, **(detail or {})}
            guidance_ids = guidance_ids if guidance_ids is not None else [g.guidance_id for g in step.guidance]
        with self._write() as c:
            return self._post_step(c, trajectory_id, step_index, tool, arguments, observation,
                                   assistant_text or "", detail or {}, guidance_ids, session,
                                   summary_dict(summary))

    def _post_step(self, c: Connection, trajectory_id: str, step_index: int, tool: str | None,
                   arguments: dict[str, Any], observation: str, assistant_text: str, detail: dict[str, Any],
                   guidance_ids: list[str] | None, session: str | None,
                   summary: dict[str, Any] | None = None) -> dict[str, Any]:
        now = time.time()
        step_index = int(step_index)
        traj = self._check_session(c, trajectory_id, session) if session else None
        s = steps_t
        values = dict(tool=tool, arguments=_j(arguments or {}), observation=observation or "",
                      created_at=now, assistant_text=assistant_text, detail=_j(detail))
        exists = c.execute(select(s.c.step_index).where(and_(s.c.trajectory_id == trajectory_id,
                                                            s.c.step_index == step_index))).first()
        if exists:
            c.execute(update(s).where(and_(s.c.trajectory_id == trajectory_id, s.c.step_index == step_index))
                      .values(**values))
        else:
            c.execute(insert(s).values(trajectory_id=trajectory_id, step_index=step_index, **values))
        # acknowledge: what was delivered at this step (plus ids the agent says it injected here)
        g = guidance_t
        if guidance_ids:
            c.execute(update(g).where(and_(g.c.trajectory_id == trajectory_id, g.c.status == "pending",
                                           g.c.guidance_id.in_(guidance_ids)))
                      .values(status="delivered", delivered_step=step_index, delivered_at=now))
        cond = [g.c.trajectory_id == trajectory_id, g.c.status == "delivered", g.c.acknowledged_at.is_(None),
                g.c.delivered_step == step_index]
        acked = c.execute(update(g).where(and_(*cond)).values(acknowledged_at=now)
                          .returning(g.c.guidance_id)).all()
        for r in acked:
            self._event(c, "guidance", trajectory_id, guidance_id=r.guidance_id, state="acknowledged",
                        step=step_index)
        # records derived from the step (terminal output, file diffs, search logs)
        n_rec = self._derive_records(c, trajectory_id, step_index, tool, arguments, observation)
        if summary and isinstance(summary.get("index"), int):
            self._insert_record(c, trajectory_id, "summary", summary, step_index=summary.get("before_step"),
                                key=f"summary:{summary['index']}", ref=str(summary["index"]))
        score = detail.get("score") if isinstance(detail.get("score"), (int, float)) else score_of(tool, observation)
        t = trajectories_t
        bigger = func.max if self.is_sqlite else func.greatest  # scalar max of two values
        upd: dict[str, Any] = {"updated_at": now, "step_count": bigger(t.c.step_count, step_index + 1)}
        if score is not None:
            upd["latest_score"] = float(score)
        if traj is None:
            traj = c.execute(select(t.c.trajectory_id).where(t.c.trajectory_id == trajectory_id)).first()
            if traj is None:  # steps of an unregistered trajectory: register it on the fly
                c.execute(insert(t).values(trajectory_id=trajectory_id, task_id="?", status="running",
                                           started_at=now, updated_at=now, epoch=1))
        c.execute(update(t).where(t.c.trajectory_id == trajectory_id).values(**upd))
        self._event(c, "step", trajectory_id, step=step_index, tool=tool, records=n_rec,
                    acknowledged=len(acked), score=score)
        return {"step": step_index, "acknowledged": [r.guidance_id for r in acked]}

    def _derive_records(self, c: Connection, trajectory_id: str, step_index: int, tool: str | None,
                        arguments: dict[str, Any], observation: str) -> int:
        known = None
        if tool in ("create_file", "edit_file"):
            known = self._file_content(c, trajectory_id, (arguments or {}).get("path"))
        rec = derive_record(tool, arguments or {}, observation or "", known)
        if rec is None:
            return 0
        return self._insert_record(c, trajectory_id, rec["kind"], rec["data"], step_index=step_index,
                                   key=f"step:{step_index}", ref=rec["ref"])

    def _file_content(self, c: Connection, trajectory_id: str, path: Any) -> str | None:
        from apollo.guidance.records import norm_path

        r = records_t
        row = c.execute(select(r.c.data).where(and_(r.c.trajectory_id == trajectory_id,
                                                    r.c.kind.in_(("file", "view")),
                                                    r.c.ref == norm_path(path)))
                        .order_by(r.c.id.desc()).limit(1)).first()
        return _unj(row.data).get("content_after") if row else None

    def _insert_record(self, c: Connection, trajectory_id: str, kind: str, data: dict[str, Any], *,
                       step_index: int | None, key: str, ref: str = "") -> int:
        r = records_t
        if c.execute(select(r.c.id).where(and_(r.c.trajectory_id == trajectory_id, r.c.key == key))).first():
            return 0  # a retried post
        c.execute(insert(r).values(trajectory_id=trajectory_id, step_index=step_index, kind=kind, ref=ref or "",
                                   key=key, created_at=time.time(), data=_j(data)))
        return 1

    def post_record(self, trajectory_id: str, kind: str, data: dict[str, Any], *, step_index: int | None = None,
                    key: str | None = None, ref: str = "", session: str | None = None) -> int:
        """An agent-reported record (live terminal output, an exact file diff, a search log)."""
        if kind not in ("terminal", "file", "search"):
            raise StoreError(f"record kind must be terminal, file or search, not {kind!r}")
        with self._write() as c:
            return self._post_record(c, trajectory_id, kind, data, step_index, key, ref, session)

    def _post_record(self, c: Connection, trajectory_id: str, kind: str, data: dict[str, Any],
                     step_index: int | None, key: str | None, ref: str, session: str | None) -> int:
        self._check_session(c, trajectory_id, session)
        n = self._insert_record(c, trajectory_id, kind, data, step_index=step_index,
                                key=f"agent:{key or uuid.uuid4().hex}", ref=ref)
        if n:
            self._event(c, "record", trajectory_id, record_kind=kind, step=step_index)
        return n

    def end(self, trajectory_id: str, status: str = "finished", *, final_score: float | None = None,
            session: str | None = None) -> None:
        """The trajectory is over; unacknowledged deliveries go back to pending."""
        with self._write() as c:
            self._end(c, trajectory_id, status, final_score, session)

    def _end(self, c: Connection, trajectory_id: str, status: str, final_score: float | None,
             session: str | None) -> None:
        if session:
            self._check_session(c, trajectory_id, session)
        now = time.time()
        vals: dict[str, Any] = {"status": status, "updated_at": now, "ended_at": now}
        if final_score is not None:
            vals["final_score"] = float(final_score)
            vals["latest_score"] = float(final_score)
        c.execute(update(trajectories_t).where(trajectories_t.c.trajectory_id == trajectory_id).values(**vals))
        self._requeue(c, trajectory_id)
        self._event(c, "trajectory", trajectory_id, status=status, final_score=final_score)

    def take_pending(self, trajectory_id: str, step_index: int, now: float | None = None) -> list[Guidance]:
        """Guidance that is due, in posting order, marked delivered at ``step_index`` (exactly once).

        Idempotent per step: asking again for the same step returns what that step already got
        (plus what became due since), so a retried request loses nothing.
        """
        now = time.time() if now is None else now
        with self._write() as c:
            rows = self._take(c, trajectory_id, int(step_index), now)
        return [to_guidance(r) for r in rows]

    def _take(self, c: Connection, trajectory_id: str, step_index: int, now: float) -> list[dict[str, Any]]:
        g = guidance_t
        newly = c.execute(
            update(g).where(and_(g.c.trajectory_id == trajectory_id, g.c.status == "pending",
                                 g.c.available_at <= now))
            .values(status="delivered", delivered_at=now, delivered_step=step_index)
            .returning(g.c.guidance_id)
        ).all()
        for r in newly:
            self._event(c, "guidance", trajectory_id, guidance_id=r.guidance_id, state="delivered",
                        step=step_index)
        rows = c.execute(select(g).where(and_(g.c.trajectory_id == trajectory_id, g.c.status == "delivered",
                                              g.c.delivered_step == step_index, g.c.acknowledged_at.is_(None)))
                         .order_by(g.c.seq)).all()
        return [_guidance_dict(r) for r in rows]

    def pending(self, trajectory_ids: Iterable[str], now: float | None = None) -> dict[str, list[dict[str, Any]]]:
        """Due pending guidance per trajectory, in order, without taking it (the agent's poll)."""
        ids = list(dict.fromkeys(trajectory_ids))
        if not ids:
            return {}
        now = time.time() if now is None else now
        g = guidance_t
        out: dict[str, list[dict[str, Any]]] = {t: [] for t in ids}
        with self._read() as c:
            for r in c.execute(select(g.c.seq, g.c.guidance_id, g.c.trajectory_id, g.c.text, g.c.author,
                                      g.c.created_at, g.c.available_at)
                               .where(and_(g.c.trajectory_id.in_(ids), g.c.status == "pending",
                                           g.c.available_at <= now)).order_by(g.c.seq)):
                out[r.trajectory_id].append(dict(r._mapping))
        return out

    def deliver(self, trajectory_id: str, step_index: int, guidance_ids: list[str],
                delivered_at: float | None = None, session: str | None = None) -> list[dict[str, Any]]:
        """Mark messages the agent injected at ``step_index`` as delivered (idempotent)."""
        with self._write() as c:
            return self._deliver(c, trajectory_id, int(step_index), guidance_ids, delivered_at, session)

    def _deliver(self, c: Connection, trajectory_id: str, step_index: int, guidance_ids: list[str],
                 delivered_at: float | None, session: str | None) -> list[dict[str, Any]]:
        if session:
            self._check_session(c, trajectory_id, session)
        at = time.time() if delivered_at is None else float(delivered_at)
        g = guidance_t
        newly = c.execute(
            update(g).where(and_(g.c.trajectory_id == trajectory_id, g.c.status == "pending",
                                 g.c.guidance_id.in_(list(guidance_ids))))
            .values(status="delivered", delivered_at=at, delivered_step=step_index)
            .returning(g.c.guidance_id)
        ).all()
        for r in newly:
            self._event(c, "guidance", trajectory_id, guidance_id=r.guidance_id, state="delivered",
                        step=step_index)
        rows = c.execute(select(g).where(and_(g.c.trajectory_id == trajectory_id,
                                              g.c.guidance_id.in_(list(guidance_ids)))).order_by(g.c.seq)).all()
        return [_guidance_dict(r) for r in rows]

    def apply_ops(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Apply a batch of agent operations in order, in one transaction (the service's sync call).

        Each op is ``{"op": register|step|deliver|record|end, "trajectory_id": …, "session": …, …}``.
        A stale-session op is answered ``{"error": "stale_session"}`` and skipped; the others apply.
        """
        results: list[dict[str, Any]] = []
        with self._write() as c:
            for op in ops:
                kind, tid, sess = op.get("op"), op.get("trajectory_id"), op.get("session")
                if not tid:
                    raise StoreError("every op needs a trajectory_id")
                try:
                    with c.begin_nested():
                        if kind == "register":
                            res: Any = self._register(c, tid, op.get("task_id") or "?", op.get("meta"), sess)
                        elif kind == "step":
                            res = self._post_step(c, tid, int(op["step_index"]), op.get("tool"),
                                                  op.get("arguments") or {}, op.get("observation") or "",
                                                  op.get("assistant_text") or "", op.get("detail") or {},
                                                  op.get("guidance_ids"), sess, op.get("summary"))
                        elif kind == "deliver":
                            res = [r["guidance_id"] for r in self._deliver(
                                c, tid, int(op["step_index"]), op.get("guidance_ids") or [],
                                op.get("delivered_at"), sess)]
                        elif kind == "record":
                            if op.get("kind") not in ("terminal", "file", "search"):
                                raise StoreError(f"bad record kind {op.get('kind')!r}")
                            res = self._post_record(c, tid, op["kind"], op.get("data") or {}, op.get("step_index"),
                                                    op.get("key"), op.get("ref") or "", sess)
                        elif kind == "end":
                            self._end(c, tid, op.get("status") or "finished", op.get("final_score"), sess)
                            res = True
                        else:
                            raise StoreError(f"unknown op {kind!r}")
                    results.append({"ok": True, "result": res})
                except StaleSession as e:
                    results.append({"ok": False, "error": "stale_session", "detail": str(e)})
                except NotFound as e:
                    results.append({"ok": False, "error": "not_found", "detail": str(e)})
                except StoreError:
                    raise
                except (KeyError, TypeError, ValueError) as e:
                    raise StoreError(f"bad {kind} op: {type(e).__name__}: {e}") from e
        return results

    # --- annotator side ---------------------------------------------------------------------
    def post_guidance(self, trajectory_id: str, text: str, *, author: str = "annotator", delay_s: float = 0.0,
                      meta: dict[str, Any] | None = None, guidance_id: str | None = None) -> str:
        """Queue a message for a trajectory; returns its id. With ``guidance_id`` a retry is a no-op."""
        return self.add_guidance(trajectory_id, text, author=author, delay_s=delay_s, meta=meta,
                                 guidance_id=guidance_id)["guidance_id"]

    def add_guidance(self, trajectory_id: str, text: str, *, author: str = "annotator", delay_s: float = 0.0,
                     meta: dict[str, Any] | None = None, guidance_id: str | None = None) -> dict[str, Any]:
        """Like :meth:`post_guidance`; returns the stored row (``created`` False for a retry)."""
        if not isinstance(text, str) or not text.strip():
            raise StoreError("guidance text is empty")
        gid = guidance_id or uuid.uuid4().hex
        now = time.time()
        g = guidance_t
        try:
            with self._write() as c:
                old = c.execute(select(g).where(g.c.guidance_id == gid)).first()
                if old is not None:
                    if old.trajectory_id != trajectory_id or old.text != text:
                        raise StoreError(f"guidance id {gid!r} is already used for another message")
                    return {**_guidance_dict(old), "created": False}
                c.execute(insert(g).values(guidance_id=gid, trajectory_id=trajectory_id, text=text, author=author,
                                           created_at=now, available_at=now + max(0.0, float(delay_s)),
                                           meta=_j(meta or {})))
                self._event(c, "guidance", trajectory_id, guidance_id=gid, state="pending")
                row = c.execute(select(g).where(g.c.guidance_id == gid)).one()
                return {**_guidance_dict(row), "created": True}
        except IntegrityError:  # the same id inserted concurrently by a retry (PostgreSQL)
            with self._read() as c:
                row = c.execute(select(g).where(g.c.guidance_id == gid)).one()
            return {**_guidance_dict(row), "created": False}

    def guidance_by_id(self, guidance_id: str) -> dict[str, Any] | None:
        with self._read() as c:
            row = c.execute(select(guidance_t).where(guidance_t.c.guidance_id == guidance_id)).first()
        return _guidance_dict(row) if row is not None else None

    def running(self) -> list[dict[str, Any]]:
        return self.trajectories(status="running")

    def trajectories(self, status: str | None = None) -> list[dict[str, Any]]:
        t, g = trajectories_t, guidance_t
        pend = (select(g.c.trajectory_id, func.count().label("n")).where(g.c.status == "pending")
                .group_by(g.c.trajectory_id).subquery())
        q = select(t, func.coalesce(pend.c.n, 0).label("pending_guidance")).outerjoin(
            pend, pend.c.trajectory_id == t.c.trajectory_id)
        if status is not None:
            q = q.where(t.c.status == status)
        with self._read() as c:
            rows = c.execute(q.order_by(t.c.started_at)).all()
        out = []
        for r in rows:
            d = dict(r._mapping)
            d["meta"] = _unj(d.get("meta"))
            d.pop("session", None)
            out.append(d)
        return out

    def trajectory(self, trajectory_id: str) -> dict[str, Any]:
        t = trajectories_t
        with self._read() as c:
            r = c.execute(select(t).where(t.c.trajectory_id == trajectory_id)).first()
        if r is None:
            raise NotFound(f"no trajectory {trajectory_id!r}")
        d = dict(r._mapping)
        d["meta"] = _unj(d.get("meta"))
        d.pop("session", None)
        return d

    def steps(self, trajectory_id: str, since: int = 0, *, full: bool = False,
              query: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Steps in order; ``full`` adds the model's text and the step detail; ``query`` filters them
        by a case-insensitive keyword in the tool, arguments, model text or observation."""
        s = steps_t
        cols = [s.c.trajectory_id, s.c.step_index, s.c.tool, s.c.arguments, s.c.observation, s.c.created_at]
        if full or query:
            cols += [s.c.assistant_text, s.c.detail]
        q = select(*cols).where(and_(s.c.trajectory_id == trajectory_id, s.c.step_index >= since))
        if query:
            like = f"%{query.lower()}%"
            q = q.where(or_(func.lower(s.c.observation).like(like), func.lower(s.c.arguments).like(like),
                            func.lower(s.c.assistant_text).like(like), func.lower(s.c.tool).like(like)))
        q = q.order_by(s.c.step_index)
        if limit:
            q = q.limit(limit)
        with self._read() as c:
            rows = c.execute(q).all()
        out = []
        for r in rows:
            d = dict(r._mapping)
            d["arguments"] = _unj(d["arguments"])
            if "detail" in d:
                d["detail"] = _unj(d["detail"])
                if not full:
                    d.pop("detail")
                    d.pop("assistant_text")
            out.append(d)
        return out

    def step(self, trajectory_id: str, step_index: int) -> dict[str, Any]:
        rows = self.steps(trajectory_id, step_index, full=True, limit=1)
        if not rows or rows[0]["step_index"] != step_index:
            raise NotFound(f"trajectory {trajectory_id!r} has no step {step_index}")
        return rows[0]

    def guidance(self, trajectory_id: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        g = guidance_t
        q = select(g)
        if trajectory_id is not None:
            q = q.where(g.c.trajectory_id == trajectory_id)
        if status is not None:
            q = q.where(g.c.status == status)
        with self._read() as c:
            rows = c.execute(q.order_by(g.c.seq)).all()
        return [_guidance_dict(r) for r in rows]

    def records(self, trajectory_id: str, kind: str | None = None, since_id: int = 0,
                limit: int = 2000) -> list[dict[str, Any]]:
        r = records_t
        q = select(r).where(and_(r.c.trajectory_id == trajectory_id, r.c.id > since_id))
        q = q.where(r.c.kind == kind) if kind else q.where(r.c.kind.in_(("terminal", "file", "search")))
        with self._read() as c:
            rows = c.execute(q.order_by(r.c.id).limit(limit)).all()
        out = []
        for row in rows:
            d = dict(row._mapping)
            d["data"] = _unj(d["data"])
            d["data"].pop("content_after", None)
            out.append(d)
        return out

    def events(self, after: int = 0, trajectory_id: str | None = None, limit: int = 500) -> list[dict[str, Any]]:
        e = events_t
        q = select(e).where(e.c.id > after)
        if trajectory_id:
            q = q.where(or_(e.c.trajectory_id == trajectory_id, e.c.trajectory_id.is_(None)))
        with self._read() as c:
            rows = c.execute(q.order_by(e.c.id).limit(limit)).all()
        return [{**dict(r._mapping), "data": _unj(r.data)} for r in rows]

    def last_event_id(self) -> int:
        with self._read() as c:
            return int(c.execute(select(func.max(events_t.c.id))).scalar() or 0)

    def context(self, trajectory_id: str, step_index: int) -> dict[str, Any]:
        """The context window the model saw at a step.

        The agent's own report (``detail["context"]``) when it sent one; otherwise rebuilt exactly
        as the agent builds it (``apollo.agent.prompt.context_messages``) from the registered prefix,
        the recorded steps and the guidance delivered at each step. A rebuilt window is exact when
        the agent reported its steps in full (model text, context reference).
        """
        from apollo.agent.prompt import context_messages
        from apollo.schema import Action, Observation, Step, Summary, Trajectory

        traj = self.trajectory(trajectory_id)
        target = self.step(trajectory_id, step_index)
        detail = target.get("detail") or {}
        if isinstance(detail.get("context"), list):
            return {"messages": detail["context"], "source": "agent", "notes": []}
        notes: list[str] = []
        by_step: dict[int, list[Guidance]] = {}
        for g in self.guidance(trajectory_id, status="delivered"):
            if g["delivered_step"] is not None and g["delivered_step"] <= step_index:
                by_step.setdefault(g["delivered_step"], []).append(to_guidance(g))
        rows = {s["step_index"]: s for s in self.steps(trajectory_id, 0, full=True) if s["step_index"] < step_index}
        steps = []
        for i in range(step_index):
            s = rows.get(i)
            if s is None:
                notes.append(f"step {i} was not reported")
                s = {"tool": None, "arguments": {}, "observation": "", "assistant_text": "", "detail": {}}
            d = s.get("detail") or {}
            if not s.get("assistant_text"):
                notes.append(f"step {i}: the model's text was not reported (only its action)")
            obs = d.get("observation") or {}
            steps.append(Step(
                index=i, assistant_text=s.get("assistant_text") or _action_text(s["tool"], s["arguments"]),
                action=Action(tool=s["tool"], arguments=s["arguments"] if isinstance(s["arguments"], dict) else {}),
                observation=Observation(text=s["observation"], truncated=bool(obs.get("truncated"))),
                guidance=by_step.get(i, []),
            ))
        meta = traj.get("meta") or {}
        prefix = meta.get("prefix_messages")
        if not isinstance(prefix, list):
            prefix = []
            notes.insert(0, "the system prompt and task text were not reported at registration")
        ctx = detail.get("context_ref") or {}
        si = ctx.get("summary_index")
        summaries: list[Summary] = []
        if si is not None:
            got = {r["ref"]: r["data"] for r in self.records(trajectory_id, "summary")}
            for k in range(int(si) + 1):
                d = got.get(str(k)) or {"index": k, "covers_from": 0, "covers_to": 0, "before_step": 0,
                                        "text": "(summary not reported to the service)"}
                summaries.append(Summary.model_validate(d))
            if str(si) not in got:
                notes.append(f"the summary #{si} this window starts with was not reported")
        t = Trajectory(trajectory_id=trajectory_id, task_id=traj["task_id"], split="train",
                       domain=str(meta.get("domain") or "?"), policy_id=str(meta.get("policy_id") or "?"),
                       prefix_messages=prefix, steps=steps, summaries=summaries)
        msgs = context_messages(t, step_index, first_step=int(ctx.get("first_step") or 0),
                                summary_index=None if si is None else int(si),
                                pending_guidance=by_step.get(step_index, []))
        return {"messages": msgs, "source": "rebuilt", "notes": sorted(set(notes), key=notes.index)[:20]}


def _action_text(tool: str | None, arguments: Any) -> str:
    if tool is None:
        return "(invalid action)"
    return f"<tool_call>{json.dumps({'name': tool, 'arguments': arguments}, ensure_ascii=False)}</tool_call>"


def to_guidance(row: dict[str, Any]) -> Guidance:
    """A store row as the schema's :class:`Guidance` (only store rows ever become guidance)."""
    return Guidance(guidance_id=row["guidance_id"], text=row["text"], author=row["author"],
                    created_at=row["created_at"], delivered_at=row.get("delivered_at"),
                    delivered_step=row.get("delivered_step"))


def summary_dict(summary: Any) -> dict[str, Any] | None:
    """A :class:`apollo.schema.Summary` (or its dict) as stored (no token arrays, no mask)."""
    if summary is None:
        return None
    d = summary if isinstance(summary, dict) else summary.model_dump()
    keep = ("index", "covers_from", "covers_to", "prev_summary_index", "before_step", "text", "prompt_tokens")
    return {k: d[k] for k in keep if k in d}


def step_detail(step: Any) -> tuple[str, dict[str, Any]]:
    """(model text, detail) of an :class:`apollo.schema.Step` for the store (no token arrays)."""
    obs = step.observation
    detail = {
        "observation": {"exit_code": obs.exit_code, "error": obs.error, "truncated": obs.truncated,
                        "refused": obs.refused},
        "parse_error": step.action.parse_error,
        "context_ref": step.context.model_dump(),
        "prompt_tokens": step.prompt_tokens,
        "started_at": step.started_at,
        "gen_time_s": step.gen_time_s,
        "wall_time_s": step.wall_time_s,
        "guidance_ids": [g.guidance_id for g in step.guidance],
    }
    return step.assistant_text, detail


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN itself (see _sqlite_on_begin)
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes (not power loss) in WAL
    cur.execute("PRAGMA busy_timeout=60000")
    cur.close()


def _sqlite_on_begin(conn: Connection) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("apollo_write") else "BEGIN")
