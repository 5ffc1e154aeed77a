"""Restarts lose nothing: a real ``apollo serve`` subprocess killed/stopped and restarted mid-run,
and an agent process killed and resumed. Every message accepted with a 2xx is delivered exactly
once, to the right trajectory, in order."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict

import pytest

from apollo.guidance.client import AnnotatorClient, GuidanceClient, ServiceError
from apollo.guidance.harness import ServiceProcess
from apollo.guidance.simagent import run_agent
from apollo.guidance.store import GuidanceStore

TOK = {"annotator": "annot-restart-5f1c2a9e", "viewer": "viewer-restart-77aa01", "agent": "agent-restart-0b3d44"}


def wait_for(pred, timeout=20.0, every=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise AssertionError("condition not reached in time")


def test_service_restart_mid_run_loses_nothing(tmp_path):
    svc = ServiceProcess(tmp_path / "g.sqlite", tmp_path / "service.log", tokens=TOK).start()
    stop_ann, stop_agents = threading.Event(), threading.Event()
    try:
        tids = [f"run-{i}" for i in range(4)]
        clients = {t: GuidanceClient(svc.url, TOK["agent"], poll_s=0.05, max_backoff_s=0.2) for t in tids}
        for t, c in clients.items():
            c.register(t, "task-restart", meta={"max_steps": 1000})
        assert all(c.flush(10) for c in clients.values())
        accepted: dict[str, list[str]] = defaultdict(list)  # answered 2xx
        taken: dict[str, list[dict]] = {}
        lock = threading.Lock()

        def annotator(name: str) -> None:
            ann = AnnotatorClient(svc.url, TOK["annotator"], timeout_s=10.0, retry_s=180.0)  # a loaded CI machine is slow
            for n in itertools.count():
                if stop_ann.is_set():
                    break
                tid = tids[n % len(tids)]
                row = ann.send_guidance(tid, f"{name} says #{n}", guidance_id=f"{name}-{n:05d}")
                with lock:
                    accepted[tid].append(row["guidance_id"])
                time.sleep(0.03)
            ann.close()

        def agent(tid: str) -> None:
            got: set[str] = set()

            def behind() -> bool:  # after the stop, keep stepping until every accepted message arrived
                with lock:
                    return not set(accepted[tid]) <= got

            def on_step(_i, gs):
                got.update(g.guidance_id for g in gs)

            taken[tid] = run_agent(clients[tid], tid, "task-restart", step_s=0.02, stop=stop_agents,
                                   drain_until=behind, on_step=on_step)

        # daemon threads, stopped in `finally`: a failed restart must not leave them retrying forever
        # (a live non-daemon thread keeps pytest from exiting after its summary)
        threads = [threading.Thread(target=annotator, args=(f"ann{k}",), daemon=True) for k in range(2)]
        threads += [threading.Thread(target=agent, args=(t,), daemon=True) for t in tids]
        for th in threads:
            th.start()
        time.sleep(1.2)
        svc.kill()  # crash: in-flight requests fail, nothing is flushed
        time.sleep(0.4)
        svc.start()
        time.sleep(1.2)
        svc.stop()  # graceful restart
        svc.start()
        time.sleep(1.0)
        stop_ann.set()
        for th in threads[:2]:
            th.join(180)
        stop_agents.set()
        for th in threads[2:]:
            th.join(180)
        assert not any(th.is_alive() for th in threads), "an agent never received all its accepted guidance"
        for c in clients.values():
            assert c.close(120)
        assert svc.starts == 3 and sum(c.stats["retries"] for c in clients.values()) > 0

        store = GuidanceStore(tmp_path / "g.sqlite")
        n_accepted = sum(len(v) for v in accepted.values())
        assert n_accepted >= 4  # traffic across the restarts (10-40 messages here, fewer on a loaded machine)
        all_taken = Counter(gid for t in tids for e in taken[t] for gid, _ in e["guidance"])
        assert max(all_taken.values()) == 1, "a message was delivered twice"
        for tid in tids:
            rows = store.guidance(tid)
            by_seq = [g["guidance_id"] for g in rows]  # posting order
            got = [gid for e in taken[tid] for gid, _ in e["guidance"]]
            assert set(accepted[tid]) <= set(by_seq)
            assert got == by_seq, f"{tid}: delivered out of order or lost"
            at_step = {gid: e["step"] for e in taken[tid] for gid, _ in e["guidance"]}
            for g in rows:
                assert g["state"] == "acknowledged" and g["delivered_step"] == at_step[g["guidance_id"]]
            assert [s["step_index"] for s in store.steps(tid)] == list(range(len(taken[tid])))
        log = svc.log()
        assert "POST /api/agent/sync" in log  # the access log is on ...
        assert not any(tok in log for tok in TOK.values())  # ... and holds no token
    finally:
        stop_ann.set()
        stop_agents.set()
        svc.kill()


def test_killed_agent_resumes_with_its_pending_guidance(tmp_path):
    svc = ServiceProcess(tmp_path / "g.sqlite", tmp_path / "service.log", tokens=TOK).start()
    env = {**os.environ, "APOLLO_AGENT_TOKEN": TOK["agent"], "PYTHONUNBUFFERED": "1"}
    tid = "resumable"
    ckpt = tmp_path / "worker-checkpoint.json"  # where the worker keeps the rollout's secret
    cmd = [sys.executable, "-m", "apollo.guidance.simagent", "--url", svc.url, "--trajectory", tid,
           "--step-s", "0.4", "--state", str(ckpt)]
    procs: list[subprocess.Popen] = []
    try:
        ann = AnnotatorClient(svc.url, TOK["annotator"])
        a = subprocess.Popen([*cmd, "--steps", "100000", "--log", str(tmp_path / "a.jsonl")], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs.append(a)
        wait_for(lambda: any(t["trajectory_id"] == tid for t in ann.running()))

        def state(gid):
            return next(g["state"] for g in ann.guidance(tid) if g["guidance_id"] == gid)

        ids = [f"msg-{k:04d}" for k in range(5)]
        for gid in ids[:2]:
            ann.send_guidance(tid, f"text of {gid}", guidance_id=gid)
        wait_for(lambda: state(ids[1]) == "acknowledged")
        ann.send_guidance(tid, f"text of {ids[2]}", guidance_id=ids[2])
        wait_for(lambda: state(ids[2]) == "delivered", every=0.01)  # taken, its step not yet recorded
        a.kill()  # SIGKILL mid-step
        a.wait(10)
        assert state(ids[2]) == "delivered"
        for gid in ids[3:]:  # posted while no agent runs
            ann.send_guidance(tid, f"text of {gid}", guidance_id=gid)
        steps_before = next(t for t in ann.trajectories() if t["trajectory_id"] == tid)["step_count"]
        assert ckpt.stat().st_mode & 0o777 == 0o600
        # the agent token alone cannot take the rollout over: resuming needs the secret of the checkpoint
        thief = GuidanceClient(svc.url, TOK["agent"])
        with pytest.raises(ServiceError) as e:
            thief.resume(tid, "sim-task", timeout_s=5)
        assert e.value.status == 403 and "secret" in str(e.value)
        thief.close()
        b = subprocess.Popen([*cmd, "--resume", "--steps", str(steps_before + 4), "--log", str(tmp_path / "b.jsonl")],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(b)
        out, _ = b.communicate(timeout=60)
        assert b.returncode == 0, out
        start_b = int(out.split("start=")[1].split()[0])
        assert start_b == steps_before

        def read(name):
            return [json.loads(x) for x in (tmp_path / name).read_text().splitlines()]

        merged = [e for e in read("a.jsonl") if e["step"] < start_b] + [e for e in read("b.jsonl") if e["step"] >= start_b]
        in_traj = [(gid, e["step"]) for e in merged for gid, _ in e["guidance"]]
        assert [gid for gid, _ in in_traj] == ids  # exactly once, in order, across the kill
        resumed = [gid for e in read("b.jsonl") for gid, _ in e["guidance"]]
        assert resumed == ids[2:]  # the resumed agent got its still-pending guidance (and the re-queued one)
        rows = {g["guidance_id"]: g for g in ann.guidance(tid)}
        for gid, step in in_traj:
            assert rows[gid]["state"] == "acknowledged" and rows[gid]["delivered_step"] == step
        assert rows[ids[2]]["attempts"] == 1 and rows[ids[0]]["attempts"] == 0
        t = next(t for t in ann.trajectories() if t["trajectory_id"] == tid)
        assert t["epoch"] == 2 and t["status"] == "finished" and t["step_count"] == steps_before + 4
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        svc.kill()
