"""Great Expectations checkpoints stop a stage before it writes anything; a failure names the
trajectory and step, and its Data Docs page exists in the file-backed context."""

import pytest

from apollo.config import Paths
from apollo.schema import Action, Observation, write_trajectories
from apollo.quality import DataQualityError, check_dataset, check_masks, check_trajectories
from tests.test_schema import make_traj


def test_trajectory_checkpoint_names_failing_rows_and_builds_docs(tmp_path):
    good = [make_traj("a"), make_traj("b")]
    assert check_trajectories(good, root=tmp_path).success
    bad = [make_traj("a"), make_traj("a")]  # duplicate id
    bad[1].steps[2].action = Action()  # an action that is neither parsed nor recorded as invalid
    with pytest.raises(DataQualityError) as e:
        check_trajectories(bad, root=tmp_path)
    msg = str(e.value)
    assert "expect_column_values_to_be_unique" in msg and "trajectory_id" in msg
    assert "action_recorded" in msg and "rows a step 2" in msg  # the failing row, by trajectory and step
    failing = [r for r in e.value.report.results if not r["success"] and r["frame"] == "steps"]
    assert failing[0]["rows"] == [{"trajectory_id": "a", "step": 2}]
    # the file-backed context: checkpoints, Data Docs, results kept per run
    gx_dir = tmp_path / "gx"
    assert (gx_dir / "great_expectations.yml").exists()
    assert (gx_dir / "checkpoints" / "trajectories.steps.json").exists()
    assert (gx_dir / "validation_definitions" / "trajectories.steps.json").exists()
    docs = gx_dir / "uncommitted" / "data_docs" / "local_site" / "index.html"
    assert docs.exists() and e.value.report.docs == str(docs)
    assert "trajectories.steps" in docs.read_text()
    runs = list((gx_dir / "uncommitted" / "validations" / "trajectories" / "steps").rglob("*.json"))
    assert len(runs) >= 2  # the passing and the failing run, both kept
    bad = [make_traj("c")]
    bad[0].steps[1].guidance[0].delivered_step = 7  # guidance pointing at another step
    with pytest.raises(DataQualityError, match="points_at_step.*rows c step 1"):
        check_trajectories(bad, root=tmp_path)


def test_mask_suite_bounds_and_reasons(tmp_path):
    trajs = [make_traj("a")]  # 2 of 3 kept
    assert check_masks(trajs, min_kept=0.5, root=tmp_path).success
    with pytest.raises(DataQualityError, match="expect_column_mean_to_be_between"):
        check_masks(trajs, min_kept=0.9, root=tmp_path)
    trajs[0].steps[0].mask = None
    with pytest.raises(DataQualityError, match="has_mask.*rows a step 0"):
        check_masks(trajs, root=tmp_path)


def test_dataset_suite_counts_and_lengths(tmp_path):
    rows = [{"kind": "react", "n_tokens": 10, "n_trained": 3, "input_ids": [0] * 10, "labels": [0] * 10}] * 7
    ok = dict(max_length=16, upsample={"react": 7, "summary": 10}, base_counts={"react": 1, "summary": 0})
    assert check_dataset(rows, **ok, root=tmp_path).success
    with pytest.raises(DataQualityError, match="expect_table_row_count_to_equal"):
        check_dataset(rows[:6], **ok, root=tmp_path)
    with pytest.raises(DataQualityError, match="n_tokens"):
        check_dataset(rows, **{**ok, "max_length": 8}, root=tmp_path)


def test_failing_suite_leaves_previous_outputs(tmp_path, monkeypatch):
    from apollo.stages import mask

    paths = Paths(tmp_path)
    write_trajectories(paths.rollouts / "train.jsonl", [make_traj("a")])
    params = {"mask": {"rules": None, "min_kept_fraction": 0.0}}
    mask.run(params, paths=paths)
    before = (paths.masked / "train.jsonl").read_bytes()
    broken = make_traj("b")
    for s in broken.steps:
        s.observation = Observation(text="SyntaxError: invalid syntax", exit_code=1, error=True)
    write_trajectories(paths.rollouts / "train.jsonl", [broken])
    with pytest.raises(DataQualityError, match="suite 'masks' failed"):
        mask.run({"mask": {"rules": None, "min_kept_fraction": 0.5}}, paths=paths)
    assert (paths.masked / "train.jsonl").read_bytes() == before
    assert (paths.quality / "masks.json").exists()
