"""The guidance store's database connection: one SQLAlchemy engine (pool) per database per process,
write and read transactions, and the schema (created, and columns an older file lacks added).

SQLite (WAL; writers in one process queue on a :class:`WriteLock`, across processes ``BEGIN
IMMEDIATE`` and the busy timeout serialize them) or PostgreSQL. The write lock has a fast lane: a
waiting *urgent* writer (an annotator's message) goes before the waiting agent batches, so a person's
post waits for at most the transaction in progress, not for the queue of rollout writes (under load
that queue is most of what a post waited for: issue 32). The tables are :mod:`apollo.guidance.tables`; what is
stored and how is :class:`apollo.guidance.store.GuidanceStore`, which is a :class:`Database`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, inspect
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.pool import StaticPool

from apollo.guidance.tables import _ENGINES, _ENGINES_LOCK, _sqlite_on_begin, _sqlite_on_connect, db_url, metadata


class WriteLock:
    """The in-process writers' lock of one database; ``acquire(urgent=True)`` goes before every
    ordinary waiter (each release wakes one waiter: an urgent one if any)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._urgent_cv = threading.Condition(self._mutex)
        self._normal_cv = threading.Condition(self._mutex)
        self._held = False
        self._urgent = 0  # urgent writers waiting

    def acquire(self, urgent: bool = False) -> None:
        with self._mutex:
            if urgent:
                self._urgent += 1
                try:
                    while self._held:
                        self._urgent_cv.wait()
                finally:
                    self._urgent -= 1
            else:
                while self._held or self._urgent:
                    self._normal_cv.wait()
            self._held = True

    def release(self) -> None:
        with self._mutex:
            self._held = False
            (self._urgent_cv if self._urgent else self._normal_cv).notify()


class Database:
    """A connection to the guidance database: a file path (SQLite) or a SQLAlchemy URL (PostgreSQL)."""

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
        self._wlock = WriteLock() if self.is_sqlite else None
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
    def _write(self, urgent: bool = False) -> Iterator[Connection]:
        """A write transaction; ``urgent``: ahead of the other writers of this process waiting."""
        lock = self._wlock
        if lock is not None:
            lock.acquire(urgent)
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
