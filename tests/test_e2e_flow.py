"""A short end-to-end run of the real Prefect flow over the real dvc.yaml, in a copy of the project.

Small params (micro model, one task per split, few steps, one seed of the four Apollo variants)
keep it to a few minutes. Rollouts
use the ``scripted`` backend (noisy expert demonstrations), so the tiny untrained policy still
yields trainable actions; evaluation runs the real HF policies; one SAO cell (3 updates) runs as
the RL subflow. Checks:
every stage ran through DVC (``dvc status`` clean), MLflow holds one parent run with a child per
stage and the trained policy in its registry, ``dvc metrics show``/``dvc plots show`` print the
results; a second run runs no stage.
"""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from apollo.schema import Trajectory
from tests.presets import TINY_TRAIN

ROOT = Path(__file__).resolve().parents[1]

SMALL = {
    "seed": 0,
    "model": {"source": "embedded", "hf_path": ""},
    "suite": {"seed": 0},
    "bootstrap": {"preset": "micro", "vocab_size": 800, "families": ["data_filtering"],
                  "demo_tasks_per_family": 2, "demos_per_task": 1, "noise": 0.0, "max_steps": 8, "workers": 2,
                  "annotator": {"max_per_trajectory": 3},
                  "sft": {"lr": 0.01, "min_lr": 0.002, "warmup_steps": 5, "max_steps": 30, "micro_batch_size": 1,
                          "grad_accum": 1, "max_length": 2048, "progress": False}},
    "rollout": {"engine": "scripted", "noise": 0.5, "samples_per_task": 1, "max_steps": 6,
                "context_tokens": 2000, "workers": 1, "tasks": ["df-train-01"],
                "annotator": {"delay_s": 0.0, "poll_s": 0.05}},
    "mask": {"rules": "apollo/supervision/rules.yaml", "min_kept_fraction": 0.0, "max_kept_fraction": 1.0},
    "build": {"upsample_react": 7, "upsample_summary": 10, "max_length": 2048},
    "train": {"lr": 0.001, "min_lr": 0.0005, "warmup_steps": 1, "epochs": 1, "micro_batch_size": 1,
              "grad_accum": 2, "max_length": 2048},
    "evaluate": {"engine": "hf", "temperature": 0.0, "max_new_tokens": 64, "samples_per_task": 1, "max_steps": 8,
                 "context_tokens": 2000, "workers": 1, "tasks": ["df-test-01"]},
    "experiment": {"seeds": [0], "baseline": "untrained",
                   "variants": {"untrained": {"policy": "base"}, "full": {"rollouts": "guided", "masks": True},
                                "no_mask": {"rollouts": "guided", "masks": False},
                                "no_human": {"rollouts": "unguided", "masks": True},
                                "sao": {"policy": "sao"}},
                   "rollouts": ["guided", "unguided"], "sft_guided": ["full", "no_mask"],
                   "sft_unguided": ["no_human"], "trained": ["full", "no_mask", "no_human"], "appo": [], "sao": ["sao"],
                   "grpo_async": [], "grpo_sync": [], "rl": ["sao"],
                   "evaluated": ["full", "no_mask", "no_human", "sao"],
                   "bootstrap": {"resamples": 500, "seed": 0, "confidence": 0.95},
                   "tts": {"steps": [1, 2, 4, 8], "wall_s": [5, 30, 120]}},
}
# the trainer has no defaults in code: its sections are complete, the repository's values overridden
_REPO = yaml.safe_load((ROOT / "params.yaml").read_text())
SMALL["train"] = {**_REPO["train"], **TINY_TRAIN, **SMALL["train"]}
SMALL["bootstrap"]["sft"] = {**_REPO["bootstrap"]["sft"], **SMALL["bootstrap"]["sft"]}
# one SAO cell (the rl stage runs as the Prefect RL subflow: a task per update, the last through DVC)
SMALL["appo"] = _REPO["appo"]  # a params dependency of every rl stage
SMALL["sao"] = {**_REPO["sao"], "agent": {
    **_REPO["sao"]["agent"], "tasks": ["df-train-01"], "max_steps": 3, "context_tokens": 2000, "updates_per_task": 1,
    "overrides": {**_REPO["sao"]["agent"]["overrides"], "steps": 3, "batch_size": 1, "group_size": 1, "workers": 1,
                  "buffer_capacity": 2, "critic_warmup_steps": 1, "max_new_tokens": 24, "max_batch": 1}}}


def _copy_project(dst: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "tmp", "cache")
    for name in ("apollo", "flows", "tasks", "infra", "tests/fixtures", "gx"):
        shutil.copytree(ROOT / name, dst / name, ignore=ignore)
    for name in ("dvc.yaml", ".dvcignore", ".gitignore"):
        shutil.copy(ROOT / name, dst / name)
    (dst / ".dvc").mkdir()
    shutil.copy(ROOT / ".dvc" / "config", dst / ".dvc" / "config")
    (dst / "params.yaml").write_text(yaml.safe_dump(SMALL, sort_keys=False))


def _run(cmd, cwd, env, timeout=900):
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{cmd} failed:\n{p.stdout[-4000:]}\n{p.stderr[-6000:]}"
    return p.stdout


@pytest.mark.slow
@pytest.mark.timeout(2700)
def test_pipeline_end_to_end(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    _copy_project(proj)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "APOLLO_", "PREFECT_API"))}
    env.update(PYTHONPATH=str(proj), PREFECT_HOME=str(tmp_path / "prefect"), TOKENIZERS_PARALLELISM="false")
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    _run(["git", "init", "-q"], proj, env)
    _run(["git", "add", "-A"], proj, env)  # a commit: runs are tagged with it (git_commit)
    _run(["git", "commit", "-q", "-m", "project"], proj, env)
    out = _run([sys.executable, "-m", "flows.pipeline"], proj, env, timeout=1800)
    for stage in ("suite", "bootstrap", "rl@sao-0", "evaluate@sao-0", "rollout@guided-0", "rollout@unguided-0",
                  "build_guided@no_mask-0",
                  "train@no_human-0", "evaluate@full-0", "evaluate_untrained@0", "reference", "experiment"):
        assert f"{stage}," in out.split("stages run:")[1].split("\n")[0] + ",", stage
    assert "| variant | seeds | k |" in out and "final − untrained" in out
    assert "cells: untrained/0, full/0, no_mask/0, no_human/0, sao/0 (all)" in out

    # artifacts of every stage
    for p in ("data/suite/suite.json", "data/suite/test/df-test-01/evaluations/df-test-01/hint.md",
              "data/models/base/config.json", "data/rollouts/guided/s0/train.jsonl",
              "data/rollouts/unguided/s0/train.jsonl", "data/guidance/guided/s0/guidance.jsonl",
              "data/masked/unguided/s0/train.jsonl", "data/dataset/no_mask/s0/train.parquet",
              "data/models/full/s0/model.safetensors", "data/eval/untrained/s0/results.json",
              "data/eval/reference/results.json", "data/experiment/results.md", "data/experiment/tts.png",
              "data/experiment/tts.html"):
        assert (proj / p).exists(), p
    assert not any(s.guidance for line in (proj / "data/rollouts/unguided/s0/train.jsonl").read_text().splitlines()
                   for s in Trajectory.model_validate_json(line).steps)
    results = json.loads((proj / "data/experiment/results.json").read_text())
    assert list(results) == ["untrained", "full", "no_mask", "no_human", "sao"]
    for v in results.values():
        assert v["seeds"] == [0]
        assert 0 <= v["final_ci"][0] <= v["final_mean"] <= v["final_ci"][1] <= 100
        assert v["final_mean"] <= v["best_mean"]
    assert results["untrained"]["diff_vs_untrained"]["mean"] == 0.0
    ref = json.loads((proj / "data/eval/reference/results.json").read_text())
    assert ref["weighted"]["final"] >= 60  # the scripted reference solves the task

    # DVC: everything recorded
    status = _run(["dvc", "status", "--json"], proj, env)
    assert json.loads(status or "{}") == {}
    lock = yaml.safe_load((proj / "dvc.lock").read_text())
    assert {"suite", "bootstrap", "rollout@guided-0", "train@full-0", "experiment", "evaluate@no_human-0"} \
        <= set(lock["stages"])

    # MLflow: one parent pipeline run, a child per stage with explicit parent
    db = sqlite3.connect(proj / "mlflow" / "mlflow.db")
    runs = dict(db.execute("select run_uuid, name from runs").fetchall())
    parents = [r for r, in db.execute("select run_uuid from tags where key='apollo.kind' and value='pipeline'")]
    assert len(parents) == 1
    children = {runs[r]: r for r, in db.execute(
        "select run_uuid from tags where key='mlflow.parentRunId' and value=?", (parents[0],))}
    assert {"suite", "bootstrap", "rollout@guided-0", "rollout@unguided-0", "guidance@guided-0", "mask@guided-0",
            "build@full-0", "train@full-0", "train@no_mask-0", "evaluate@untrained-0", "evaluate@no_human-0",
            "evaluate@reference", "experiment"} <= set(children)
    # the RL subflow: updates 1 and 2 as Prefect tasks logging to rl@sao-0/segments, update 3 through DVC
    assert {"rl@sao-0", "rl@sao-0/segments", "evaluate@sao-0"} <= set(children)
    seg_steps = {s for s, in db.execute("select step from metrics where key='sao.reward' and run_uuid=?",
                                        (children["rl@sao-0/segments"],))}
    assert seg_steps == {1, 2}
    assert {s for s, in db.execute("select step from metrics where key='sao.reward' and run_uuid=?",
                                   (children["rl@sao-0"],))} == {3}
    pdb = sqlite3.connect(tmp_path / "prefect" / "prefect.db")
    task_runs = {n for n, in pdb.execute("select name from task_run")}
    assert {"sao-s0-to-1", "sao-s0-to-2", "rl@sao-0"} <= task_runs, sorted(task_runs)
    assert "apollo-rl" in {n for n, in pdb.execute("select name from flow")}
    assert json.loads((proj / "data/models/sao/s0/sao_stats.json").read_text())["sao.steps"] == 3
    assert not (proj / "data/checkpoints/sao/s0").exists()
    tags = dict(db.execute("select key, value from tags where run_uuid=?", (children["train@no_mask-0"],)).fetchall())
    assert tags["variant"] == "no_mask" and tags["seed"] == "0" and len(tags["git_commit"]) == 40 and tags["dvc_lock_hash"]
    metric_keys = {k for k, in db.execute("select distinct key from metrics")}
    assert {"rollout.final_mean", "mask.drop_rate", "train.loss", "eval.weighted_final",
            "experiment.full.final_mean", "tts.steps.best.full"} <= metric_keys
    steps = {s for s, in db.execute("select step from metrics where key='tts.steps.best.full'")}
    assert steps == {1, 2, 4, 8}  # the curve, step = budget
    assert any(k.startswith("system/") for k in metric_keys)  # system metrics while training
    aliases = dict(db.execute("select alias, version from registered_model_aliases where name='apollo-policy-full'"))
    assert set(aliases) == {"newest", "best"}
    train_params = {k for k, in db.execute(
        "select p.key from params p join runs r on p.run_uuid=r.run_uuid where r.name='train@full-0'")}
    assert {"train.lr", "rollout.engine", "mask.rules", "build.upsample_react", "experiment.variants.full.masks"} \
        <= train_params
    inputs = db.execute("select count(*) from inputs").fetchone()[0]
    assert inputs >= 1  # log_input: the data each stage read
    metrics = json.loads(_run(["dvc", "metrics", "show", "--json"], proj, env))
    assert metrics[""]["data"]["data/experiment/results.json"]["data"]["full"]["final_mean"] >= 0
    _run(["dvc", "plots", "show", "-o", str(tmp_path / "plots")], proj, env)
    assert (tmp_path / "plots" / "index.html").exists()

    # a second run with nothing changed runs no stage; a subset of the cells gets its own table
    out2 = _run([sys.executable, "-m", "flows.pipeline", "--variants", "full", "untrained"], proj, env)
    assert "stages run: none" in out2 and "cells: full/0, untrained/0\n" in out2
    assert list(json.loads((proj / "data/run/results.json").read_text())) == ["full", "untrained"]
    # a params change makes exactly the affected stages stale
    small = yaml.safe_load((proj / "params.yaml").read_text())
    small["experiment"]["bootstrap"]["resamples"] = 600
    (proj / "params.yaml").write_text(yaml.safe_dump(small, sort_keys=False))
    out3 = _run([sys.executable, "-m", "flows.pipeline"], proj, env)
    assert "stages run: experiment\n" in out3
