"""HTTP clients of the guidance service.

:class:`GuidanceClient` is the agent side: a :class:`apollo.agent.react.GuidanceChannel` that never
makes the agent wait, neither on a human nor on the network:

* ``register``/``post_step``/``post_record``/``end`` only enqueue an operation; one background
  sender thread sends the queue in order, in batches (``POST /api/agent/sync``), and retries with
  back-off until the service answers (every operation is idempotent on the service side, so a
  batch whose answer was lost, e.g. across a service restart, is simply sent again);
* every request also polls the due guidance of the client's running trajectories, so a local
  cache holds it, in order; ``take_pending`` at a step boundary returns the cached messages at
  once and enqueues their delivery confirmation (trajectory, step, time); posting the step
  acknowledges them.

Credentials: the agent token alone may only register. The answer to ``register`` carries the
rollout's secret; the client keeps it (:meth:`GuidanceClient.secret`) and sends it with every later
operation and poll of that rollout. A worker that wants to resume a rollout after a restart keeps
that secret with its checkpoint and passes it to :meth:`GuidanceClient.resume` (see
:mod:`apollo.guidance.simagent`); a resumed rollout gets a new secret, and the old one is refused.

One client serves all the trajectories of a process (the rollout stage runs episodes in threads).
If the process dies, nothing is lost: what it took but never confirmed is still pending on the
service, what it confirmed but never recorded in a step is put back to pending when the trajectory
is resumed (:meth:`GuidanceClient.resume`) with a new session, and the old session is fenced off.

:class:`AnnotatorClient` is the annotator side (the simulated annotator uses it): the read methods
return the same shapes as :class:`apollo.guidance.store.GuidanceStore`, and ``post_guidance``
retries with a client-chosen message id, so a message is accepted at most once.

Only guidance rows of the service ever become :class:`apollo.schema.Guidance`; nothing a step or a
record carries is turned into guidance.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections import deque
from typing import Any

import httpx

from apollo.schema import Guidance

log = logging.getLogger(__name__)
RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class ServiceError(RuntimeError):
    """The service refused a request (4xx); the message never includes the token."""

    def __init__(self, status: int, detail: str):
        self.status = status
        super().__init__(f"guidance service answered {status}: {detail}")


def _detail(r: httpx.Response) -> str:
    try:
        return str(r.json().get("detail"))[:300]
    except ValueError:
        return r.text[:300]


class GuidanceClient:
    """The agent-side channel over HTTP (see the module docstring)."""

    def __init__(self, base_url: str, token: str | None = None, *, poll_s: float = 0.25, batch_max: int = 500,
                 request_timeout_s: float = 10.0, max_backoff_s: float = 2.0, flush_timeout_s: float = 30.0,
                 transport: httpx.BaseTransport | None = None):
        token = token or os.environ.get("APOLLO_AGENT_TOKEN")
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=_headers(token), timeout=request_timeout_s,
                                  transport=transport)
        self.poll_s, self.batch_max, self.max_backoff_s = poll_s, batch_max, max_backoff_s
        self.flush_timeout_s = flush_timeout_s
        self._cv = threading.Condition()
        self._ops: deque[dict[str, Any]] = deque()
        self._sessions: dict[str, str] = {}
        self._secrets: dict[str, str] = {}  # rollout -> its secret (what register answered)
        self._active: set[str] = set()
        self._fenced: set[str] = set()
        self._cache: dict[str, dict[str, dict[str, Any]]] = {}
        self._taken: dict[str, set[str]] = {}
        self._at_step: dict[tuple[str, int], list[str]] = {}
        self._closed = False
        self._wake = False
        self._stop = threading.Event()
        self._n_enqueued = 0  # operations ever queued / confirmed: flush waits for a snapshot
        self._n_done = 0
        self.stats: dict[str, Any] = {"requests": 0, "retries": 0, "ops_sent": 0, "dropped": 0,
                                      "op_latency_s": []}
        self.record_latency = False
        self._thread = threading.Thread(target=self._run, daemon=True, name="guidance-sender")
        self._thread.start()

    # --- the GuidanceChannel protocol ---------------------------------------------------------
    def register(self, trajectory_id: str, task_id: str, *, meta: dict[str, Any] | None = None) -> None:
        session = uuid.uuid4().hex
        with self._cv:
            self._sessions[trajectory_id] = session
            self._active.add(trajectory_id)
            self._fenced.discard(trajectory_id)
            self._cache.setdefault(trajectory_id, {})
            self._taken.setdefault(trajectory_id, set())
        self._enqueue({"op": "register", "trajectory_id": trajectory_id, "task_id": task_id,
                       "meta": meta or {}, "session": session})

    def resume(self, trajectory_id: str, task_id: str, *, meta: dict[str, Any] | None = None,
               secret: str | None = None, timeout_s: float = 60.0) -> dict[str, Any]:
        """Register a trajectory again after its agent died; returns ``{"next_step", "requeued",
        "secret", …}``. ``secret``: the rollout's secret the dead agent kept with its checkpoint
        (default: the one this client holds); the answer's ``secret`` replaces it.

        Synchronous (a resumed agent needs to know where it stands), retried until ``timeout_s``.
        """
        session = uuid.uuid4().hex
        with self._cv:
            secret = secret or self._secrets.get(trajectory_id)
        body = {"trajectory_id": trajectory_id, "task_id": task_id, "meta": meta or {}, "session": session,
                "secret": secret}
        r = self._request_with_retry("POST", "/api/trajectories", json=body, timeout_s=timeout_s)
        with self._cv:
            self._sessions[trajectory_id] = session
            self._secrets[trajectory_id] = r["secret"]
            self._active.add(trajectory_id)
            self._fenced.discard(trajectory_id)
            self._cache[trajectory_id] = {}
            self._taken[trajectory_id] = set()
            self._wake = True
            self._cv.notify_all()
        return r

    def take_pending(self, trajectory_id: str, step_index: int) -> list[Guidance]:
        """The cached due guidance, in order, now; its delivery is confirmed in the background."""
        now = time.time()
        with self._cv:
            cached = self._cache.get(trajectory_id) or {}
            rows = sorted(cached.values(), key=lambda r: r["seq"])
            cached.clear()
            if not rows:
                return []
            ids = [r["guidance_id"] for r in rows]
            self._taken.setdefault(trajectory_id, set()).update(ids)
            self._at_step.setdefault((trajectory_id, step_index), []).extend(ids)
            session = self._sessions.get(trajectory_id)
        self._enqueue({"op": "deliver", "trajectory_id": trajectory_id, "session": session,
                       "step_index": step_index, "guidance_ids": ids, "delivered_at": now})
        return [Guidance(guidance_id=r["guidance_id"], text=r["text"], author=r["author"],
                         created_at=r["created_at"], delivered_at=now, delivered_step=step_index,
                         auth_tag=r.get("auth_tag")) for r in rows]

    def post_step(self, trajectory_id: str, step_index: int, tool: str | None, arguments: dict[str, Any],
                  observation: str, *, step: Any = None, summary: Any = None, assistant_text: str | None = None,
                  detail: dict[str, Any] | None = None) -> None:
        from apollo.guidance.rows import step_detail, summary_dict

        with self._cv:
            ids = self._at_step.pop((trajectory_id, step_index), None)
            session = self._sessions.get(trajectory_id)
        if step is not None:
            assistant_text, extra = step_detail(step)
            detail = {**extra, **(detail or {})}
            ids = [g.guidance_id for g in step.guidance]
        self._enqueue({"op": "step", "trajectory_id": trajectory_id, "session": session, "step_index": step_index,
                       "tool": tool, "arguments": arguments or {}, "observation": observation or "",
                       "assistant_text": assistant_text or "", "detail": detail or {}, "guidance_ids": ids,
                       "summary": summary_dict(summary)})

    def post_record(self, trajectory_id: str, kind: str, data: dict[str, Any], *, step_index: int | None = None,
                    key: str | None = None, ref: str = "") -> None:
        with self._cv:
            session = self._sessions.get(trajectory_id)
        self._enqueue({"op": "record", "trajectory_id": trajectory_id, "session": session, "kind": kind,
                       "data": data, "step_index": step_index, "key": key or uuid.uuid4().hex, "ref": ref})

    def end(self, trajectory_id: str, status: str = "finished", *, final_score: float | None = None,
            flush: bool = True) -> None:
        with self._cv:
            session = self._sessions.get(trajectory_id)
            self._active.discard(trajectory_id)
            self._cache.pop(trajectory_id, None)
        self._enqueue({"op": "end", "trajectory_id": trajectory_id, "session": session, "status": status,
                       "final_score": final_score})
        if flush and not self.flush(self.flush_timeout_s):
            log.warning("guidance service unreachable: %d operation(s) of %s still queued (retrying in the "
                        "background)", self.queued(), trajectory_id)

    # --- control --------------------------------------------------------------------------------
    def secret(self, trajectory_id: str, timeout_s: float | None = None) -> str | None:
        """The rollout's secret (what the service answered to its register), for the worker's
        checkpoint; with ``timeout_s``, first wait until the queued operations are sent."""
        if timeout_s is not None:
            self.flush(timeout_s)
        with self._cv:
            return self._secrets.get(trajectory_id)

    def queued(self) -> int:
        with self._cv:
            return len(self._ops)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued operation is confirmed by the service (or the timeout)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cv:
            self._wake = True
            self._cv.notify_all()
            target = self._n_enqueued  # not what other threads queue meanwhile
            while self._n_done < target:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(left if left is None else min(left, 0.5))
        return True

    def close(self, timeout_s: float = 30.0) -> bool:
        ok = self.flush(timeout_s)
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._stop.set()
        self._thread.join(timeout=5)
        self._http.close()
        return ok

    def __enter__(self) -> GuidanceClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- internals ------------------------------------------------------------------------------
    def _enqueue(self, op: dict[str, Any]) -> None:
        op = json.loads(json.dumps(op, default=str))  # whatever the agent passed, the batch will serialize
        op["_t"] = time.monotonic()
        with self._cv:
            if self._closed:
                raise RuntimeError("the guidance client is closed")
            self._ops.append(op)
            self._n_enqueued += 1
            self._cv.notify_all()

    def _request_with_retry(self, method: str, url: str, *, timeout_s: float, **kw: Any) -> Any:
        return request_with_retry(self._http, method, url, retry_s=timeout_s, max_backoff_s=self.max_backoff_s,
                                  **kw).json()

    def _run(self) -> None:
        while True:
            try:
                self._loop()
                return
            except Exception:  # the sender must outlive any bug: log, wait, go on
                log.exception("guidance sender failed; restarting it")
                if self._stop.wait(1.0) and self._closed:
                    return

    def _loop(self) -> None:
        backoff, next_poll, warned, solo = 0.05, 0.0, False, 0
        while True:
            with self._cv:
                while True:
                    if self._ops or self._wake or (self._closed and not self._ops):
                        break
                    if self._active:
                        left = next_poll - time.monotonic()
                        if left <= 0:
                            break
                        self._cv.wait(left)
                    else:
                        self._cv.wait()
                if self._closed and not self._ops:
                    return
                self._wake = False
                size = 1 if solo else self.batch_max  # after a rejected batch: one op at a time
                batch, registering = [], set()
                for i in range(min(len(self._ops), size)):
                    op = self._ops[i]
                    if op["trajectory_id"] in registering:
                        break  # its secret comes with the answer to the register before it
                    if op["op"] == "register":
                        registering.add(op["trajectory_id"])
                    batch.append(op)
                secrets = dict(self._secrets)
                poll = {t: secrets[t] for t in sorted(self._active - self._fenced) if t in secrets}
            body = {"ops": [{**{k: v for k, v in op.items() if k != "_t"}, "secret": secrets.get(op["trajectory_id"])}
                            for op in batch], "poll": poll}
            try:
                self.stats["requests"] += 1
                r = self._http.post("/api/agent/sync", json=body)
            except httpx.TransportError as e:
                r, err = None, type(e).__name__
            else:
                err = None if r.status_code < 400 else f"HTTP {r.status_code}: {_detail(r)}"
            if r is None or r.status_code in RETRY_STATUS or r.status_code in (401, 403):
                # service down/restarting/overloaded, or a token not (yet) known: keep everything, retry
                self.stats["retries"] += 1
                if not warned and (r is not None and r.status_code in (401, 403)):
                    log.error("guidance service refused the agent token (%s); retrying", err)
                    warned = True
                if self._stop.wait(backoff) and self._closed:
                    return  # closing while the service is unreachable: give up the rest
                backoff = min(backoff * 2, self.max_backoff_s)
                continue
            if r.status_code >= 400:  # a malformed op: find it (one op per request) and drop only it
                if len(batch) > 1:
                    solo = len(batch)
                    continue
                log.error("guidance service rejected a %s operation: %s", batch[0].get("op"), err)
                self.stats["dropped"] += 1
                data: dict[str, Any] = {"results": [{"ok": False, "error": "rejected", "detail": err}],
                                        "pending": {}}
            else:
                data = r.json()
            solo = max(0, solo - 1)
            backoff, warned = 0.05, False
            now = time.monotonic()
            with self._cv:
                for _ in batch:
                    op = self._ops.popleft()
                    if self.record_latency:
                        self.stats["op_latency_s"].append((op["op"], now - op["_t"]))
                self.stats["ops_sent"] += len(batch)
                self._n_done += len(batch)
                for op, res in zip(batch, data.get("results", [])):
                    tid = op["trajectory_id"]
                    if op["op"] == "register" and res.get("ok") and isinstance(res.get("result"), dict):
                        self._secrets[tid] = res["result"]["secret"]
                    elif op["op"] == "register":  # e.g. registered by another worker: nothing more of it
                        log.error("guidance service refused to register %s: %s", tid, res.get("detail"))
                        self._fenced.add(tid)
                    if not res.get("ok", True):
                        if res.get("error") == "stale_session" and tid not in self._fenced:
                            log.warning("trajectory %s was resumed elsewhere: this agent's writes are refused", tid)
                            self._fenced.add(tid)
                        elif res.get("error") != "stale_session":
                            log.warning("guidance op %s on %s refused: %s", op["op"], tid, res.get("detail"))
                for tid in data.get("refused") or []:  # the rollout was resumed elsewhere (another secret)
                    if tid in poll and poll[tid] == self._secrets.get(tid) and tid not in self._fenced:
                        log.warning("the service refused this agent's poll of %s (resumed elsewhere?)", tid)
                        self._fenced.add(tid)
                for tid, rows in (data.get("pending") or {}).items():
                    if tid not in self._active or tid in self._fenced:
                        continue
                    taken, cache = self._taken.setdefault(tid, set()), self._cache.setdefault(tid, {})
                    for row in rows:
                        if row["guidance_id"] not in taken:
                            cache[row["guidance_id"]] = row
                next_poll = time.monotonic() + self.poll_s
                self._cv.notify_all()


def request_with_retry(http: httpx.Client, method: str, url: str, *, retry_s: float, max_backoff_s: float,
                       **kw: Any) -> httpx.Response:
    """One request, retried with exponential back-off (from 50 ms up to ``max_backoff_s``) on a
    transport error or a retryable status (``RETRY_STATUS``) for ``retry_s`` seconds, then
    :class:`TimeoutError` (chained from the last transport error, if any). Any other error status
    raises :class:`ServiceError` at once."""
    deadline, backoff = time.monotonic() + retry_s, 0.05
    last: httpx.TransportError | None = None
    while True:
        try:
            r = http.request(method, url, **kw)
            if r.status_code not in RETRY_STATUS:
                if r.status_code >= 400:
                    raise ServiceError(r.status_code, _detail(r))
                return r
        except httpx.TransportError as e:
            last = e
        if time.monotonic() > deadline:
            raise TimeoutError(f"guidance service unreachable for {retry_s:.0f} s") from last
        time.sleep(backoff)
        backoff = min(backoff * 2, max_backoff_s)


class AnnotatorClient:
    """Annotator-side calls (the simulated annotator, the load test); store-compatible read shapes."""

    def __init__(self, base_url: str, token: str | None = None, *, timeout_s: float = 10.0,
                 retry_s: float = 60.0, transport: httpx.BaseTransport | None = None):
        token = token or os.environ.get("APOLLO_ANNOTATOR_TOKEN")
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=_headers(token), timeout=timeout_s,
                                  transport=transport)
        self.retry_s = retry_s

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        return request_with_retry(self._http, method, url, retry_s=self.retry_s, max_backoff_s=2.0, **kw)

    def running(self) -> list[dict[str, Any]]:
        return self._request("GET", "/api/trajectories", params={"status": "running"}).json()

    def trajectories(self, status: str = "all") -> list[dict[str, Any]]:
        return self._request("GET", "/api/trajectories", params={"status": status}).json()

    def steps(self, trajectory_id: str, since: int = 0) -> list[dict[str, Any]]:
        return self._request("GET", f"/api/trajectories/{trajectory_id}/steps", params={"since": since}).json()

    def guidance(self, trajectory_id: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        if trajectory_id is None:
            return self._request("GET", "/api/guidance", params={"status": status} if status else {}).json()
        rows = self._request("GET", f"/api/trajectories/{trajectory_id}/guidance").json()
        return [r for r in rows if status is None or r["status"] == status]

    def send_guidance(self, trajectory_id: str, text: str, *, delay_s: float = 0.0,
                      meta: dict[str, Any] | None = None, guidance_id: str | None = None) -> dict[str, Any]:
        """POST a message (retried with the same id until answered); returns the stored row."""
        body = {"text": text, "guidance_id": guidance_id or uuid.uuid4().hex, "delay_s": delay_s,
                "meta": meta or {}}
        return self._request("POST", f"/api/trajectories/{trajectory_id}/guidance", json=body).json()

    def post_guidance(self, trajectory_id: str, text: str, *, author: str | None = None, delay_s: float = 0.0,
                      meta: dict[str, Any] | None = None, guidance_id: str | None = None) -> str:
        """Store-compatible; ``author`` is ignored: the service records the token's name."""
        return self.send_guidance(trajectory_id, text, delay_s=delay_s, meta=meta,
                                  guidance_id=guidance_id)["guidance_id"]
