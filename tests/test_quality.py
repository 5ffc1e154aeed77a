"""Great Expectations suites stop a stage before it writes anything."""

import pytest

from apollo.config import Paths
from apollo.schema import Action, Observation, write_trajectories
from apollo.supervision.quality import DataQualityError, check_dataset, check_masks, check_trajectories
from tests.test_schema import make_traj


def test_trajectory_suite_names_failing_expectation():
    good = [make_traj("a"), make_traj("b")]
    assert check_trajectories(good).success
    bad = [make_traj("a"), make_traj("a")]  # duplicate id
    bad[1].steps[0].action = Action()  # an action that is neither parsed nor recorded as invalid
    with pytest.raises(DataQualityError) as e:
        check_trajectories(bad)
    msg = str(e.value)
    assert "expect_column_values_to_be_unique" in msg and "trajectory_id" in msg
    assert "action_recorded" in msg
    bad = [make_traj("c")]
    bad[0].steps[1].guidance[0].delivered_step = 7  # guidance pointing at another step
    with pytest.raises(DataQualityError, match="points_at_step"):
        check_trajectories(bad)


def test_mask_suite_bounds_and_reasons():
    trajs = [make_traj("a")]  # 2 of 3 kept
    assert check_masks(trajs, min_kept=0.5).success
    with pytest.raises(DataQualityError, match="expect_column_mean_to_be_between"):
        check_masks(trajs, min_kept=0.9)
    trajs[0].steps[0].mask = None
    with pytest.raises(DataQualityError, match="has_mask"):
        check_masks(trajs)


def test_dataset_suite_counts_and_lengths():
    rows = [{"kind": "react", "n_tokens": 10, "n_trained": 3, "input_ids": [0] * 10, "labels": [0] * 10}] * 7
    ok = dict(max_length=16, upsample={"react": 7, "summary": 10}, base_counts={"react": 1, "summary": 0})
    assert check_dataset(rows, **ok).success
    with pytest.raises(DataQualityError, match="expect_table_row_count_to_equal"):
        check_dataset(rows[:6], **ok)
    with pytest.raises(DataQualityError, match="n_tokens"):
        check_dataset(rows, **{**ok, "max_length": 8})


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
