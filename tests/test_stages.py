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
    modules = {(st.get("do") or st)["cmd"].split()[4] for st in stages.values()}  # python -m apollo stage NAME
    assert modules <= set(STAGES) and "experiment" in modules
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


def test_params_guard_fails_when_a_declared_param_changes(tmp_path):
    from apollo.stages.provenance import ParamsChangedError, ParamsGuard, select

    f = tmp_path / "params.yaml"
    f.write_text("seed: 1\ntrain: {lr: 0.1, steps: 5}\nrollout: {temperature: 0.7}\n")
    assert select({"a": {"b": 1, "c": 2}, "d": 3}, ["a.b", "d", "x"]) == {"a": {"b": 1}, "d": 3}
    guard = ParamsGuard(f, ["seed", "train"])
    f.write_text("seed: 1\ntrain: {lr: 0.1, steps: 5}\nrollout: {temperature: 0.2}\n")  # not declared
    guard.check()
    f.write_text("seed: 1\ntrain: {lr: 0.2, steps: 5}\nrollout: {temperature: 0.2}\n")
    with pytest.raises(ParamsChangedError, match=r"train.lr \(0.1 -> 0.2\) changed while the stage ran"):
        guard.check()


def test_stage_info_knows_upstream_params_and_data_deps():
    from pathlib import Path

    from apollo.stages.provenance import stage_info

    info = stage_info(Path("."), "train@full-1")
    assert info.param_keys == ["train"]
    assert {"bootstrap", "rollout@guided-1", "guidance@guided-1", "mask@guided-1", "build_guided@full-1"} \
        <= set(info.upstream)
    assert not any(u.endswith("-0") or "unguided" in u for u in info.upstream)  # only its own cell
    assert {"model", "bootstrap", "rollout", "mask", "build", "experiment.variants.full"} <= set(info.upstream_param_keys)
    assert {"data/dataset/full/s1", "data/models/base"} <= set(info.data_deps)
    ev = stage_info(Path("."), "evaluate@no_human-2")
    assert "train@no_human-2" in ev.upstream and "data/models/no_human/s2" in ev.data_deps
    assert "rollout@unguided-2" in ev.upstream and "rollout@guided-2" not in ev.upstream
    assert stage_info(Path("."), "nosuch") is None


def test_cli_errors_are_one_sentence_without_traceback(tmp_path):
    import socket
    import subprocess
    import sys

    def cli(*args):
        p = subprocess.run([sys.executable, "-m", "apollo", *args], capture_output=True, text=True, timeout=300)
        return p.returncode, p.stderr.strip()

    rc, err = cli("mask", "explain", str(tmp_path / "missing.jsonl"))
    assert rc == 1 and "Traceback" not in err and len(err.splitlines()) == 1
    assert "no such trajectory file; pass one such as data/masked/train.jsonl" in err
    rc, err = cli("serve", "--new-token", "bogus:x", "--tokens", str(tmp_path / "t.json"))
    assert rc == 1 and "Traceback" not in err and len(err.splitlines()) == 1 and "bogus" in err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rc, err = cli("serve", "--port", str(port), "--db", str(tmp_path / "g.sqlite"), "--tokens", str(tmp_path / "t.json"))
    assert rc == 1 and err == f"apollo: port {port} on 127.0.0.1 is already in use (another apollo serve?); " \
                              "stop that server or pass --port N"
    rc, err = cli("stage", "nosuch")
    assert rc == 2 and "invalid choice: 'nosuch'" in err and "Traceback" not in err
