"""The guidance service (``apollo serve``): FastAPI over the guidance store, plus the annotator UI.

Rollout workers (role ``agent``) register trajectories and stream steps/records to it; annotators
(role ``annotator``) read them and post guidance; viewers read. See :mod:`apollo.guidance.auth` for
the tokens, :mod:`apollo.guidance.client` for the clients and ``apollo/guidance/web/`` for the UI.

Endpoints (all under ``/api`` need a token; 401 without one, 403 with the wrong role)::

    GET    /healthz                                      liveness (no token)
    GET    /  /static/…  /openapi.json                   the UI and the API description (no token, no data)
    POST   /api/session                                  log in: token → HttpOnly cookie (UI)
    GET    /api/session      DELETE /api/session         who am I / log out
    GET    /api/trajectories?status=running|all          rollouts: task, step, elapsed, latest score
    GET    /api/trajectories/{tid}                       one rollout
    GET    /api/trajectories/{tid}/steps?since=&q=&full=  steps (q: keyword search)
    GET    /api/trajectories/{tid}/steps/{i}             one step in full (model text, observation, guidance)
    GET    /api/trajectories/{tid}/steps/{i}/context     the context window the model saw at step i
    GET    /api/trajectories/{tid}/records?kind=         terminal output, file diffs, search logs
    GET    /api/trajectories/{tid}/guidance              guidance history (pending/delivered/acknowledged/expired)
    GET    /api/guidance?status=                         all guidance, newest first (the tracking list)
    GET    /api/triage?status=running|all                the triage list (apollo.guidance.views.Triage)
    GET    /api/events?trajectory_id=&since=             live feed (Server-Sent Events, Last-Event-ID)
    POST   /api/trajectories/{tid}/guidance              annotator: send guidance (idempotent by guidance_id)
    POST   /api/agent/sync                               agent: ordered batch of ops + poll of pending guidance
    POST   /api/trajectories                             agent: register / resume
    PUT    /api/trajectories/{tid}/steps/{i}             agent: post a step (acknowledges its guidance)
    POST   /api/trajectories/{tid}/take                  agent: take due guidance at a step (synchronous)
    POST   /api/trajectories/{tid}/deliver               agent: confirm guidance injected at a step
    POST   /api/trajectories/{tid}/records               agent: post a terminal/file/search record
    POST   /api/trajectories/{tid}/end                   agent: the trajectory is over

Every ``/api`` request passes :class:`apollo.guidance.gate.Gate` first: token and role are checked
before the body is read, bodies are capped, and JSON with lone surrogates or NaN is refused (4xx);
integers are bounded (``0 … 2**31-1``), so bad input never reaches the database as a 500. The agent
token alone may only register: register answers the rollout's ``secret``, and every other agent
route (and the sync ops and polls) must carry it (403 otherwise, nothing changed); agent writes
carry the agent token's digest as the owner (:mod:`apollo.guidance.auth`). Agent fields over their
size limits answer 413 naming the limit, malformed ones 400 naming the field
(:mod:`apollo.guidance.inputs`).

The live feed reads the store's ``events`` table (one poller per app, fan-out to the streams), so
it also shows what other processes write to the same database (the rollout stage writing to the
store directly) and resumes after a service restart from the browser's ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Path as PathParam, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from apollo.guidance.auth import AGENT_ROLES, GUIDANCE_ROLES, READ_ROLES, Principal, TokenRegistry
from apollo.guidance.gate import COOKIE, Gate, token_of
from apollo.guidance.store import MAX_INDEX, GuidanceStore, StoreError
from apollo.guidance.views import Triage, context_window, guidance_tracking

log = logging.getLogger(__name__)
WEB_DIR = Path(__file__).parent / "web"
Index = Annotated[int, PathParam(ge=0, le=MAX_INDEX)]
Since = Annotated[int, Query(ge=0, le=MAX_INDEX)]
Num = Annotated[float, Field(ge=-1e12, le=1e12, allow_inf_nan=False)]
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")

GUIDANCE_ID = r"^[A-Za-z0-9_.:-]{8,64}$"
Secret = Annotated[str, Field(max_length=128)]


# --- request bodies -------------------------------------------------------------------------------
class _In(BaseModel):
    model_config = ConfigDict(strict=True)  # no "3" for 3, no 1.0 for 1: wrong types are a 422


class LoginIn(_In):
    token: str | None = Field(default=None, max_length=512)


class GuidanceIn(_In):
    text: str = Field(min_length=1, max_length=20_000)
    guidance_id: str | None = Field(default=None, pattern=GUIDANCE_ID)
    delay_s: float = Field(default=0.0, ge=0.0, le=86_400.0, allow_inf_nan=False)
    at_step: int | None = Field(default=None, ge=0, le=MAX_INDEX)
    meta: dict[str, Any] = Field(default_factory=dict)


class RegisterIn(_In):
    trajectory_id: str = Field(min_length=1, max_length=255)
    task_id: str = Field(min_length=1, max_length=255)
    meta: dict[str, Any] = Field(default_factory=dict)
    session: str | None = Field(default=None, max_length=64)
    secret: Secret | None = None  # registering a registered rollout again (resuming it) needs its secret


class StepIn(_In):
    tool: str | None = Field(default=None, max_length=255)
    arguments: dict[str, Any] = Field(default_factory=dict)
    observation: str = ""
    assistant_text: str = ""
    detail: dict[str, Any] = Field(default_factory=dict)
    guidance_ids: list[str] | None = Field(default=None, max_length=1000)
    session: str | None = Field(default=None, max_length=64)
    secret: Secret | None = None


class TakeIn(_In):
    step_index: int = Field(ge=0, le=MAX_INDEX)
    secret: Secret | None = None


class DeliverIn(_In):
    step_index: int = Field(ge=0, le=MAX_INDEX)
    guidance_ids: list[str] = Field(max_length=1000)
    delivered_at: Num | None = None
    session: str | None = Field(default=None, max_length=64)
    secret: Secret | None = None


class RecordIn(_In):
    kind: str = Field(pattern=r"^(terminal|file|search)$")
    data: dict[str, Any]
    step_index: int | None = Field(default=None, ge=0, le=MAX_INDEX)
    key: str | None = Field(default=None, max_length=200)
    ref: str = Field(default="", max_length=1024)
    session: str | None = Field(default=None, max_length=64)
    secret: Secret | None = None


class EndIn(_In):
    status: str = Field(default="finished", pattern=r"^(finished|error|killed|timeout|cancelled)$")
    final_score: Num | None = None
    session: str | None = Field(default=None, max_length=64)
    secret: Secret | None = None


class SyncIn(_In):
    ops: list[dict[str, Any]] = Field(default_factory=list, max_length=2000)
    # the rollouts to poll, each with its secret (what register answered)
    poll: dict[Annotated[str, Field(max_length=255)], Secret] = Field(default_factory=dict, max_length=2000)


# --- live feed -------------------------------------------------------------------------------------
class EventHub:
    """One poller of the store's event head per app; streams wait on it instead of polling."""

    def __init__(self, store: GuidanceStore, poll_s: float = 0.2):
        self.store, self.poll_s = store, poll_s
        self.head = 0
        self._cond: asyncio.Condition | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._cond = asyncio.Condition()
        self.head = await run_in_threadpool(self.store.last_event_id)
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _run(self) -> None:
        assert self._cond is not None
        while True:
            try:
                head = await run_in_threadpool(self.store.last_event_id)
                if head != self.head:
                    self.head = head
                    async with self._cond:
                        self._cond.notify_all()
            except Exception:  # a locked or briefly unreachable database: try again
                log.warning("event poll failed", exc_info=True)
            await asyncio.sleep(self.poll_s)

    async def wait(self, after: int, timeout: float) -> bool:
        assert self._cond is not None
        async with self._cond:
            try:
                await asyncio.wait_for(self._cond.wait_for(lambda: self.head > after), timeout)
                return True
            except TimeoutError:
                return False


def _sse(event_id: int, kind: str, data: dict[str, Any]) -> str:
    return f"id: {event_id}\nevent: {kind}\ndata: {json.dumps(data, default=str)}\n\n"


# --- the app ---------------------------------------------------------------------------------------
def create_app(store: GuidanceStore | str | Path, tokens: TokenRegistry, *, event_poll_s: float = 0.2,
               lost_after_s: float = 30.0, caps: dict[str, int] | None = None,
               agent_concurrency: int = 2) -> FastAPI:
    """The app. ``lost_after_s``: a running rollout whose worker has not been heard of for that long
    is shown as lost; ``caps``: body caps by route class (:data:`apollo.guidance.gate.CAPS`);
    ``agent_concurrency``: agent sync calls served at once (the others wait in the event loop, not
    in worker threads, so the threads and the write lock stay free for the annotators)."""
    store = store if isinstance(store, GuidanceStore) else GuidanceStore(store)
    hub = EventHub(store, event_poll_s)
    triage = Triage(store, lost_after_s=lost_after_s)
    beats: dict[str, float] = {}  # trajectory -> last heartbeat written or implied by a write

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await hub.start()
        yield
        await hub.stop()

    # the OpenAPI description is public (it holds no data); no Swagger page: it loads scripts from a CDN
    app = FastAPI(title="Apollo guidance service", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json")
    app.state.store, app.state.tokens, app.state.hub = store, tokens, hub
    app.add_middleware(Gate, tokens=tokens, caps=caps)  # before the body is read (inside the headers below)

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Any) -> Response:
        resp = await call_next(request)
        resp.headers["Content-Security-Policy"] = CSP
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["X-Frame-Options"] = "DENY"
        resp.headers["Referrer-Policy"] = "no-referrer"
        if request.url.path.startswith("/api"):
            resp.headers["Cache-Control"] = "no-store"
        return resp

    @app.exception_handler(StoreError)
    async def store_error(_request: Request, exc: StoreError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)

    def role(allowed: frozenset[str]) -> Any:
        async def dep(request: Request) -> Principal:  # async: no worker thread for a dict lookup
            p = getattr(request.state, "principal", None)  # the gate authenticated it
            if p is None:
                raise HTTPException(401, "a valid token is required", headers={"WWW-Authenticate": "Bearer"})
            if p.role not in allowed:
                raise HTTPException(403, f"role {p.role!r} may not do this (needs {' or '.join(sorted(allowed))})")
            return p
        return Depends(dep)

    reader, annotator, agent = role(READ_ROLES), role(GUIDANCE_ROLES), role(AGENT_ROLES)

    # -- UI and session ---------------------------------------------------------------------------
    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, Any]:
        return {"ok": True}

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html", headers={"Cache-Control": "no-store"})

    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")

    @app.post("/api/session")
    def login(request: Request, response: Response, body: LoginIn | None = None) -> dict[str, str]:
        bearer, via = token_of({"authorization": request.headers.get("authorization") or ""}, {})
        token = (body.token if body and body.token else None) or (bearer if via == "bearer" else None)
        p = tokens.lookup(token)
        if p is None:
            raise HTTPException(401, "unknown token")
        if p.role not in READ_ROLES:
            raise HTTPException(403, "agent tokens cannot open the annotator UI")
        response.set_cookie(COOKIE, token or "", httponly=True, samesite="strict", max_age=12 * 3600,
                            secure=request.url.scheme == "https", path="/")
        return {"name": p.name, "role": p.role}

    @app.get("/api/session")
    def whoami(p: Principal = reader) -> dict[str, str]:
        return {"name": p.name, "role": p.role}

    @app.delete("/api/session")
    def logout(response: Response) -> dict[str, bool]:
        response.delete_cookie(COOKIE, path="/")
        return {"ok": True}

    # -- reads ------------------------------------------------------------------------------------
    def _with_elapsed(t: dict[str, Any]) -> dict[str, Any]:
        end = t.get("ended_at") or time.time()
        return {**t, "elapsed_s": max(0.0, end - t["started_at"]), "server_time": time.time()}

    @app.get("/api/trajectories")
    def list_trajectories(status: str = Query("running", pattern="^(running|all|finished|error)$"),
                          _p: Principal = reader) -> list[dict[str, Any]]:
        rows = store.trajectories(None if status == "all" else status)
        out = []
        for t in rows:
            meta = t.pop("meta", {}) or {}
            for k in ("domain", "max_steps", "policy_id"):
                v = meta.get(k)
                t[k] = v if isinstance(v, (str, int, float)) and not isinstance(v, bool) else None
            t.pop("heartbeat_at", None)
            out.append(_with_elapsed(t))
        return out

    @app.get("/api/triage")
    def get_triage(status: str = Query("running", pattern="^(running|all|finished|error)$"),
                   _p: Principal = reader) -> dict[str, Any]:
        rows = triage.rows(None if status == "all" else status)
        return {"rows": rows, "server_time": time.time(), "lost_after_s": triage.lost_after_s}

    @app.get("/api/trajectories/{tid}")
    def get_trajectory(tid: str, _p: Principal = reader) -> dict[str, Any]:
        t = store.trajectory(tid)
        meta = t.get("meta") or {}
        t["meta"] = {k: v for k, v in meta.items() if k != "prefix_messages"}
        prefix = meta.get("prefix_messages")
        t["task_text"] = next((m.get("content") for m in (prefix if isinstance(prefix, list) else [])
                               if isinstance(m, dict) and m.get("role") == "user"
                               and isinstance(m.get("content"), str)), None)
        if prefix is not None and not isinstance(prefix, list):
            t["skipped"] = ["meta.prefix_messages: the stored value is not a list"]
        return _with_elapsed(t)

    @app.get("/api/trajectories/{tid}/steps")
    def get_steps(tid: str, since: Since = 0, q: str | None = Query(None, max_length=200), full: bool = False,
                  _p: Principal = reader) -> list[dict[str, Any]]:
        rows = store.steps(tid, since, full=full, query=q or None)
        for r in rows:  # an agent-reported context window is served by .../context only
            if isinstance(r.get("detail"), dict) and "context" in r["detail"]:
                r["detail"] = {k: v for k, v in r["detail"].items() if k != "context"}
                r["detail"]["context_reported"] = True
        return rows

    @app.get("/api/trajectories/{tid}/steps/{i}")
    def get_step(tid: str, i: Index, _p: Principal = reader) -> dict[str, Any]:
        s = store.step(tid, i)
        s["guidance"] = [g for g in store.guidance(tid) if g["delivered_step"] == i and g["status"] == "delivered"]
        return s

    @app.get("/api/trajectories/{tid}/steps/{i}/context")
    def get_context(tid: str, i: Index, _p: Principal = reader) -> dict[str, Any]:
        return context_window(store, tid, i)

    @app.get("/api/trajectories/{tid}/records")
    def get_records(tid: str, kind: str | None = Query(None, pattern="^(terminal|file|search)$"), since_id: Since = 0,
                    _p: Principal = reader) -> list[dict[str, Any]]:
        return store.records(tid, kind, since_id)

    @app.get("/api/trajectories/{tid}/guidance")
    def get_guidance(tid: str, _p: Principal = reader) -> list[dict[str, Any]]:
        return [{k: v for k, v in g.items() if k != "auth_tag"} for g in store.guidance(tid)]

    @app.get("/api/guidance")
    def all_guidance(status: str | None = Query(None, pattern="^(pending|delivered|expired|rejected)$"),
                     _p: Principal = reader) -> list[dict[str, Any]]:
        return [g for g in guidance_tracking(store) if status is None or g["status"] == status]

    @app.get("/api/events")
    async def events(request: Request, trajectory_id: str | None = None, since: Annotated[int | None, Query(ge=0, le=MAX_INDEX)] = None,
                     _p: Principal = reader) -> StreamingResponse:
        last_id = request.headers.get("last-event-id")
        start = since if since is not None else (
            int(last_id) if last_id and last_id.isdigit() and len(last_id) < 12 else hub.head)

        async def stream() -> AsyncIterator[str]:
            last = start
            yield f"retry: 1500\nid: {last}\nevent: hello\ndata: {json.dumps({'head': hub.head})}\n\n"
            while not await request.is_disconnected():
                head = hub.head
                if head > last:
                    evs = await run_in_threadpool(store.events, last, trajectory_id, 500)
                    evs = [e for e in evs if e["id"] <= head]
                    for e in evs:
                        yield _sse(e["id"], e["kind"], {"id": e["id"], "trajectory_id": e["trajectory_id"],
                                                         "kind": e["kind"], "at": e["created_at"], **e["data"]})
                    last = evs[-1]["id"] if len(evs) >= 500 else head
                    if trajectory_id and not evs:
                        yield f"id: {last}\n\n"  # move the browser's Last-Event-ID past filtered events
                    continue
                if not await hub.wait(last, 15.0):
                    yield ": keep-alive\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    # -- annotator writes -------------------------------------------------------------------------
    @app.post("/api/trajectories/{tid}/guidance", status_code=201)
    def post_guidance(tid: str, body: GuidanceIn, response: Response, p: Principal = annotator) -> dict[str, Any]:
        # one write transaction: a retry answers the stored row (200, even if the rollout ended since),
        # an unknown rollout 404, an ended one 409
        row = store.add_guidance(tid, body.text, author=p.name, delay_s=body.delay_s, meta=body.meta,
                                 guidance_id=body.guidance_id, at_step=body.at_step, running_only=True)
        if not row.pop("created"):
            response.status_code = 200  # a retry of an accepted message
        row.pop("auth_tag", None)
        return row

    # -- agent writes -----------------------------------------------------------------------------
    sync_slots = asyncio.Semaphore(max(1, agent_concurrency))

    @app.post("/api/agent/sync")
    async def agent_sync(body: SyncIn, p: Principal = agent) -> dict[str, Any]:
        async with sync_slots:
            return await run_in_threadpool(_agent_sync, body, p)

    def _agent_sync(body: SyncIn, p: Principal) -> dict[str, Any]:
        results = store.apply_ops(body.ops, owner=p.key) if body.ops else []
        pending = store.pending(body.poll, owner=p.key) if body.poll else {}
        refused = [t for t in body.poll if t not in pending]  # unknown, another owner's, or a wrong secret
        now = time.time()
        wrote = {op.get("trajectory_id") for op in body.ops}  # their updated_at moved already
        for t in wrote:
            if t in pending:
                beats[t] = now
        # the poll is the worker's heartbeat: written at most every 10 s per rollout (lost after 30 s)
        due = [t for t in pending if now - beats.get(t, 0.0) > 10.0]
        if due:
            beats.update(dict.fromkeys(due, now))
            store.heartbeat(due)
        return {"results": results, "pending": pending, "refused": refused, "server_time": now}

    @app.post("/api/trajectories", status_code=201)
    def register(body: RegisterIn, p: Principal = agent) -> dict[str, Any]:
        return store.register(body.trajectory_id, body.task_id, meta=body.meta, session=body.session, owner=p.key,
                              secret=body.secret or "")

    @app.put("/api/trajectories/{tid}/steps/{i}")
    def put_step(tid: str, i: Index, body: StepIn, p: Principal = agent) -> dict[str, Any]:
        return store.post_step(tid, i, body.tool, body.arguments, body.observation,
                               assistant_text=body.assistant_text, detail=body.detail,
                               guidance_ids=body.guidance_ids, session=body.session, owner=p.key,
                               secret=body.secret or "")

    @app.post("/api/trajectories/{tid}/take")
    def take(tid: str, body: TakeIn, p: Principal = agent) -> list[dict[str, Any]]:
        return [g.model_dump() for g in store.take_pending(tid, body.step_index, owner=p.key,
                                                           secret=body.secret or "")]

    @app.post("/api/trajectories/{tid}/deliver")
    def deliver(tid: str, body: DeliverIn, p: Principal = agent) -> list[dict[str, Any]]:
        rows = store.deliver(tid, body.step_index, body.guidance_ids, body.delivered_at, body.session, owner=p.key,
                             secret=body.secret or "")
        return [{k: v for k, v in r.items() if k != "auth_tag"} for r in rows]

    @app.post("/api/trajectories/{tid}/records", status_code=201)
    def post_record(tid: str, body: RecordIn, p: Principal = agent) -> dict[str, int]:
        return {"created": store.post_record(tid, body.kind, body.data, step_index=body.step_index,
                                             key=body.key, ref=body.ref, session=body.session, owner=p.key,
                                             secret=body.secret or "")}

    @app.post("/api/trajectories/{tid}/end")
    def end(tid: str, body: EndIn, p: Principal = agent) -> dict[str, bool]:
        store.end(tid, body.status, final_score=body.final_score, session=body.session, owner=p.key,
                  secret=body.secret or "")
        return {"ok": True}

    return app
