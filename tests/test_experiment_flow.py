"""The experiment through the real flow, DVC and a real local Prefect server (small params of
tests/test_e2e_flow.py: micro model, one task per split, one seed):

* killing a run midway and running it again redoes only the unfinished stages (DVC records each
  finished stage in dvc.lock; the rerun skips them);
* the Prefect deployment ``ablation`` runs a 1-seed, 2-variant parameter set: only the stages of
  those cells, then their table (``data/run/``), under one MLflow parent run.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.test_e2e_flow import _copy_project, _run
from tests.test_prefect_server import PREFECT, Api, _done, _wait


def _project(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    _copy_project(proj)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "APOLLO_", "PREFECT_", "DVC_"))}
    env.update(PYTHONPATH=str(proj), PREFECT_HOME=str(tmp_path / "prefect"), TOKENIZERS_PARALLELISM="false",
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
               GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1",
               PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120")
    _run(["git", "init", "-q", "-b", "main"], proj, env)
    return proj, env


def _locked(proj) -> set[str]:
    f = proj / "dvc.lock"
    return set((yaml.safe_load(f.read_text()) or {}).get("stages", {})) if f.exists() else set()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_killed_experiment_resumes_without_redoing_finished_stages(tmp_path):
    proj, env = _project(tmp_path)
    cmd = [sys.executable, "-m", "flows.pipeline", "--variants", "untrained", "full"]
    p = subprocess.Popen(cmd, cwd=proj, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    t0 = time.time()
    try:
        while "rollout@guided-0" not in _locked(proj):  # finished stages are in dvc.lock
            assert p.poll() is None, p.stdout.read().decode()[-4000:]
            assert time.time() - t0 < 900, "rollout@guided-0 never finished"
            time.sleep(0.5)
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # the flow, DVC and the running stage
        p.wait()
    done = _locked(proj)
    assert {"suite", "bootstrap", "rollout@guided-0"} <= done and "evaluate@full-0" not in done
    out = _run(cmd, proj, env)
    ran = set(out.split("stages run: ")[1].split("\n")[0].split(", "))
    assert not (ran & done), f"redid finished stages {ran & done}"
    assert {"evaluate@full-0", "evaluate_untrained@0", "train@full-0"} <= ran | done
    assert "rollout@unguided-0" not in ran | done  # not a stage of the selected cells
    res = json.loads((proj / "data/run/results.json").read_text())
    assert list(res) == ["untrained", "full"] and res["full"]["seeds"] == [0]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_ablation_deployment_on_a_real_prefect_server(tmp_path, prefect_api):
    proj, env = _project(tmp_path)
    _run(["git", "add", "-A"], proj, env)
    _run(["git", "commit", "-qm", "project"], proj, env)
    url, server_log = prefect_api
    env = {**env, "PREFECT_API_URL": url, "PREFECT_WORKER_QUERY_SECONDS": "2", "PREFECT_WORKER_PREFETCH_SECONDS": "5"}
    worker = None
    try:
        api = Api(url)
        _run([PREFECT, "work-pool", "create", "apollo-process", "--type", "process", "--overwrite"], proj, env)
        _run([PREFECT, "--no-prompt", "deploy", "--prefect-file", "infra/prefect.yaml", "--name", "ablation"], proj, env)
        worker = subprocess.Popen([PREFECT, "worker", "start", "--pool", "apollo-process"], cwd=proj, env=env,
                                  stdout=open(tmp_path / "worker.log", "w"), stderr=subprocess.STDOUT)
        r = api.c.get("/deployments/name/apollo-ablation/ablation")
        r.raise_for_status()
        dep = r.json()
        assert set(dep["parameter_openapi_schema"]["properties"]) >= {"variants", "seeds", "samples_per_task"}
        # the CLI trigger, as a user (or the UI's "Run" form) does it
        _run([PREFECT, "deployment", "run", "apollo-ablation/ablation", "-p", 'variants=["full", "untrained"]',
              "-p", "seeds=[0]"], proj, env)
        run_id = _wait(lambda: next((x["id"] for x in api.runs(dep["id"])), None), 60, "the flow run")
        end = _wait(lambda: _done(api, run_id), 900, "the ablation run", every=3)
        assert end["state_type"] == "COMPLETED", (tmp_path / "worker.log").read_text()[-6000:]
        res = json.loads((proj / "data/run/results.json").read_text())
        assert list(res) == ["full", "untrained"]
        assert not (proj / "data/rollouts/unguided").exists()  # no_human's stages did not run
        assert not (proj / "data/experiment").exists()  # a subset: no DVC experiment stage
        db = sqlite3.connect(proj / "mlflow" / "mlflow.db")
        parent = db.execute("select run_uuid from tags where key='apollo.cells' and value='full/0 untrained/0'"
                            ).fetchone()[0]
        kids = {n for n, in db.execute("select r.name from runs r join tags t on r.run_uuid=t.run_uuid "
                                       "where t.key='mlflow.parentRunId' and t.value=?", (parent,))}
        assert {"train@full-0", "evaluate@full-0", "evaluate@untrained-0", "evaluate@reference"} <= kids
        assert not any("no_mask" in k or "no_human" in k for k in kids)
        keys = {k for k, in db.execute("select distinct key from metrics where run_uuid=?", (parent,))}
        assert {"experiment.full.final_mean", "experiment.full.diff_vs_untrained", "tts.steps.best.full"} <= keys
        assert "InvalidRequestError" not in server_log.read_text()
    finally:
        if worker is not None:
            worker.terminate()
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                worker.kill()
