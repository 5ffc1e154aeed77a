"""The deployments of infra/prefect.yaml against a real local Prefect server, with a process worker.

On the toy DVC project (tests/toy, real flow code), deployed from the project root exactly as the
README says (no APOLLO_ROOT): the nightly deployment, given a short interval schedule, produces a
run that reaches Completed; a manual run with a params overlay becomes a DVC experiment whose
metrics ``dvc exp show`` lists (its stage runs under the flow's MLflow parent run); a second manual
run started at the same time waits for the first (deployment concurrency limit 1, ENQUEUE); the
failure automation is created on the server.
"""

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.toyproject import make_toy, run

PREFECT = str(Path(sys.executable).parent / "prefect")


def _wait(pred, timeout, what, every=1.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            v = pred()
        except httpx.TimeoutException:  # a busy server (SQLite locked): ask again
            v = None
        if v:
            return v
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class _Retrying(httpx.Client):
    """A busy local server (SQLite locked) answers 503 or times out: ask again, a few times."""

    def request(self, *args, **kwargs):
        for attempt in range(10):
            try:
                r = super().request(*args, **kwargs)
                if r.status_code != 503:
                    return r
            except httpx.TimeoutException:
                if attempt == 9:
                    raise
            time.sleep(3)
        return r


class Api:
    def __init__(self, url):
        self.c = _Retrying(base_url=url, timeout=120)

    def runs(self, deployment_id):
        r = self.c.post("/flow_runs/filter", json={"flow_runs": {"deployment_id": {"any_": [deployment_id]}}})
        r.raise_for_status()
        return r.json()

    def run(self, run_id):
        return self.c.get(f"/flow_runs/{run_id}").json()

    def states(self, run_id):
        return [s["name"] for s in self.c.get("/flow_run_states/", params={"flow_run_id": run_id}).json()]

    def deployment(self, name):
        r = self.c.get(f"/deployments/name/apollo-pipeline/{name}")
        r.raise_for_status()
        return r.json()


def _done(api, run_id):
    r = api.run(run_id)
    return r if r["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") else None


@pytest.mark.slow
def test_scheduled_and_manual_runs_on_a_real_server(tmp_path, prefect_api):
    proj, env = make_toy(tmp_path)
    # the nightly cron, as an interval a test can wait for
    cfg = yaml.safe_load((proj / "infra/prefect.yaml").read_text())
    nightly = next(d for d in cfg["deployments"] if d["name"] == "nightly")
    nightly["schedules"] = [{"interval": 30, "active": True}]
    (proj / "infra/prefect.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    run(["git", "add", "-A"], proj, env)
    run(["git", "commit", "-qm", "interval schedule"], proj, env)

    url, server_log = prefect_api
    env = {**env, "PREFECT_API_URL": url, "PREFECT_WORKER_QUERY_SECONDS": "2", "PREFECT_WORKER_PREFETCH_SECONDS": "5"}
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = []
    try:
        api = Api(url)
        run([PREFECT, "work-pool", "create", "apollo-process", "--type", "process", "--overwrite"], proj, env)
        run([PREFECT, "--no-prompt", "deploy", "--prefect-file", "infra/prefect.yaml", "--all"], proj, env)
        worker = subprocess.Popen([PREFECT, "worker", "start", "--pool", "apollo-process"], cwd=proj, env=env,
                                  stdout=open(logs / "worker.log", "w"), stderr=subprocess.STDOUT)
        procs.append(worker)

        # 1. the schedule fires and a run completes
        dep = api.deployment("nightly")

        def completed_nightly():
            return next((r for r in api.runs(dep["id"]) if r["state_type"] == "COMPLETED"), None)

        try:
            first = _wait(completed_nightly, 420, "a completed scheduled run", every=3)
        except AssertionError:
            states = [(r["name"], r["state_name"]) for r in api.runs(dep["id"])]
            raise AssertionError(f"no completed nightly run: {states}\n"
                                 + (logs / "worker.log").read_text()[-5000:]
                                 + server_log.read_text()[-3000:]) from None
        assert first["auto_scheduled"]
        assert "InvalidRequestError" not in server_log.read_text()  # the scheduler works
        api.c.patch(f"/deployments/{dep['id']}", json={"paused": True}).raise_for_status()
        for r in api.runs(dep["id"]):  # let no other scheduled run compete with the manual ones
            if r["state_type"] in ("SCHEDULED", "PENDING", "RUNNING"):
                _wait(lambda: _done(api, r["id"]) or r["state_type"] == "SCHEDULED", 300, "a nightly run")
                if r["state_type"] == "SCHEDULED":
                    api.c.delete(f"/flow_runs/{r['id']}")
        assert json.loads(run([sys.executable, "-m", "dvc", "status", "--json"], proj, env).stdout or "{}") == {}

        # 2. two manual runs at once: one with a params overlay (a DVC experiment), one plain
        manual = api.deployment("manual")
        ids = []
        for params in ({"params": {"a.value": 5}}, {}):
            r = api.c.post(f"/deployments/{manual['id']}/create_flow_run", json={"parameters": params})
            r.raise_for_status()
            ids.append(r.json()["id"])
        ends = [_wait(lambda i=i: _done(api, i), 480, f"manual run {i}", every=3) for i in ids]
        assert [e["state_type"] for e in ends] == ["COMPLETED", "COMPLETED"], \
            (logs / "worker.log").read_text()[-6000:]
        (a, b) = sorted(ends, key=lambda e: e["start_time"])
        assert b["start_time"] >= a["end_time"], "the two runs overlapped"
        waited = api.states(b["id"])
        assert "AwaitingConcurrencySlot" in waited or b["expected_start_time"] < a["end_time"], waited

        # the overlay run is a DVC experiment with its metrics; the workspace params are untouched
        shown = json.loads(run([sys.executable, "-m", "dvc", "exp", "show", "--json"], proj, env).stdout)
        exps = [rev for base in shown for e in (base.get("experiments") or []) for rev in e.get("revs") or []]
        assert exps, shown
        exp = exps[0]
        assert exp["name"].startswith("ui-")
        assert exp["data"]["params"]["params.yaml"]["data"]["a"]["value"] == 5
        assert exp["data"]["metrics"]["out/c-x.json"]["data"]["total"] == 5 + 10 + 100
        assert yaml.safe_load((proj / "params.yaml").read_text())["a"]["value"] == 1

        # its stage runs are children of that flow run's MLflow parent
        db = sqlite3.connect(proj / "mlflow" / "mlflow.db")
        parent = db.execute("select run_uuid from tags where key='apollo.experiment' and value=?",
                            (exp["name"],)).fetchone()[0]
        kids = {n for n, in db.execute("select r.name from runs r join tags t on r.run_uuid=t.run_uuid "
                                       "where t.key='mlflow.parentRunId' and t.value=?", (parent,))}
        assert kids == {"a", "b", "c@x", "c@y"}

        # results artifact of a run
        arts = api.c.post("/artifacts/filter", json={"artifacts": {"key": {"any_": ["apollo-pipeline-results"]}}}).json()
        assert arts and "MLflow parent run" in arts[0]["data"]

        # 3. the failure automation
        out = run([sys.executable, "-m", "flows.automations", "--webhook-url", "http://127.0.0.1:9/hook"], proj, env)
        assert "apollo-pipeline-failed" in out.stdout
        autos = api.c.post("/automations/filter", json={}).json()
        assert [a["name"] for a in autos] == ["apollo-pipeline-failed"]
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
