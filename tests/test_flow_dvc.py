"""The flow runs each stage through DVC (dvc repro --single-item) and records true provenance.

On the toy DVC project (tests/toy, in a tmp git repo) with the real flow code:
* a param edited while an earlier stage runs is used *and recorded* by the later stage;
* a param of the running stage edited mid-run fails that stage, and dvc.lock keeps the old record;
* a plain ``dvc repro`` records what it ran, its stage runs under one MLflow parent;
* reverting a param restores from DVC's run cache instead of running again; ``--force`` of a
  foreach group re-runs only those stages; every stage run carries upstream params and provenance tags.
"""

import json
import sqlite3
import subprocess
import sys
import time

import pytest

from tasks.dvc_tasks import StageNameError, overlay_args, resolve_force
from tests.toyproject import lock_params, make_toy, run, set_param

FLOW = [sys.executable, "-m", "flows.pipeline"]


def _runs(proj):
    db = sqlite3.connect(proj / "mlflow" / "mlflow.db")
    runs = {r: n for r, n in db.execute("select run_uuid, name from runs")}
    tags = {}
    for r, k, v in db.execute("select run_uuid, key, value from tags"):
        tags.setdefault(r, {})[k] = v
    params = {}
    for r, k, v in db.execute("select run_uuid, key, value from params"):
        params.setdefault(r, {})[k] = v
    return runs, tags, params


def _children(runs, tags, parent):
    return {runs[r]: r for r, t in tags.items() if t.get("mlflow.parentRunId") == parent}


def _gate_run(proj, env, stage, edit):
    """Run the flow; when ``stage`` has started (and waits for its gate), apply ``edit``, open the gate."""
    p = subprocess.Popen(FLOW, cwd=proj, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.time()
    while not (proj / f"started-{stage}").exists():
        assert p.poll() is None, p.stdout.read()[-4000:]
        assert time.time() - t0 < 900, "stage never started"
        time.sleep(0.2)
    edit()
    (proj / f"gate-{stage}").write_text("go")
    out, _ = p.communicate(timeout=1200)
    (proj / f"gate-{stage}").unlink()
    (proj / f"started-{stage}").unlink()
    return p.returncode, out


def test_force_names_are_validated():
    stages = ["a", "b", "c@x", "c@y"]
    assert resolve_force(["c"], stages) == ["c@x", "c@y"]
    assert resolve_force(["c@y", "a"], stages) == ["c@y", "a"]
    with pytest.raises(StageNameError, match="no stage 'evaluate' in dvc.yaml"):
        resolve_force(["evaluate"], stages)
    assert overlay_args({"a.value": 5, "b.list": [1, 2]}) == ["-S", "a.value=5", "-S", "b.list=[1, 2]"]
    with pytest.raises(ValueError, match="not a dotted"):
        overlay_args({"a value; rm": 1})


@pytest.mark.slow
def test_flow_records_the_params_each_stage_used(tmp_path, prefect_api):
    proj, env = make_toy(tmp_path)
    env["PREFECT_API_URL"] = prefect_api[0]
    set_param(proj, "a.wait", True)

    # 1. b's param edited while a runs: b runs with the new value, and dvc.lock says so
    rc, out = _gate_run(proj, env, "a", lambda: set_param(proj, "b.value", 20))
    assert rc == 0, out[-4000:]
    assert "stages run: a, b, c@x, c@y" in out
    assert json.loads((proj / "out/b.json").read_text())["value"] == 20
    assert lock_params(proj, "b") == {"b": {"value": 20}}
    assert lock_params(proj, "a") == {"a": {"value": 1, "wait": True}}
    assert json.loads((proj / "out/c-x.json").read_text())["total"] == 1 + 20 + 100
    st = run([sys.executable, "-m", "dvc", "status", "--json"], proj, env).stdout
    assert json.loads(st or "{}") == {}

    # MLflow: one parent, a child per stage, upstream params and provenance tags
    runs, tags, params = _runs(proj)
    parents = [r for r, t in tags.items() if t.get("apollo.kind") == "pipeline"]
    assert len(parents) == 1
    kids = _children(runs, tags, parents[0])
    assert set(kids) == {"a", "b", "c@x", "c@y"}
    assert params[kids["c@x"]] == {"a.value": "1", "a.wait": "True", "b.value": "20", "c.value": "100"}
    t = tags[kids["c@x"]]
    assert t["variant"] == "x" and len(t["git_commit"]) == 40 and len(t["dvc_lock_hash"]) == 16
    assert t["upstream_stages"] == "a,b"

    # 2. a's own param edited while a runs: a fails, dvc.lock keeps the old record
    set_param(proj, "a.value", 2)
    rc, out = _gate_run(proj, env, "a", lambda: set_param(proj, "a.value", 3))
    assert rc == 1
    assert "a.value (2 -> 3) changed while the stage ran" in out
    assert lock_params(proj, "a") == {"a": {"value": 1, "wait": True}}

    # 3. a plain `dvc repro` runs what is stale and records it; its stages share one parent run
    set_param(proj, "a.wait", False)
    out = run([sys.executable, "-m", "dvc", "repro"], proj, env, timeout=1200).stdout
    assert "Running stage 'a'" in out
    assert lock_params(proj, "a") == {"a": {"value": 3, "wait": False}}
    runs, tags, _ = _runs(proj)
    dvc_parents = [r for r, t in tags.items() if t.get("apollo.kind") == "pipeline" and "apollo.invocation" in t]
    assert len(dvc_parents) == 1 and runs[dvc_parents[0]] == "pipeline"
    assert set(_children(runs, tags, dvc_parents[0])) == {"a", "b", "c@x", "c@y"}
    shown = json.loads(run([sys.executable, "-m", "dvc", "metrics", "show", "--json"], proj, env).stdout)
    assert shown[""]["data"]["out/c-y.json"]["data"]["total"] == 3 + 20 + 100

    # 4. reverting a param restores a and b from DVC's run cache (no run); --force of a foreach
    #    group re-runs just its stages
    set_param(proj, "a.value", 1)
    set_param(proj, "a.wait", True)
    (proj / "started-a").unlink()  # left by the dvc repro above
    out = run(FLOW + ["--force", "c"], proj, env, timeout=1200).stdout
    assert "stages run: c@x, c@y\n" in out
    assert "stages restored from DVC's run cache: a, b\n" in out
    assert json.loads((proj / "out/b.json").read_text())["value"] == 20
    assert not (proj / "started-a").exists()  # a never ran
