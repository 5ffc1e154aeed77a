"""Experiment cells through the real stage code: guided vs unguided rollouts of one seed, the
no_mask build, the untrained policy, and the aggregate stage on per-cell evaluation files."""

from __future__ import annotations

import json
import multiprocessing as mp

import yaml

from apollo.config import Paths
from apollo.env.tasks import list_tasks
from apollo.guidance.store import GuidanceStore
from apollo.schema import read_trajectories, write_trajectories
from tests.test_experiment import traj

PARAMS_FILE = "params.yaml"


def _params():
    return yaml.safe_load(open(PARAMS_FILE))


def test_unguided_rollouts_run_without_an_annotator(tmp_path):
    from apollo.stages import rollout

    tasks = [t.task_id for t in list_tasks(split="train")[:3]]
    params = {"seed": 0, "rollout": {"engine": "scripted", "noise": 0.6, "tasks": tasks, "samples_per_task": 1,
                                     "workers": 1, "max_steps": 6,
                                     "annotator": {"delay_s": 0.0, "poll_s": 0.05, "max_per_trajectory": 3}}}
    root = Paths(tmp_path)
    before = set(mp.active_children())
    rollout.run(params, paths=root.cell(4, "unguided"))
    assert set(mp.active_children()) <= before  # no annotator process was started
    unguided = read_trajectories(tmp_path / "data/rollouts/unguided/s4/train.jsonl")
    assert len(unguided) == 3 and not any(s.guidance for t in unguided for s in t.steps)
    assert not root.guidance_store.exists()  # no episode was registered with a guidance channel
    rollout.run(params, paths=root.cell(4, "guided"))
    guided = read_trajectories(tmp_path / "data/rollouts/guided/s4/train.jsonl")
    store = GuidanceStore(str(root.guidance_store))
    try:  # the annotator watched every guided episode (whether it found a drift to correct is the policy's)
        assert sorted(r["trajectory_id"] for r in store.trajectories()) == sorted(t.trajectory_id for t in guided)
    finally:
        store.close()
    # the same jobs and seeds: only the annotator differs
    assert sorted((t.task_id, t.seed) for t in guided) == sorted((t.task_id, t.seed) for t in unguided)
    assert not (tmp_path / "data/rollouts/train.jsonl").exists()


def test_no_mask_trains_every_valid_action():
    """full keeps the mask stage's drops out of the loss; no_mask trains every valid action of the
    same trajectory (an invalid action never trains)."""
    from apollo.agent.prompt import window_conversation
    from apollo.experiment.variants import variant
    from apollo.schema import Action, MaskDecision
    from apollo.stages.build import strip_action_masks

    t = traj(evals=[(5, 50.0, True)], n_steps=6)
    t.steps[1].mask = MaskDecision(keep=False, source="rule", category="blind_edit", reason="r")
    t.steps[2].mask = MaskDecision(keep=False, source="symbolic", category="invalid_action", reason="r")
    t.steps[2].action = Action(tool=None, parse_error="no tool call")
    for st in (t.steps[0], *t.steps[3:]):
        st.mask = MaskDecision(keep=True, source="symbolic", reason="ok")

    def trained(tr):
        return sum(window_conversation(tr, 0, 5, None)[1])

    params = _params()
    assert variant(params, "full").masks and not variant(params, "no_mask").masks
    assert trained(t) == 4
    assert trained(strip_action_masks([t.model_copy(deep=True)])[0]) == 5  # + the rule-dropped step, not the invalid one


def test_experiment_stage_aggregates_every_cell(tmp_path):
    from apollo.stages import experiment

    params = _params()
    params["experiment"]["seeds"] = [0, 1, 2]
    params["experiment"]["bootstrap"]["resamples"] = 500
    paths = Paths(tmp_path)
    table = list(params["experiment"]["variants"])  # the Apollo ablation and any later method (e.g. APPO)
    plus_of = {"untrained": 0.0, "full": 10.0, "no_mask": 5.0, "no_human": 1.0}
    for v in table:
        plus = plus_of.get(v, 2.0)
        for s in (0, 1, 2):
            trajs = [traj(task, dom, s, [(1, 20.0 + plus, False), (5, 30.0 + plus + s, True)], tid=f"{v}{task}{s}")
                     for task, dom in (("a", "loss_design"), ("b", "data_filtering"), ("c", "data_filtering"))]
            write_trajectories(paths.cell(s).eval(v) / "trajectories.jsonl", trajs)
    metrics = experiment.run(params, paths=paths)
    out = tmp_path / "data/experiment"
    res = json.loads((out / "results.json").read_text())
    assert list(res) == table and table[:4] == ["untrained", "full", "no_mask", "no_human"]
    assert res["full"]["final_mean"] == 41.0 and res["full"]["seeds"] == [0, 1, 2]
    assert res["full"]["diff_vs_untrained"]["mean"] == 10.0
    assert metrics["experiment.no_mask.diff_vs_untrained"] == 5.0
    for name in ("results.md", "tts.png", "tts.html", "tts.json", "tts_steps.json", "tts_wall_s.json"):
        assert (out / name).stat().st_size > 0, name
    wide = json.loads((out / "tts_steps.json").read_text())
    assert wide[0]["budget"] == params["experiment"]["tts"]["steps"][0]
    assert set(wide[-1]) == {"budget", *table}
    assert wide[-1]["full"] == res["full"]["best_mean"]  # at the longest budget: the best score


def test_run_stage_gives_a_cell_its_seed_paths_and_tags(tmp_path, monkeypatch):
    """``apollo stage build --rollouts guided --variant no_mask --seed 2``: the stage sees the cell's
    seed and paths; its MLflow run is ``build@no_mask-2`` with tags variant and seed."""
    import sqlite3
    import types

    from apollo.stages import run_stage

    monkeypatch.setenv("APOLLO_ROOT", str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("APOLLO_PARENT_RUN_ID", raising=False)
    monkeypatch.delenv("DVC_STAGE", raising=False)
    seen = {}

    def run(params, tracker, paths=None, **kw):
        seen.update(seed=params["seed"], paths=paths, kw=kw)
        return {"build.rows": 1}

    params = {**_params(), "seed": 0}
    run_stage("build", params, variant="no_mask", seed=2, rollouts="guided", module=types.SimpleNamespace(run=run))
    assert seen["seed"] == 2 and seen["kw"] == {}
    assert seen["paths"].masked == tmp_path / "data/masked/guided/s2"
    assert seen["paths"].dataset == tmp_path / "data/dataset/no_mask/s2"
    db = sqlite3.connect(tmp_path / "mlflow" / "mlflow.db")
    (run_id,) = db.execute("select run_uuid from runs where name='build@no_mask-2'").fetchone()
    tags = dict(db.execute("select key, value from tags where run_uuid=?", (run_id,)).fetchall())
    assert tags["variant"] == "no_mask" and tags["seed"] == "2"
