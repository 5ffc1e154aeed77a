"""The read side of the guidance store: the rows the service, the annotators and the stages ask for
(trajectories, steps, guidance, records, the event feed, counts), in the shapes
:class:`apollo.guidance.client.AnnotatorClient` also returns. Reads never change the store.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import and_, func, or_, select

from apollo.guidance.tables import (
    NotFound,
    _guidance_dict,
    _meta,
    _unj,
    events_t,
    guidance_state,
    guidance_t,
    records_t,
    steps_t,
    trajectories_t,
)


class StoreReads:
    """Mixed into :class:`apollo.guidance.store.GuidanceStore`; needs its ``_read()`` transaction."""

    def guidance_counts(self) -> dict[str, int]:
        """Guidance rows per state (``rejected``: unauthenticated rows refused)."""
        g = guidance_t
        with self._read() as c:
            rows = c.execute(select(g.c.status, (g.c.acknowledged_at.is_not(None)).label("ack"), func.count())
                             .group_by(g.c.status, "ack")).all()
        out = {k: 0 for k in ("pending", "delivered", "acknowledged", "expired", "rejected")}
        for st, ack, n in rows:
            out[guidance_state({"status": st, "acknowledged_at": 1 if ack else None})] += n
        return out

    def guidance_counts_by_trajectory(self) -> dict[str, dict[str, int]]:
        """Guidance rows per trajectory and state."""
        g = guidance_t
        with self._read() as c:
            rows = c.execute(select(g.c.trajectory_id, g.c.status, (g.c.acknowledged_at.is_not(None)).label("ack"),
                                    func.count()).group_by(g.c.trajectory_id, g.c.status, "ack")).all()
        out: dict[str, dict[str, int]] = {}
        for tid, st, ack, n in rows:
            d = out.setdefault(tid, {})
            k = guidance_state({"status": st, "acknowledged_at": 1 if ack else None})
            d[k] = d.get(k, 0) + n
        return out

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
        return [_public_trajectory(r) for r in rows]

    def trajectory(self, trajectory_id: str) -> dict[str, Any]:
        t = trajectories_t
        with self._read() as c:
            r = c.execute(select(t).where(t.c.trajectory_id == trajectory_id)).first()
        if r is None:
            raise NotFound(f"no trajectory {trajectory_id!r}")
        return _public_trajectory(r)

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
            d["arguments"] = _obj(d, "arguments")
            if "detail" in d:
                d["detail"] = _obj(d, "detail")
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
            d["data"] = _obj(d, "data")
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


def _obj(d: dict[str, Any], field: str) -> dict[str, Any]:
    """A stored JSON object column; a row an older or broken writer left (not an object) reads as
    ``{}`` and says so in the row's ``skipped`` list, so the views show the rest."""
    raw = d.get(field)
    if not raw:
        return {}
    try:
        v = json.loads(raw)
    except ValueError:
        v = None
    if isinstance(v, dict):
        return v
    d.setdefault("skipped", []).append(f"{field}: the stored value is not a JSON object")
    return {}


def _public_trajectory(row: Any) -> dict[str, Any]:
    """A trajectories row as readers see it: meta decoded, session and owner left out."""
    d = dict(row._mapping)
    d["meta"] = _meta(d.get("meta"))
    d.pop("session", None)
    d.pop("owner", None)
    return d
