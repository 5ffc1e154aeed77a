"""Stage plumbing: job plans from params, the CLI's stage registry, the report table."""

import pytest

from apollo.evaluation.report import markdown_table, per_task, summarize
from apollo.stages import STAGES, stage_module
from apollo.stages.common import plan_jobs
from tests.test_schema import make_traj


def test_plan_jobs_counts_seeds_and_unknown_ids():
    params = {"seed": 3, "rollout": {"samples_per_task": 2}}
    jobs = plan_jobs(params, "rollout", "train")
    assert len(jobs) == 18 * 2 and {j.split for j in jobs} == {"train"}
    assert len({j.seed for j in jobs}) == len(jobs)  # every rollout has its own seed
    params["rollout"]["tasks"] = ["df-train-01"]
    assert [(j.task_id, j.sample) for j in plan_jobs(params, "rollout", "train")] == [
        ("df-train-01", 0), ("df-train-01", 1)]
    params["rollout"]["tasks"] = ["df-test-01"]  # a test task may not be rolled out for training
    with pytest.raises(ValueError, match=r"rollout.tasks: no train task \['df-test-01'\]"):
        plan_jobs(params, "rollout", "train")


def test_every_dvc_stage_has_a_module():
    import yaml

    stages = yaml.safe_load(open("dvc.yaml"))["stages"]
    assert set(stages) == set(STAGES)
    for name in STAGES:
        assert callable(stage_module(name).run)
    with pytest.raises(ValueError, match="unknown stage"):
        stage_module("nope")


def test_weighted_average_is_task_count_weighted():
    trajs = []
    for tid, dom, score in [("a", "data_filtering", 80.0), ("b", "data_filtering", 40.0), ("c", "loss_design", 0.0)]:
        t = make_traj(tid)
        t.task_id, t.domain = tid, dom
        t.final_score = t.best_score = score
        trajs.append(t)
    s = summarize(per_task(trajs))
    assert s["domains"]["data_filtering"]["final"] == 60.0
    assert s["weighted"]["final"] == pytest.approx(40.0)  # = plain mean over tasks, not mean of domains (30)
    table = markdown_table({"m": s})
    assert "DF final/best" in table and "LD final/best" in table and "**40.00 / 40.00**" in table


def test_train_params_accept_yaml_exponents_and_name_bad_fields():
    import yaml

    from apollo.train.config import overlay_defaults, resolve_config

    train = yaml.safe_load("lr: 5e-6\nmin_lr: 1e-6\ngrad_accum: 8\n")
    assert isinstance(train["lr"], str)  # PyYAML reads 5e-6 as a string
    cfg, _ = resolve_config(overlay_defaults(train), 0)
    assert (cfg.lr, cfg.min_lr, cfg.grad_accum) == (5e-6, 1e-6, 8)
    with pytest.raises(ValueError, match="train.lr: expected a number, got 'fast'"):
        resolve_config(overlay_defaults({"lr": "fast"}), 0)
    with pytest.raises(ValueError, match="unknown field"):
        resolve_config(overlay_defaults({"learning_rate": 1e-5}), 0)
    with pytest.raises(ValueError, match=r"missing field\(s\) \['lr'\]"):
        resolve_config({k: v for k, v in overlay_defaults({}).items() if k != "lr"}, 0)
