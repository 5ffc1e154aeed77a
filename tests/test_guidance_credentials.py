"""Each rollout owns its guidance channel (issue 32): what a holder of the shared agent token (a worker
bug, a compromised sandbox that reached the worker) could do to *another* rollout, tried against the
real service on loopback, and what one malformed agent op could do to the annotators' views.

* reading or taking another rollout's guidance, re-registering or ending it: 403/409, nothing changes,
  and the real rollout still gets its message at its next step;
* oversized agent fields: 413 naming the limit, nothing stored;
* malformed agent fields: 4xx naming the field, and every annotator view still answers 200;
* a view that meets a bad stored row (an older or broken writer) shows the rest and says what it skipped;
* the store mode (no HTTP) keeps the same rule through its API.
"""

from __future__ import annotations

import sqlite3
import time

import httpx
import pytest

from apollo.guidance.auth import TokenRegistry, digest
from apollo.guidance.client import GuidanceClient
from apollo.guidance.server import serve_in_thread
from apollo.guidance.store import GuidanceStore

TOK = {"annotator": "annot-cred-2b7c9d1e", "viewer": "viewer-cred-8f0a6b3c", "agent": "agent-cred-5d4e3f2a"}
VICTIM = "dc-task-01-3f9a0c7e21"  # task id + 10 hex characters, like the rollout stage's ids


@pytest.fixture()
def svc(tmp_path):
    tokens = TokenRegistry(env={f"APOLLO_{r.upper()}_TOKEN": t for r, t in TOK.items()})
    store = GuidanceStore(tmp_path / "g.sqlite")
    with serve_in_thread(store, tokens) as url:
        yield url, store, tmp_path


def H(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOK[role]}"}


def wait_for(pred, timeout=10.0, every=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise AssertionError("condition not reached in time")


def victim(url: str) -> GuidanceClient:
    """The real worker of VICTIM, with one step posted and a message from an annotator waiting."""
    c = GuidanceClient(url, TOK["agent"], poll_s=0.05)
    c.register(VICTIM, "dc-task-01", meta={"max_steps": 50})
    assert c.take_pending(VICTIM, 0) == []
    c.post_step(VICTIM, 0, "think", {"thought": "start"}, "ok")
    assert c.flush(10)
    r = httpx.post(f"{url}/api/trajectories/{VICTIM}/guidance", json={"text": "check the data first"},
                   headers=H("annotator"))
    assert r.status_code == 201
    return c


def state_of(store: GuidanceStore) -> tuple:
    """Everything an attack could change about the victim."""
    t = store.trajectory(VICTIM)
    return (t["status"], t["epoch"], t["step_count"], [(g["guidance_id"], g["state"]) for g in store.guidance(VICTIM)],
            [(s["step_index"], s["observation"]) for s in store.steps(VICTIM)])


def test_another_rollouts_guidance_can_be_neither_read_nor_taken(svc):
    url, store, _ = svc
    real = victim(url)
    before = state_of(store)
    text = "check the data first"
    # the agent token alone, polling by id (both shapes of the poll), taking with and without a guess
    for poll in ([VICTIM], {VICTIM: ""}, {VICTIM: "rs_" + "0" * 64}):
        r = httpx.post(url + "/api/agent/sync", json={"ops": [], "poll": poll}, headers=H("agent"))
        assert r.status_code in (200, 422) and text not in r.text, r.text
    for body in ({"step_index": 1}, {"step_index": 1, "secret": "rs_" + "0" * 64}):
        r = httpx.post(f"{url}/api/trajectories/{VICTIM}/take", json=body, headers=H("agent"))
        assert r.status_code == 403 and text not in r.text, r.text
    r = httpx.post(url + "/api/agent/sync", headers=H("agent"), json={"ops": [
        {"op": "deliver", "trajectory_id": VICTIM, "step_index": 1, "guidance_ids": [before[3][0][0]]}]})
    assert r.json()["results"][0].get("error") == "forbidden"
    assert state_of(store) == before  # nothing marked delivered or acknowledged
    # the real rollout gets its message at its next step, and only its step acknowledges it
    wait_for(lambda: real._cache.get(VICTIM))
    assert [g.text for g in real.take_pending(VICTIM, 1)] == [text]
    real.post_step(VICTIM, 1, "think", {}, "ok")
    assert real.flush(10)
    [g] = store.guidance(VICTIM)
    assert g["state"] == "acknowledged" and g["delivered_step"] == 1
    real.close()


def test_another_rollout_can_be_neither_re_registered_nor_ended(svc):
    url, store, _ = svc
    real = victim(url)
    before = state_of(store)
    for body in ({"trajectory_id": VICTIM, "task_id": "dc-task-01", "session": "a" * 32},
                 {"trajectory_id": VICTIM, "task_id": "dc-task-01"}):
        r = httpx.post(url + "/api/trajectories", json=body, headers=H("agent"))
        assert r.status_code in (403, 409) and "secret" in r.json()["detail"], r.text
    r = httpx.post(f"{url}/api/trajectories/{VICTIM}/end", json={"status": "killed"}, headers=H("agent"))
    assert r.status_code in (403, 409), r.text
    r = httpx.post(url + "/api/agent/sync", headers=H("agent"), json={"ops": [
        {"op": "register", "trajectory_id": VICTIM, "task_id": "x", "session": "b" * 32},
        {"op": "end", "trajectory_id": VICTIM, "status": "killed"},
        {"op": "step", "trajectory_id": VICTIM, "step_index": 1, "tool": "think", "observation": "poison"},
        {"op": "record", "trajectory_id": VICTIM, "kind": "terminal", "data": {"output": "poison"}}]})
    assert r.status_code == 200 and [x["error"] for x in r.json()["results"]] == ["forbidden"] * 4
    for method, path, body in (("PUT", "steps/1", {"tool": "think", "observation": "poison"}),
                               ("POST", "records", {"kind": "terminal", "data": {"output": "poison"}}),
                               ("POST", "deliver", {"step_index": 1, "guidance_ids": [before[3][0][0]]})):
        r = httpx.request(method, f"{url}/api/trajectories/{VICTIM}/{path}", json=body, headers=H("agent"))
        assert r.status_code == 403, (path, r.text)
    assert state_of(store) == before  # still running, same epoch, no step, nothing expired
    # the real worker's next step is recorded (no 409), annotators can still send guidance
    assert [g.text for g in real.take_pending(VICTIM, 1)] in ([], ["check the data first"])
    real.post_step(VICTIM, 1, "think", {}, "the real step")
    assert real.flush(10) and real._fenced == set()
    assert [s["observation"] for s in store.steps(VICTIM)] == ["ok", "the real step"]
    r = httpx.post(f"{url}/api/trajectories/{VICTIM}/guidance", json={"text": "still here"}, headers=H("annotator"))
    assert r.status_code == 201
    real.end(VICTIM)
    assert store.trajectory(VICTIM)["status"] == "finished"
    real.close()


def test_oversized_agent_fields_are_413_naming_the_limit(svc):
    url, store, _ = svc
    reg = store.register("big", "task", owner=digest(TOK["agent"]))  # registered through the service
    secret = reg.get("secret")
    ten_mb = "x" * (10 * 1024 * 1024)
    r = httpx.put(url + "/api/trajectories/big/steps/0", json={"tool": "think", "observation": ten_mb, "secret": secret},
                  headers=H("agent"), timeout=60)
    assert r.status_code == 413, r.status_code
    from apollo.guidance.inputs import LIMITS

    assert "observation" in r.json()["detail"] and str(LIMITS["observation"]) in r.json()["detail"]
    big = 300 * 1024
    for op, field in (({"op": "step", "step_index": 0, "tool": "think", "observation": "x" * big}, "observation"),
                      ({"op": "step", "step_index": 0, "tool": "think", "assistant_text": "x" * big}, "assistant_text"),
                      ({"op": "step", "step_index": 0, "tool": "think",
                        "detail": {"context": [{"role": "user", "content": "x" * (5 * 1024 * 1024)}]}}, "context"),
                      ({"op": "step", "step_index": 0, "tool": "think", "summary": {
                          "index": 0, "covers_from": 0, "covers_to": 0, "before_step": 0, "text": "x" * 600_000}},
                       "summary"),
                      ({"op": "record", "kind": "terminal", "data": {"output": "x" * (2 * 1024 * 1024)}}, "record"),
                      ({"op": "register", "task_id": "task", "meta": {"notes": "x" * (2 * 1024 * 1024)}}, "meta")):
        tid = "big" if op["op"] != "register" else "big-meta"
        r = httpx.post(url + "/api/agent/sync", headers=H("agent"), timeout=60,
                       json={"ops": [{**op, "trajectory_id": tid, "secret": secret}]})
        assert r.status_code == 413, (field, r.status_code)
        assert field in r.json()["detail"] and str(LIMITS[field]) in r.json()["detail"], r.json()
    assert store.steps("big") == [] and store.records("big") == []
    assert [t["trajectory_id"] for t in store.trajectories()] == ["big"]


def annotator_views(url: str) -> dict[str, int]:
    """Every read the console makes, for every listed rollout and step: path -> status."""
    out = {}
    with httpx.Client(base_url=url, headers=H("viewer"), timeout=30) as h:
        for p in ("/api/trajectories?status=all", "/api/triage?status=all", "/api/guidance"):
            out[p] = h.get(p).status_code
        for t in h.get("/api/trajectories?status=all").json():
            tid = t["trajectory_id"]
            for p in ("", "/steps", "/steps?full=true", "/records", "/guidance"):
                out[f"/api/trajectories/{tid}{p}"] = h.get(f"/api/trajectories/{tid}{p}").status_code
            for s in h.get(f"/api/trajectories/{tid}/steps").json():
                for p in ("", "/context"):
                    q = f"/api/trajectories/{tid}/steps/{s['step_index']}{p}"
                    out[q] = h.get(q).status_code
    return out


def test_malformed_agent_ops_are_4xx_and_every_view_still_answers(svc):
    url, store, _ = svc
    ok = {"index": 0, "covers_from": 0, "covers_to": 1, "before_step": 1, "text": "so far"}
    bad_ops = [
        {"op": "register", "trajectory_id": "m-list", "task_id": "t", "meta": [1, 2]},
        {"op": "register", "trajectory_id": "m-prefix", "task_id": "t", "meta": {"prefix_messages": 5}},
        {"op": "register", "trajectory_id": "m-content", "task_id": "t",
         "meta": {"prefix_messages": [{"role": "user", "content": 5}]}},
        {"op": "step", "trajectory_id": "r", "step_index": 1, "tool": "think",
         "detail": {"context_ref": {"summary_index": 0}}, "summary": {"index": 0, "text": 5}},
        {"op": "step", "trajectory_id": "r", "step_index": 1, "tool": "think", "detail": {"context_ref": {"summary_index": "x"}}},
        {"op": "step", "trajectory_id": "r", "step_index": 1, "tool": "think", "detail": {"context": "not a window"}},
        {"op": "step", "trajectory_id": "r", "step_index": 1, "tool": "think", "detail": {"observation": [1]}},
        {"op": "step", "trajectory_id": "r", "step_index": 1, "tool": "think", "summary": [1, 2]},
        {"op": "step", "trajectory_id": "r", "step_index": 2_000_000_000, "tool": "think"},
        {"op": "record", "trajectory_id": "r", "kind": "terminal", "data": [1, 2]},
    ]
    reg = store.register("r", "t", owner=digest(TOK["agent"]),
                         meta={"prefix_messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "T"}]})
    secret = reg.get("secret")
    r = httpx.post(url + "/api/agent/sync", headers=H("agent"), json={"ops": [
        {"op": "step", "trajectory_id": "r", "step_index": 0, "tool": "think", "observation": "fine",
         "detail": {"context_ref": {"summary_index": None, "first_step": 0}}, "secret": secret}]})
    assert r.status_code == 200 and r.json()["results"][0]["ok"]
    statuses = []
    for op in bad_ops:
        r = httpx.post(url + "/api/agent/sync", headers=H("agent"), json={"ops": [{**op, "secret": secret}]})
        statuses.append(r.status_code)
        if 400 <= r.status_code < 500:
            assert r.json()["detail"], r.text  # a message naming what is wrong
    views = annotator_views(url)
    assert {p: s for p, s in views.items() if s != 200} == {}, views
    assert statuses == [400] * len(bad_ops), statuses
    assert [t["trajectory_id"] for t in store.trajectories()] == ["r"]  # refused registrations leave nothing
    assert [s["step_index"] for s in store.steps("r")] == [0]
    # the field is named
    r = httpx.post(url + "/api/agent/sync", headers=H("agent"), json={"ops": [{**bad_ops[2], "secret": secret}]})
    assert "meta.prefix_messages.0.content" in r.json()["detail"]
    r = httpx.post(url + "/api/agent/sync", headers=H("agent"), json={"ops": [{
        "op": "step", "trajectory_id": "r", "step_index": 1, "tool": "think", "summary": {**ok, "text": 5},
        "secret": secret}]})
    assert r.status_code == 400 and "summary.text" in r.json()["detail"]


def test_views_skip_bad_stored_rows_and_say_so(svc):
    url, store, tmp = svc
    store.register("legacy", "task", meta={"prefix_messages": [{"role": "system", "content": "S"},
                                                               {"role": "user", "content": "T"}]})
    for i in range(3):
        store.post_step("legacy", i, "run_command", {"command": f"echo {i}", "session_id": "m"}, f"out {i}",
                        detail={"context_ref": {"summary_index": None, "first_step": 0}})
    con = sqlite3.connect(tmp / "g.sqlite")  # what an older or broken writer left behind
    con.execute("UPDATE steps SET arguments='[1, 2]', detail='{broken' WHERE step_index=1")
    con.execute("""UPDATE steps SET detail='{"context_ref": {"summary_index": "x", "first_step": -4},
                   "context": "no"}' WHERE step_index=2""")
    con.execute("UPDATE records SET data='[\"not\", \"an object\"]' WHERE step_index=0")
    con.execute("""UPDATE steps SET detail='{"context_ref": {"summary_index": 0, "first_step": 0}}'
                   WHERE step_index=0""")
    con.execute("""INSERT INTO records (trajectory_id, step_index, kind, ref, key, created_at, data)
                   VALUES ('legacy', 2, 'summary', '0', 'summary:0', 0, '{"index": 0, "text": 7}')""")
    con.execute("""UPDATE trajectories SET meta='{"prefix_messages": 5}' WHERE trajectory_id='legacy'""")
    con.commit()
    con.close()
    views = annotator_views(url)
    assert {p: s for p, s in views.items() if s != 200} == {}, views
    with httpx.Client(base_url=url, headers=H("viewer")) as h:
        steps = h.get("/api/trajectories/legacy/steps?full=true").json()
        assert [s["step_index"] for s in steps] == [0, 1, 2]  # the rest is shown
        assert steps[1]["arguments"] == {} and len(steps[1]["skipped"]) == 2
        recs = h.get("/api/trajectories/legacy/records").json()
        assert len(recs) == 3 and recs[0]["data"] == {} and "not a JSON object" in recs[0]["skipped"][0]
        assert "skipped" in h.get("/api/trajectories/legacy").json()
        ctx = h.get("/api/trajectories/legacy/steps/2/context").json()
        notes = " | ".join(ctx["notes"])
        assert ctx["source"] == "rebuilt" and "malformed" in notes, notes
        assert "agent-reported context window is malformed" in notes and "summary index" in notes
        assert "step 1: arguments" in notes and "system prompt and task text" in notes
        ctx0 = h.get("/api/trajectories/legacy/steps/0/context").json()
        assert any("summary #0 is malformed" in n for n in ctx0["notes"]), ctx0["notes"]


def test_the_store_mode_keeps_the_same_rule(tmp_path):
    db = tmp_path / "g.sqlite"
    worker = GuidanceStore(db)  # the worker that registered the rollout (it holds its secret)
    reg = worker.register(VICTIM, "dc-task-01")
    gid = worker.post_guidance(VICTIM, "check the data first")
    other = GuidanceStore(db)  # another worker's store object on the same database
    from apollo.guidance.store import Forbidden

    for call in (lambda: other.take_pending(VICTIM, 0), lambda: other.post_step(VICTIM, 0, "think", {}, "poison"),
                 lambda: other.end(VICTIM), lambda: other.register(VICTIM, "x"),
                 lambda: other.deliver(VICTIM, 0, [gid]), lambda: other.post_record(VICTIM, "terminal", {"o": 1}),
                 lambda: other.take_pending(VICTIM, 0, secret="rs_" + "0" * 64)):
        with pytest.raises(Forbidden, match="secret"):
            call()
    assert other.pending([VICTIM]) == {}
    assert worker.guidance_by_id(gid)["state"] == "pending" and worker.steps(VICTIM) == []
    assert reg["secret"] and worker.secret(VICTIM) == reg["secret"]
    # the owner works; a restarted worker passes the secret it kept with its checkpoint
    assert [g.guidance_id for g in worker.take_pending(VICTIM, 0)] == [gid]
    restarted = GuidanceStore(db)
    res = restarted.register(VICTIM, "dc-task-01", secret=reg["secret"])
    assert res["resumed"] and res["secret"] != reg["secret"] and res["requeued"] == 1
    with pytest.raises(Forbidden):  # the old registration's secret is fenced off
        worker.post_step(VICTIM, 0, "think", {}, "zombie", secret=reg["secret"])
    assert [g.guidance_id for g in restarted.take_pending(VICTIM, 0)] == [gid]
    restarted.post_step(VICTIM, 0, "think", {}, "ok")
    restarted.end(VICTIM)
    assert worker.guidance_by_id(gid)["state"] == "acknowledged"


class _PostAfterRegister:
    """A rollout worker's channel, with an annotator's message posted right after the worker registers
    (through the store's annotator path), due before step 1."""

    def __init__(self, channel, db):
        self.ch, self.db = channel, db

    def register(self, tid, task_id, *, meta=None):
        self.ch.register(tid, task_id, meta=meta)
        if hasattr(self.ch, "flush"):  # the HTTP client only queues the register
            assert self.ch.flush(10)
        GuidanceStore(self.db).post_guidance(tid, "look at the data first", at_step=1)

    def take_pending(self, tid, i):
        if i == 1 and hasattr(self.ch, "_cache"):  # the HTTP client's poll brings it in the background
            wait_for(lambda: self.ch._cache.get(tid))
        return self.ch.take_pending(tid, i)

    def __getattr__(self, name):
        return getattr(self.ch, name)


@pytest.mark.parametrize("mode", ["store", "service"])
def test_rollout_workers_keep_working_with_their_secrets(tmp_path, mode):
    """The rollout stage's channel in both modes (a direct store, the in-process service + HTTP
    client): the worker's register, steps, guidance and end go through with the secret it holds."""
    from apollo.agent.react import AgentConfig, run_episode
    from apollo.engines.scripted import ScriptedEngine
    from apollo.env.tasks import list_tasks
    from apollo.guidance.runtime import GuidanceSettings, guidance_session

    task = list_tasks(split="train")[0]
    db = tmp_path / "g.sqlite"
    with guidance_session(GuidanceSettings(mode=mode), db, None) as channel:
        traj = run_episode(task, ScriptedEngine(task, seed=0), guidance=_PostAfterRegister(channel, db),
                           config=AgentConfig(max_steps=4), trajectory_id="w-1", workspace_root=tmp_path / "ws")
        if mode == "store":
            assert channel.secret("w-1")
        else:
            assert channel.secret("w-1") and channel.stats["dropped"] == 0 and channel._fenced == set()
    store = GuidanceStore(db)
    assert [g.text for g in traj.steps[1].guidance] == ["look at the data first"]
    assert [s["step_index"] for s in store.steps("w-1")] == list(range(len(traj.steps)))
    [g] = store.guidance("w-1")
    assert g["state"] == "acknowledged" and g["delivered_step"] == 1
    assert store.trajectory("w-1")["status"] == "finished"
