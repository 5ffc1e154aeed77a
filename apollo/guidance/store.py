"""The guidance store: running trajectories stream their steps in, annotators post guidance.

SQLAlchemy Core over SQLite (WAL, the default, a file under ``data/store/``) or PostgreSQL (give a
``postgresql+psycopg://…`` URL). Safe across processes: rollout workers, the simulated annotator
and the service (``apollo serve``) may all open the same database.

Guidance life cycle::

    pending ──take/deliver at a step boundary──▶ delivered (trajectory, step index, time)
            ──the step is posted──▶ acknowledged (the message is part of a recorded step)

``status`` is ``pending``, ``delivered``, ``expired`` (the trajectory ended before a step boundary
took it; a resumed trajectory makes it pending again) or ``rejected`` (its authentication tag is
missing or wrong: it was not written by the annotator path, see :mod:`apollo.guidance.auth`; never
delivered, counted in :meth:`GuidanceStore.guidance_counts`); ``acknowledged_at`` marks the
acknowledgement. A
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

Credentials: :meth:`GuidanceStore.register` answers ``secret``, the rollout's credential for that
registration (:func:`apollo.guidance.auth.rollout_secret`). Every agent operation on the rollout
(take, poll, deliver, step, record, end) and registering it again (resuming it) must present it, or
it is refused (:class:`Forbidden`) before anything changes; a store object keeps the secrets it was
answered, so the store mode (a worker writing the store directly) passes them without asking, and a
restarted worker passes the one it kept with its checkpoint (``secret=``). What an agent stores is
checked first (:mod:`apollo.guidance.inputs`: size limits, the shapes the console reads).
Ownership: operations that carry an ``owner`` (the service passes the agent token's digest) are also
refused (:class:`Forbidden`) on a trajectory another owner registered. Liveness: ``heartbeat_at`` is refreshed
while the registering process is alive (the service on each agent poll; a process writing to the
store directly by a background thread), so a rollout whose worker died without ending it shows as
*lost* (:mod:`apollo.guidance.views`).

This module holds the write side (the guidance life cycle above). The connection and schema are
:mod:`apollo.guidance.db`, the reads :mod:`apollo.guidance.queries`, the row shapes of schema objects
:mod:`apollo.guidance.rows`, the liveness thread :mod:`apollo.guidance.heartbeat`; what the UI derives
from the rows (context windows, the triage list) is :mod:`apollo.guidance.views`.
"""

from __future__ import annotations

import hmac
import logging
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import (
    and_,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from apollo.guidance.db import Database
from apollo.guidance.heartbeat import LIVE
from apollo.guidance.inputs import MAX_STEPS_AHEAD, check_record, check_register, check_step
from apollo.guidance.queries import StoreReads
from apollo.guidance.records import derive_record, score_of
from apollo.guidance.rows import step_detail, summary_dict, to_guidance
from apollo.schema import Guidance

log = logging.getLogger(__name__)

from apollo.guidance.tables import (  # noqa: F401  (re-exported: the store's public names)
    _ENGINES,
    _ENGINES_LOCK,
    MAX_INDEX,
    Forbidden,
    NotFound,
    NotRunning,
    StaleSession,
    StoreError,
    _guidance_dict,
    _j,
    _meta,
    _sqlite_on_begin,
    _sqlite_on_connect,
    _unj,
    as_index,
    db_url,
    events_t,
    guidance_state,
    guidance_t,
    metadata,
    records_t,
    steps_t,
    trajectories_t,
)


class GuidanceStore(Database, StoreReads):
    """The store; open it with a file path (SQLite) or a SQLAlchemy URL (PostgreSQL). The connection
    is :class:`~apollo.guidance.db.Database`'s, the reads :class:`~apollo.guidance.queries.StoreReads`'."""

    def __init__(self, path: str | Path, *, pool_size: int = 8, key: bytes | None = None):
        self._key = key
        self._held: dict[str, str] = {}  # rollout -> the secret this store object registered it with
        super().__init__(path, pool_size=pool_size)

    @property
    def key(self) -> bytes:
        """The guidance HMAC key (:func:`apollo.guidance.auth.load_key`), loaded on first use."""
        if self._key is None:
            from apollo.guidance.auth import load_key

            self._key = load_key(db_url=self.url)
        return self._key

    def _authentic(self, c: Connection, trajectory_id: str, rows: list[Any]) -> list[Any]:
        """The rows whose tag verifies; the others are marked ``rejected`` (never delivered)."""
        from apollo.guidance.auth import verify_row

        good, bad = [], []
        for r in rows:
            (good if verify_row(dict(r._mapping), self.key) else bad).append(r)
        if bad:
            g = guidance_t
            c.execute(update(g).where(and_(g.c.guidance_id.in_([r.guidance_id for r in bad]),
                                           g.c.status == "pending")).values(status="rejected"))
            for r in bad:
                log.warning("guidance %s of %s refused: not authenticated", r.guidance_id, trajectory_id)
                self._event(c, "guidance", trajectory_id, guidance_id=r.guidance_id, state="rejected")
        return good

    def heartbeat(self, trajectory_ids: Iterable[str]) -> None:
        """The workers of these running trajectories are alive."""
        ids = list(dict.fromkeys(trajectory_ids))
        if ids:
            t = trajectories_t
            with self._write() as c:
                c.execute(update(t).where(and_(t.c.trajectory_id.in_(ids), t.c.status == "running"))
                          .values(heartbeat_at=time.time()))

    @staticmethod
    def _check_owner(c: Connection, trajectory_id: str, owner: str | None) -> None:
        if not owner:
            return
        row = c.execute(select(trajectories_t.c.owner).where(trajectories_t.c.trajectory_id == trajectory_id)).first()
        if row is not None and row.owner and row.owner != owner:
            raise Forbidden(f"trajectory {trajectory_id!r} belongs to another agent token")

    def _insert(self, table: Any) -> Any:
        """The dialect's INSERT (SQLite and PostgreSQL both have ``ON CONFLICT``: one statement for an
        idempotent write instead of a read and a write)."""
        if self.is_sqlite:
            from sqlalchemy.dialects.sqlite import insert as dialect_insert
        else:
            from sqlalchemy.dialects.postgresql import insert as dialect_insert
        return dialect_insert(table)

    @staticmethod
    def _event(c: Connection, kind: str, trajectory_id: str | None, **data: Any) -> None:
        c.execute(insert(events_t).values(trajectory_id=trajectory_id, kind=kind, created_at=time.time(),
                                          data=_j(data)))

    def secret(self, trajectory_id: str) -> str | None:
        """The secret this store object registered ``trajectory_id`` with (None: it did not)."""
        return self._held.get(trajectory_id)

    def _presented(self, trajectory_id: str, secret: Any, owner: str | None) -> str:
        """The secret an operation presents: the one given, else (a caller without an owner, i.e.
        the store mode, never the service) the one this store object holds for the rollout."""
        if secret is not None:
            if not isinstance(secret, str):
                raise StoreError("secret must be a string")
            return secret
        return self._held.get(trajectory_id, "") if owner is None else ""

    def _secret_ok(self, row: Any, secret: str) -> bool:
        """Whether ``secret`` is the credential of the rollout's current registration."""
        if not row.session or not secret:
            return False
        from apollo.guidance.auth import rollout_secret

        return hmac.compare_digest(rollout_secret(self.key, row.trajectory_id, row.session, row.epoch or 0), secret)

    def _guard(self, c: Connection, trajectory_id: str, session: str | None, owner: str | None,
               secret: str) -> dict[str, Any]:
        """The rollout's row, read once for the checks every agent operation passes before it changes
        anything: registered (404), the same owner (403), the current session (409), its secret (403)."""
        row = c.execute(select(trajectories_t).where(trajectories_t.c.trajectory_id == trajectory_id)).first()
        if row is None:
            raise NotFound(f"trajectory {trajectory_id!r} is not registered")
        if owner and row.owner and row.owner != owner:
            raise Forbidden(f"trajectory {trajectory_id!r} belongs to another agent token")
        if session and row.session and row.session != session:
            raise StaleSession(f"trajectory {trajectory_id!r} was resumed by another agent session")
        if not self._secret_ok(row, secret):
            raise Forbidden(f"trajectory {trajectory_id!r}: the rollout's secret is missing or wrong "
                            f"(field 'secret': what register answered for this registration)")
        return dict(row._mapping)

    # --- agent side -------------------------------------------------------------------------
    def register(self, trajectory_id: str, task_id: str, *, meta: dict[str, Any] | None = None,
                 session: str | None = None, owner: str | None = None,
                 secret: str | None = None) -> dict[str, Any]:
        """Start (or resume) a trajectory.

        Resuming puts back to ``pending`` what was delivered to the previous session but never
        acknowledged; it needs the rollout's ``secret`` (this store object passes the one it holds).
        Returns ``{"session", "epoch", "next_step", "requeued", "resumed", "secret"}``: ``secret``
        is the credential every later operation on this rollout needs.
        """
        with self._write() as c:
            res = self._register(c, trajectory_id, task_id, meta, session, owner,
                                 self._presented(trajectory_id, secret, owner))
        if owner is None:
            self._held[trajectory_id] = res["secret"]
            LIVE.add(self, trajectory_id)  # this process writes the store directly: keep it alive
        return res

    def _register(self, c: Connection, trajectory_id: str, task_id: str, meta: dict[str, Any] | None,
                  session: str | None, owner: str | None = None, secret: str = "") -> dict[str, Any]:
        from apollo.guidance.auth import rollout_secret

        if not isinstance(trajectory_id, str) or not trajectory_id or len(trajectory_id) > 255:
            raise StoreError("trajectory_id must be a non-empty string of at most 255 characters")
        if not isinstance(task_id, str) or not task_id or len(task_id) > 255:
            raise StoreError("task_id must be a non-empty string of at most 255 characters")
        meta_json = _j(meta if meta is not None else {})
        check_register(meta if meta is not None else {}, meta_json)
        if session is not None and (not isinstance(session, str) or len(session) > 64):
            raise StoreError("session must be a string of at most 64 characters")
        self._check_owner(c, trajectory_id, owner)
        now = time.time()
        session = session or uuid.uuid4().hex
        t = trajectories_t
        row = c.execute(select(t).where(t.c.trajectory_id == trajectory_id)).first()
        if row is not None and row.session == session:  # a retried register: the same answer
            return {"session": session, "epoch": row.epoch, "next_step": row.step_count,
                    "requeued": 0, "resumed": row.epoch > 1,
                    "secret": rollout_secret(self.key, trajectory_id, session, row.epoch or 0)}
        if row is not None and row.session and not self._secret_ok(row, secret):
            raise Forbidden(f"trajectory {trajectory_id!r} is already registered: registering it again "
                            f"(resuming it) needs the rollout's secret (field 'secret')")
        requeued = 0
        if row is None:
            epoch, step_count = 1, 0
            c.execute(insert(t).values(trajectory_id=trajectory_id, task_id=task_id, status="running",
                                       started_at=now, updated_at=now, session=session, epoch=epoch,
                                       meta=meta_json, owner=owner or "", heartbeat_at=now))
        else:
            epoch = (row.epoch or 0) + 1
            merged = {**_meta(row.meta), **(meta or {})}
            step_count = c.execute(select(func.count()).select_from(steps_t)
                                   .where(steps_t.c.trajectory_id == trajectory_id)).scalar_one()
            c.execute(update(t).where(t.c.trajectory_id == trajectory_id).values(
                task_id=task_id, status="running", updated_at=now, ended_at=None, session=session,
                epoch=epoch, meta=_j(merged), step_count=step_count, heartbeat_at=now))
            requeued = self._requeue(c, trajectory_id, "expired")
        self._event(c, "trajectory", trajectory_id, status="running", epoch=epoch, requeued=requeued)
        return {"session": session, "epoch": epoch, "next_step": step_count, "requeued": requeued,
                "resumed": row is not None, "secret": rollout_secret(self.key, trajectory_id, session, epoch)}

    def _requeue(self, c: Connection, trajectory_id: str, also: str | None = None) -> int:
        """Unacknowledged deliveries (and ``also``: expired rows, on resume) back to pending."""
        g = guidance_t
        cond = and_(g.c.status == "delivered", g.c.acknowledged_at.is_(None))
        if also:
            cond = or_(cond, g.c.status == also)
        rows = c.execute(
            update(g).where(and_(g.c.trajectory_id == trajectory_id, cond))
            .values(status="pending", delivered_at=None, delivered_step=None, attempts=g.c.attempts + 1)
            .returning(g.c.guidance_id)
        ).all()
        for r in rows:
            self._event(c, "guidance", trajectory_id, guidance_id=r.guidance_id, state="pending", requeued=True)
        return len(rows)

    def post_step(self, trajectory_id: str, step_index: int, tool: str | None, arguments: dict[str, Any],
                  observation: str, *, assistant_text: str | None = None, detail: dict[str, Any] | None = None,
                  guidance_ids: list[str] | None = None, session: str | None = None,
                  step: Any = None, summary: Any = None, owner: str | None = None,
                  secret: str | None = None) -> dict[str, Any]:
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
                                   summary_dict(summary), owner, self._presented(trajectory_id, secret, owner))

    def _post_step(self, c: Connection, trajectory_id: str, step_index: int, tool: str | None,
                   arguments: dict[str, Any], observation: str, assistant_text: str, detail: dict[str, Any],
                   guidance_ids: list[str] | None, session: str | None,
                   summary: dict[str, Any] | None = None, owner: str | None = None,
                   secret: str = "") -> dict[str, Any]:
        now = time.time()
        step_index = as_index(step_index)
        if tool is not None and not isinstance(tool, str):
            raise StoreError("tool must be a string or null")
        if not isinstance(arguments or {}, dict) or not isinstance(detail or {}, dict):
            raise StoreError("arguments and detail must be objects")
        if not isinstance(observation or "", str) or not isinstance(assistant_text or "", str):
            raise StoreError("observation and assistant_text must be strings")
        if guidance_ids is not None and not (isinstance(guidance_ids, list) and len(guidance_ids) <= 1000
                                             and all(isinstance(x, str) for x in guidance_ids)):
            raise StoreError("guidance_ids must be a list of at most 1000 strings")
        if tool is not None and len(tool) > 255:
            raise StoreError("tool must be at most 255 characters")
        args_json, detail_json = _j(arguments or {}), _j(detail or {})
        check_step(observation or "", assistant_text or "", args_json, detail or {}, detail_json, summary,
                   None if summary is None else _j(summary))
        traj = self._guard(c, trajectory_id, session, owner, secret)
        if step_index > (traj["step_count"] or 0) + MAX_STEPS_AHEAD:
            raise StoreError(f"step_index {step_index} is more than {MAX_STEPS_AHEAD} steps past the rollout's "
                             f"{traj['step_count']} recorded steps")
        s = steps_t
        values = dict(tool=tool, arguments=args_json, observation=observation or "",
                      created_at=now, assistant_text=assistant_text, detail=detail_json)
        c.execute(self._insert(s).values(trajectory_id=trajectory_id, step_index=step_index, **values)
                  .on_conflict_do_update(index_elements=[s.c.trajectory_id, s.c.step_index], set_=values))
        # acknowledge: what was delivered at this step (plus ids the agent says it injected here)
        g = guidance_t
        if guidance_ids:
            cand = c.execute(select(g).where(and_(g.c.trajectory_id == trajectory_id, g.c.status == "pending",
                                                  g.c.guidance_id.in_(guidance_ids)))).all()
            ok = [r.guidance_id for r in self._authentic(c, trajectory_id, cand)]
            if ok:
                c.execute(update(g).where(g.c.guidance_id.in_(ok))
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
        if summary is not None:
            self._insert_record(c, trajectory_id, "summary", summary, step_index=summary.get("before_step"),
                                key=f"summary:{summary['index']}", ref=str(summary["index"]))
        score = detail.get("score") if isinstance(detail.get("score"), (int, float)) else score_of(tool, observation)
        if score is not None and not (isinstance(score, (int, float)) and -1e12 < float(score) < 1e12):
            score = None
        t = trajectories_t
        bigger = func.max if self.is_sqlite else func.greatest  # scalar max of two values
        upd: dict[str, Any] = {"updated_at": now, "step_count": bigger(t.c.step_count, step_index + 1)}
        if score is not None:
            upd["latest_score"] = float(score)
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
        res = c.execute(self._insert(r).values(trajectory_id=trajectory_id, step_index=step_index, kind=kind,
                                               ref=ref or "", key=key, created_at=time.time(), data=_j(data))
                        .on_conflict_do_nothing(index_elements=[r.c.trajectory_id, r.c.key]))
        return 1 if res.rowcount else 0  # 0: a retried post

    def post_record(self, trajectory_id: str, kind: str, data: dict[str, Any], *, step_index: int | None = None,
                    key: str | None = None, ref: str = "", session: str | None = None,
                    owner: str | None = None, secret: str | None = None) -> int:
        """An agent-reported record (live terminal output, an exact file diff, a search log)."""
        if kind not in ("terminal", "file", "search"):
            raise StoreError(f"record kind must be terminal, file or search, not {kind!r}")
        with self._write() as c:
            return self._post_record(c, trajectory_id, kind, data, step_index, key, ref, session, owner,
                                     self._presented(trajectory_id, secret, owner))

    def _post_record(self, c: Connection, trajectory_id: str, kind: str, data: dict[str, Any],
                     step_index: int | None, key: str | None, ref: str, session: str | None,
                     owner: str | None = None, secret: str = "") -> int:
        data_json = _j(data)
        check_record(data, data_json)
        if step_index is not None:
            as_index(step_index)
        if not isinstance(ref or "", str) or (key is not None and not isinstance(key, str)):
            raise StoreError("record ref and key must be strings")
        if len(ref or "") > 1024 or len(key or "") > 200:
            raise StoreError("record ref must be at most 1024 characters, key at most 200")
        self._guard(c, trajectory_id, session, owner, secret)
        n = self._insert_record(c, trajectory_id, kind, data, step_index=step_index,
                                key=f"agent:{key or uuid.uuid4().hex}", ref=ref)
        if n:
            self._event(c, "record", trajectory_id, record_kind=kind, step=step_index)
        return n

    def end(self, trajectory_id: str, status: str = "finished", *, final_score: float | None = None,
            session: str | None = None, owner: str | None = None, secret: str | None = None) -> None:
        """The trajectory is over; what it never took (or took but never recorded) expires."""
        with self._write() as c:
            self._end(c, trajectory_id, status, final_score, session, owner,
                      self._presented(trajectory_id, secret, owner))
        LIVE.discard(trajectory_id)

    def _end(self, c: Connection, trajectory_id: str, status: str, final_score: float | None,
             session: str | None, owner: str | None = None, secret: str = "") -> None:
        if status not in ("finished", "error", "killed", "timeout", "cancelled"):
            raise StoreError(f"end status must be finished, error, killed, timeout or cancelled, not {status!r:.40}")
        if final_score is not None and (isinstance(final_score, bool) or not isinstance(final_score, (int, float))
                                        or not -1e12 < float(final_score) < 1e12):
            raise StoreError("final_score must be a finite number")
        self._guard(c, trajectory_id, session, owner, secret)
        now = time.time()
        vals: dict[str, Any] = {"status": status, "updated_at": now, "ended_at": now}
        if final_score is not None:
            vals["final_score"] = float(final_score)
            vals["latest_score"] = float(final_score)
        c.execute(update(trajectories_t).where(trajectories_t.c.trajectory_id == trajectory_id).values(**vals))
        self._requeue(c, trajectory_id)
        g = guidance_t
        expired = c.execute(update(g).where(and_(g.c.trajectory_id == trajectory_id, g.c.status == "pending"))
                            .values(status="expired").returning(g.c.guidance_id)).all()
        for r in expired:
            self._event(c, "guidance", trajectory_id, guidance_id=r.guidance_id, state="expired")
        self._event(c, "trajectory", trajectory_id, status=status, final_score=final_score)

    def take_pending(self, trajectory_id: str, step_index: int, now: float | None = None, *,
                     owner: str | None = None, secret: str | None = None) -> list[Guidance]:
        """Guidance that is due, in posting order, marked delivered at ``step_index`` (exactly once).

        Idempotent per step: asking again for the same step returns what that step already got
        (plus what became due since), so a retried request loses nothing.
        """
        now = time.time() if now is None else now
        step_index = as_index(step_index)
        with self._write() as c:
            self._guard(c, trajectory_id, None, owner, self._presented(trajectory_id, secret, owner))
            rows = self._take(c, trajectory_id, step_index, now)
        return [to_guidance(r) for r in rows]

    def _take(self, c: Connection, trajectory_id: str, step_index: int, now: float) -> list[dict[str, Any]]:
        g = guidance_t
        due = c.execute(select(g).where(and_(g.c.trajectory_id == trajectory_id, g.c.status == "pending",
                                             g.c.available_at <= now,
                                             or_(g.c.at_step.is_(None), g.c.at_step <= step_index)))).all()
        self._mark_delivered(c, trajectory_id, due, step_index, now)
        rows = c.execute(select(g).where(and_(g.c.trajectory_id == trajectory_id, g.c.status == "delivered",
                                              g.c.delivered_step == step_index, g.c.acknowledged_at.is_(None)))
                         .order_by(g.c.seq)).all()
        return [_guidance_dict(r) for r in rows]

    def _mark_delivered(self, c: Connection, trajectory_id: str, candidates: list[Any], step_index: int,
                        at: float) -> None:
        """The authentic ``pending`` rows among ``candidates`` become ``delivered`` at ``step_index``
        (a conditional update: exactly once), each with a ``guidance`` event."""
        g = guidance_t
        ok = [r.guidance_id for r in self._authentic(c, trajectory_id, candidates)]
        newly = c.execute(
            update(g).where(and_(g.c.guidance_id.in_(ok), g.c.status == "pending"))
            .values(status="delivered", delivered_at=at, delivered_step=step_index)
            .returning(g.c.guidance_id)
        ).all() if ok else []
        for r in newly:
            self._event(c, "guidance", trajectory_id, guidance_id=r.guidance_id, state="delivered",
                        step=step_index)

    def pending(self, trajectory_ids: Iterable[str] | dict[str, str], now: float | None = None, *,
                owner: str | None = None) -> dict[str, list[dict[str, Any]]]:
        """Due, authenticated pending guidance per trajectory, in order, without taking it (the agent's
        poll). ``trajectory_ids``: ``{trajectory: secret}`` (or ids: the secrets this store object
        holds). Only the rollouts whose secret (and, with ``owner``, owner) matches are answered."""
        creds = (dict(trajectory_ids) if isinstance(trajectory_ids, dict)
                 else dict.fromkeys(trajectory_ids))
        if not creds:
            return {}
        now = time.time() if now is None else now
        g, t = guidance_t, trajectories_t
        with self._read() as c:
            ids = [r.trajectory_id for r in c.execute(
                select(t.c.trajectory_id, t.c.owner, t.c.session, t.c.epoch).where(t.c.trajectory_id.in_(list(creds))))
                if (not owner or not r.owner or r.owner == owner)
                and self._secret_ok(r, self._presented(r.trajectory_id, creds[r.trajectory_id], owner))]
            if not ids:
                return {}
            # the next step boundary of a trajectory is its step count (steps 0..n-1 are posted)
            nxt = select(t.c.step_count).where(t.c.trajectory_id == g.c.trajectory_id).scalar_subquery()
            rows = c.execute(select(g).where(and_(g.c.trajectory_id.in_(ids), g.c.status == "pending",
                                                  g.c.available_at <= now,
                                                  or_(g.c.at_step.is_(None), g.c.at_step <= nxt)))
                             .order_by(g.c.seq)).all()
        from apollo.guidance.auth import verify_row

        if any(not verify_row(dict(r._mapping), self.key) for r in rows):
            with self._write() as c:  # mark the forged rows rejected
                for tid in {r.trajectory_id for r in rows}:
                    self._authentic(c, tid, [r for r in rows if r.trajectory_id == tid])
            rows = [r for r in rows if verify_row(dict(r._mapping), self.key)]
        out: dict[str, list[dict[str, Any]]] = {x: [] for x in ids}
        keep = ("seq", "guidance_id", "trajectory_id", "text", "author", "created_at", "available_at", "auth_tag")
        for r in rows:
            out[r.trajectory_id].append({k: getattr(r, k) for k in keep})
        return out

    def deliver(self, trajectory_id: str, step_index: int, guidance_ids: list[str],
                delivered_at: float | None = None, session: str | None = None,
                owner: str | None = None, secret: str | None = None) -> list[dict[str, Any]]:
        """Mark messages the agent injected at ``step_index`` as delivered (idempotent)."""
        with self._write() as c:
            return self._deliver(c, trajectory_id, as_index(step_index), guidance_ids, delivered_at, session, owner,
                                 self._presented(trajectory_id, secret, owner))

    def _deliver(self, c: Connection, trajectory_id: str, step_index: int, guidance_ids: list[str],
                 delivered_at: float | None, session: str | None, owner: str | None = None,
                 secret: str = "") -> list[dict[str, Any]]:
        if not isinstance(guidance_ids, list) or not all(isinstance(x, str) for x in guidance_ids):
            raise StoreError("guidance_ids must be a list of strings")
        if delivered_at is not None and (isinstance(delivered_at, bool) or not isinstance(delivered_at, (int, float))):
            raise StoreError("delivered_at must be a number")
        self._guard(c, trajectory_id, session, owner, secret)
        at = time.time() if delivered_at is None else float(delivered_at)
        if not -1e12 < at < 1e12:
            raise StoreError("delivered_at must be a finite time")
        g = guidance_t
        cand = c.execute(select(g).where(and_(g.c.trajectory_id == trajectory_id, g.c.status == "pending",
                                              g.c.guidance_id.in_(list(guidance_ids))))).all()
        self._mark_delivered(c, trajectory_id, cand, step_index, at)
        rows = c.execute(select(g).where(and_(g.c.trajectory_id == trajectory_id,
                                              g.c.guidance_id.in_(list(guidance_ids)))).order_by(g.c.seq)).all()
        return [_guidance_dict(r) for r in rows]

    def apply_ops(self, ops: list[dict[str, Any]], *, owner: str | None = None) -> list[dict[str, Any]]:
        """Apply a batch of agent operations in order, in one transaction (the service's sync call).

        Each op is ``{"op": register|step|deliver|record|end, "trajectory_id": …, "session": …,
        "secret": …, …}``; every op but ``register`` needs the rollout's ``secret``, and so does a
        register of a rollout that is already registered (a resume). A stale-session op is answered
        ``{"error": "stale_session"}`` and skipped, an op without the rollout's secret or on another
        owner's trajectory ``{"error": "forbidden"}``, one on an unregistered rollout
        ``{"error": "not_found"}``; the others apply. A malformed op (or one over a size limit)
        fails the whole batch (4xx), so the client can find it and drop only it.
        """
        results: list[dict[str, Any]] = []
        held: dict[str, str] = {}
        with self._write() as c:
            for op in ops:
                if not isinstance(op, dict):
                    raise StoreError("every op must be an object")
                kind, tid, sess = op.get("op"), op.get("trajectory_id"), op.get("session")
                if not tid or not isinstance(tid, str):
                    raise StoreError("every op needs a trajectory_id (a string)")
                if sess is not None and not isinstance(sess, str):
                    raise StoreError("session must be a string")
                sec = self._presented(tid, op.get("secret"), owner)
                try:  # the refusals below are raised by the checks, before an op writes anything
                    if kind == "register":
                        res: Any = self._register(c, tid, op.get("task_id") or "?", op.get("meta"), sess,
                                                  owner, sec)
                        if owner is None:
                            held[tid] = res["secret"]
                    elif kind == "step":
                        res = self._post_step(c, tid, as_index(op["step_index"]), op.get("tool"),
                                              op.get("arguments") or {}, op.get("observation") or "",
                                              op.get("assistant_text") or "", op.get("detail") or {},
                                              op.get("guidance_ids"), sess, op.get("summary"), owner, sec)
                    elif kind == "deliver":
                        res = [r["guidance_id"] for r in self._deliver(
                            c, tid, as_index(op["step_index"]), op.get("guidance_ids") or [],
                            op.get("delivered_at"), sess, owner, sec)]
                    elif kind == "record":
                        if op.get("kind") not in ("terminal", "file", "search"):
                            raise StoreError(f"bad record kind {op.get('kind')!r:.40}")
                        res = self._post_record(c, tid, op["kind"], op.get("data") or {}, op.get("step_index"),
                                                op.get("key"), op.get("ref") or "", sess, owner, sec)
                    elif kind == "end":
                        self._end(c, tid, op.get("status") or "finished", op.get("final_score"), sess, owner, sec)
                        res = True
                    else:
                        raise StoreError(f"unknown op {kind!r:.40}")
                    results.append({"ok": True, "result": res})
                except StaleSession as e:
                    results.append({"ok": False, "error": "stale_session", "detail": str(e)})
                except Forbidden as e:
                    results.append({"ok": False, "error": "forbidden", "detail": str(e)})
                except NotFound as e:
                    results.append({"ok": False, "error": "not_found", "detail": str(e)})
                except StoreError:
                    raise
                except (KeyError, TypeError, ValueError, OverflowError) as e:
                    raise StoreError(f"bad {kind!r:.40} op: {type(e).__name__}: {str(e)[:200]}") from e
        self._held.update(held)
        return results

    # --- annotator side ---------------------------------------------------------------------
    def post_guidance(self, trajectory_id: str, text: str, *, author: str = "annotator", delay_s: float = 0.0,
                      meta: dict[str, Any] | None = None, guidance_id: str | None = None,
                      at_step: int | None = None) -> str:
        """Queue a message for a trajectory; returns its id. With ``guidance_id`` a retry is a no-op.

        ``delay_s``: available that many seconds from now; ``at_step``: not injected before that step
        boundary. The row is signed (:mod:`apollo.guidance.auth`): this is the annotator path.
        """
        return self.add_guidance(trajectory_id, text, author=author, delay_s=delay_s, meta=meta,
                                 guidance_id=guidance_id, at_step=at_step)["guidance_id"]

    def add_guidance(self, trajectory_id: str, text: str, *, author: str = "annotator", delay_s: float = 0.0,
                     meta: dict[str, Any] | None = None, guidance_id: str | None = None,
                     at_step: int | None = None, running_only: bool = False) -> dict[str, Any]:
        """Like :meth:`post_guidance`; returns the stored row (``created`` False for a retry).
        ``running_only``: a new message for a rollout that is not registered is :class:`NotFound`,
        for one that has ended :class:`NotRunning` (checked in the same transaction)."""
        if at_step is not None:
            as_index(at_step, "at_step")
        if not isinstance(text, str) or not text.strip():
            raise StoreError("guidance text is empty")
        from apollo.guidance.auth import guidance_tag

        gid = guidance_id or uuid.uuid4().hex
        now = time.time()
        g = guidance_t
        tag = guidance_tag(self.key, guidance_id=gid, trajectory_id=trajectory_id, text=text, author=author,
                           created_at=now)
        try:
            with self._write(urgent=True) as c:  # a person waits on this: ahead of the agents' batches
                old = c.execute(select(g).where(g.c.guidance_id == gid)).first()
                if old is not None:
                    if old.trajectory_id != trajectory_id or old.text != text:
                        raise StoreError(f"guidance id {gid!r} is already used for another message")
                    return {**_guidance_dict(old), "created": False}
                if running_only:
                    t = trajectories_t
                    st = c.execute(select(t.c.status).where(t.c.trajectory_id == trajectory_id)).scalar()
                    if st is None:
                        raise NotFound(f"no trajectory {trajectory_id!r}")
                    if st != "running":
                        raise NotRunning(f"trajectory {trajectory_id} is {st}: guidance would never be delivered")
                row = c.execute(insert(g).values(guidance_id=gid, trajectory_id=trajectory_id, text=text,
                                                 author=author, created_at=now,
                                                 available_at=now + max(0.0, float(delay_s)), meta=_j(meta or {}),
                                                 auth_tag=tag, at_step=at_step).returning(*g.c)).one()
                self._event(c, "guidance", trajectory_id, guidance_id=gid, state="pending")
                return {**_guidance_dict(row), "created": True}
        except IntegrityError:  # the same id inserted concurrently by a retry (PostgreSQL)
            with self._read() as c:
                row = c.execute(select(g).where(g.c.guidance_id == gid)).one()
            return {**_guidance_dict(row), "created": False}
