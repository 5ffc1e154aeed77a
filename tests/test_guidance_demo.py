"""``apollo serve --demo``: simulated agents at a human pace, live in the console without training."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx

from apollo.guidance.harness import free_port
from apollo.guidance.store import GuidanceStore


def test_serve_demo_runs_live_agents_at_a_human_pace(tmp_path):
    port = free_port()
    db = tmp_path / "demo.sqlite"
    # no APOLLO_* token variables, but the generated suite the demo's agents work on (conftest)
    env = {k: v for k, v in os.environ.items() if not k.startswith("APOLLO_") or k == "APOLLO_SUITE_ROOT"}
    proc = subprocess.Popen([sys.executable, "-m", "apollo", "serve", "--demo", "4", "--demo-step-s", "0.4",
                             "--port", str(port), "--db", str(db), "--tokens", str(tmp_path / "tokens.json"),
                             "--no-access-log"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        token, seen = None, []
        deadline = time.monotonic() + 60
        while token is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "apollo serve --demo exited:\n" + "".join(seen)
            seen.append(line)
            if line.startswith("apl_"):
                token = line.strip()  # printed once, for the demo's annotator
        assert token
        h = {"Authorization": f"Bearer {token}"}
        rows: list[dict] = []
        # the agents' own deadline, from the token on (one shared 60 s, start-up included, ran out once on a loaded
        # machine: a clean-clone CI run at 10bc4cf saw no rows; alone the test takes 3 s)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                rows = httpx.get(f"http://127.0.0.1:{port}/api/triage?status=all", headers=h, timeout=10).json()["rows"]
            except httpx.TransportError:
                rows = []
            if len(rows) >= 4 and sum(r["step_count"] for r in rows) >= 8:
                break
            time.sleep(0.5)
        assert len(rows) >= 4, rows
        tasks = {}
        for r in rows:
            tasks.setdefault(r["task_id"], set()).add(r["sample"])
        assert any(s == {1, 2} for s in tasks.values())  # two samples of a task, told apart
        store = GuidanceStore(db)
        for r in rows:  # a human pace: 0.4 s × U(0.5, 1.5) per generation, plus the tool's own time
            created = [s["created_at"] for s in store.steps(r["trajectory_id"])]
            assert all(b - a >= 0.2 for a, b in zip(created, created[1:])), created
    finally:
        proc.terminate()
        proc.wait(30)
    # the demo's episodes end with the service (nothing is left running)
    running = GuidanceStore(db).trajectories("running")
    assert running == [], [t["trajectory_id"] for t in running]
