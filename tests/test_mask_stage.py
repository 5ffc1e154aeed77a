"""The mask stage: validation before writing, metrics and reports to MLflow, the mask CLI."""

from __future__ import annotations

import json

import pytest

from apollo.config import Paths
from apollo.schema import TrajectoryFileError, read_trajectories, write_trajectories
from apollo.stages import mask as mask_stage
from apollo.supervision.detectors import CATEGORIES
from apollo.quality import DataQualityError, check_masks

FIXTURE_TRAJS = "tests/fixtures/rule_cases_trajectories.jsonl"
PARAMS = {"mask": {"rules": "apollo/supervision/rules.yaml", "min_kept_fraction": 0.05, "max_kept_fraction": 1.0,
                   # the teacher set: it has positives for every category the asserts below read
                   "labeled": "tests/fixtures/blind_teacher/labels.jsonl"}}


class Tracker:
    """Records what a stage logs (the same calls as apollo.tracking.Run)."""

    def __init__(self):
        self.metrics: dict[str, float] = {}
        self.artifacts: list[tuple[str, str | None]] = []

    def log_metrics(self, metrics, step=None):
        self.metrics.update(metrics)

    def log_artifact(self, path, artifact_path=None):
        self.artifacts.append((str(path), artifact_path))


def rollouts():
    # the trajectory suite rejects empty assistant turns, so the labeled episode holding one stays out
    return [t for t in read_trajectories(FIXTURE_TRAJS) if all(s.assistant_text.strip() for s in t.steps)]


@pytest.fixture()
def done(tmp_path):
    """A project after one successful mask run, with a dataset built from it."""
    paths = Paths(tmp_path)
    write_trajectories(paths.rollouts / "train.jsonl", rollouts())
    tracker = Tracker()
    metrics = mask_stage.run(PARAMS, tracker, paths)
    (paths.dataset).mkdir(parents=True)
    (paths.dataset / "train.parquet").write_bytes(b"PAR1 previous dataset")
    return paths, metrics, tracker


def snapshot(paths: Paths) -> dict[str, bytes]:
    return {str(p.relative_to(paths.root)): p.read_bytes()
            for d in (paths.masked, paths.dataset) for p in sorted(d.rglob("*")) if p.is_file()}


def test_stage_masks_every_step_and_logs_drop_rates(done):
    paths, metrics, tracker = done
    masked = read_trajectories(paths.masked / "train.jsonl")
    steps = [s for t in masked for s in t.steps]
    assert steps and all(s.mask is not None for s in steps)
    assert all(s.mask.reason and s.mask.category for s in steps if not s.mask.keep)
    for c in CATEGORIES:
        assert f"mask.drop_rate.{c}" in tracker.metrics and f"mask.findings.{c}" in tracker.metrics
    for src in ("symbolic", "rule", "llm"):
        assert f"mask.drop_rate.source.{src}" in tracker.metrics
    assert tracker.metrics["mask.drop_rate.source.rule"] > 0 and tracker.metrics["mask.drop_rate.source.symbolic"] > 0
    assert tracker.metrics["mask.drop_rate.by.rule.blind_edit"] > 0
    assert metrics["mask.steps"] == len(steps) and 0 < metrics["mask.kept_fraction"] < 1
    # the labeled-set report: table + JSON written and logged, precision/recall as metrics
    table = (paths.masked / "labeled_report.txt").read_text()
    assert "blind_edit" in table and "precision" not in table or "prec" in table
    assert tracker.metrics["mask.labeled.category.improper_eval.recall"] >= 0.9
    m = tracker.metrics  # the blind set: whole set and each split, with 95% intervals
    assert m["mask.labeled.test.decision.recall_lo95"] <= m["mask.labeled.test.decision.recall"] <= 1.0
    assert "test split: labeled actions" in table and "dev split" in table
    logged = {p.rsplit("/", 1)[-1] for p, _ in tracker.artifacts}
    assert {"labeled_report.txt", "labeled_report.json", "masks.json", "stats.json"} <= logged
    stats = json.loads((paths.masked / "stats.json").read_text())
    assert stats["mask.dropped"] == sum(not s.mask.keep for s in steps)


def test_broken_trajectory_file_stops_at_validation_and_leaves_outputs(done):
    paths, _, _ = done
    before = snapshot(paths)
    broken = rollouts()[:3]
    broken[1] = broken[1].model_copy(update={"trajectory_id": broken[0].trajectory_id})  # duplicate id
    write_trajectories(paths.rollouts / "train.jsonl", broken)
    with pytest.raises(DataQualityError) as e:
        mask_stage.run(PARAMS, Tracker(), paths)
    msg = str(e.value)
    assert msg.startswith("suite 'trajectories' failed") and "expect_column_values_to_be_unique" in msg
    assert "trajectory_id" in msg and len(msg.splitlines()) <= 4  # short and readable
    assert snapshot(paths) == before
    report = json.loads((paths.quality / "trajectories_in.json").read_text())
    assert not report["success"]


def test_unreadable_trajectory_file_names_line_and_field(done):
    paths, _, _ = done
    before = snapshot(paths)
    good = (paths.rollouts / "train.jsonl").read_text().splitlines()
    bad = json.loads(good[1])
    bad["steps"][0]["observation"]["exit_code"] = "zero"
    (paths.rollouts / "train.jsonl").write_text(good[0] + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(TrajectoryFileError, match=r"train.jsonl:2: field 'steps\[0\].observation.exit_code'"):
        mask_stage.run(PARAMS, Tracker(), paths)
    assert snapshot(paths) == before


def test_failing_mask_suite_names_the_expectation_and_writes_nothing(done):
    paths, _, _ = done
    before = snapshot(paths)
    with pytest.raises(DataQualityError, match=r"(?s)suite 'masks' failed.*expect_column_mean_to_be_between"):
        mask_stage.run({"mask": {**PARAMS["mask"], "min_kept_fraction": 0.99}}, Tracker(), paths)
    assert snapshot(paths) == before


def test_masks_suite_checks_categories_and_flagged_fraction():
    trajs = [t.model_copy(deep=True) for t in rollouts()[:2]]
    from apollo.supervision.masker import Masker, MaskConfig

    masked, _ = Masker(MaskConfig()).mask(trajs)
    assert check_masks(masked, known_categories=Masker(MaskConfig()).categories).success
    drop = next(s for t in masked for s in t.steps if not s.mask.keep)
    drop.mask = drop.mask.model_copy(update={"category": "made_up"})
    with pytest.raises(DataQualityError, match="drop_category"):
        check_masks(masked, known_categories=["blind_edit"])
    keep = next(s for t in masked for s in t.steps if s.mask.keep)
    keep.mask = keep.mask.model_copy(update={"flagged": True})
    with pytest.raises(DataQualityError, match="flagged"):
        check_masks(masked, max_flagged=0.0)


def test_stage_with_judge_over_http(tmp_path):
    from tests.test_judge import FakeJudgeServer, verdict

    paths = Paths(tmp_path)
    trajs = rollouts()
    write_trajectories(paths.rollouts / "train.jsonl", trajs)
    V = "violate_instruction"
    with FakeJudgeServer({}, default=verdict(V, False, "contradicts the human's guidance")) as srv:
        params = {"mask": {**PARAMS["mask"], "labeled": None, "max_flagged_fraction": 0.0,
                           "judge": {"backend": "openai", "model": "judge", "base_url": srv.base_url, "max_retries": 0}}}
        tracker = Tracker()
        metrics = mask_stage.run(params, tracker, paths)
        again = mask_stage.run(params, Tracker(), paths)
    assert metrics["mask.judge.calls"] > 0 and again["mask.judge.calls"] == 0 and again["mask.judge.cache_hits"] > 0
    assert (paths.root / "data" / "store" / "judge_cache.sqlite").exists()
    assert tracker.metrics["mask.drop_rate.source.llm"] > 0 and tracker.metrics["mask.drop_rate.violate_instruction"] > 0
    masked = read_trajectories(paths.masked / "train.jsonl")
    llm = [s for t in masked for s in t.steps if s.mask.source == "llm" and not s.mask.keep]
    assert llm and all(s.mask.category == V for s in llm)
    assert not (paths.masked / "labeled_report.txt").exists()  # labeled: null switches the report off


def test_stage_metrics_reach_the_mlflow_run(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from apollo.tracking import stage_run

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv("APOLLO_PARENT_RUN_ID", raising=False)
    paths = Paths(tmp_path)
    write_trajectories(paths.rollouts / "train.jsonl", rollouts()[:4])
    with stage_run("mask", PARAMS) as run:
        mask_stage.run(PARAMS, run, paths)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    got = client.get_run(run.run_id).data.metrics
    assert "mask.drop_rate.blind_edit" in got and "mask.drop_rate.source.symbolic" in got
    assert "mask.labeled.category.resource_waste.precision" in got and "quality.masks.success" in got
    arts = {a.path for a in client.list_artifacts(run.run_id, "mask")}
    assert "mask/labeled_report.txt" in arts


def test_cli_report_and_explain(capsys):
    from apollo.cli import main

    assert main(["mask", "report", "--fixtures", "tests/fixtures/rule_cases.jsonl"]) == 0
    out = capsys.readouterr().out
    assert "ignore_script" in out and "nonzero_exit_error" in out and "judge: off" in out
    import json

    from apollo.supervision.labeled import wilson

    drops = sum(not json.loads(x)["keep"] for x in open("tests/fixtures/rule_cases.jsonl"))
    lo, hi = wilson(drops, drops)  # every drop found (the cases state the rules): k = n
    assert f"combined {drops:>13} {drops:>4}    0    0    1.00 [{lo:.2f}-{hi:.2f}]" in out
    tid = "labeled-ld-blind-edit-early-eval"
    assert main(["mask", "explain", FIXTURE_TRAJS, tid, "--apply"]) == 0
    out = capsys.readouterr().out
    assert "DROP  edit_file" in out and "rule/blind_edit" in out and "<real_user> Open config.json" in out
    assert "rule/improper_eval: evaluated while the job in session 'train'" in out
    assert main(["mask", "explain", FIXTURE_TRAJS, "no-such-id"]) == 1
    assert main(["mask", "report", "--fixtures", "nope.jsonl"]) == 1
