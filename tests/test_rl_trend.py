"""The reward trend with task fixed effects (apollo.rl.trend): hand-computed cases."""

import math

import pytest

from apollo.rl.appo_loop import _summary
from apollo.rl.trend import fixed_effects_slope, reward_trend, task_points


def test_task_mix_does_not_fake_a_trend():
    # an easy task (0.9) drawn early, a hard one (0.1) late, neither changes: the plain slope of the
    # per-iteration mean is negative, the within-task slope is 0
    pts = [(1, "easy", 0.9), (2, "easy", 0.9), (3, "hard", 0.1), (4, "hard", 0.1), (2, "hard", 0.1), (3, "easy", 0.9)]
    assert fixed_effects_slope(pts) == pytest.approx(0.0)


def test_within_task_slope_hand_computed():
    # task a: (1, 0), (3, 0.4) -> x̄ 2, ȳ 0.2: sxy = (-1)(-0.2) + (1)(0.2) = 0.4, sxx = 2
    # task b: (2, 1.0), (4, 1.2), (6, 1.4) -> x̄ 4, ȳ 1.2: sxy = 0.4 + 0 + 0.4 = 0.8, sxx = 8
    # b = (0.4 + 0.8) / (2 + 8) = 0.12
    pts = [(1, "a", 0.0), (3, "a", 0.4), (2, "b", 1.0), (4, "b", 1.2), (6, "b", 1.4)]
    assert fixed_effects_slope(pts) == pytest.approx(0.12)


def test_interval_excludes_zero_for_a_clear_rise_and_covers_it_for_noise():
    rise = [(i, t, 0.02 * i + (0.5 if t == "x" else 0.0) + 0.01 * ((i * 7) % 3 - 1)) for i in range(1, 21)
            for t in ("x", "y")]
    tr = reward_trend(rise, n_boot=500)
    assert tr["low"] > 0 and tr["low"] <= tr["slope"] <= tr["high"]
    assert tr["slope"] == pytest.approx(0.02, abs=0.002)
    noise = [(i, "x", [0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0][i % 8]) for i in range(1, 25)]
    tn = reward_trend(noise, n_boot=500)
    assert tn["low"] < 0 < tn["high"]


def test_not_estimable_is_nan():
    assert math.isnan(fixed_effects_slope([(1, "a", 0.5), (2, "b", 0.7)]))  # no task seen twice
    tr = reward_trend([(1, "a", 0.5), (2, "a", 0.7)])  # two iterations: no interval
    assert tr["slope"] == pytest.approx(0.2) and math.isnan(tr["low"])


def test_appo_summary_reports_the_trend():
    hist = [{"iteration": i, "reward.mean": 0.5, "seconds": 1.0, "reward.task.a": 0.1 * i,
             "reward.task.b": 0.5 + 0.1 * i} for i in range(1, 7)]
    assert task_points(hist[:1]) == [(1.0, "a", 0.1), (1.0, "b", 0.6)]
    s = _summary(hist)
    assert s["appo.reward_slope"] == pytest.approx(0.0)  # the per-iteration mean is flat by construction here
    assert s["appo.reward_trend"] == pytest.approx(0.1)
    assert s["appo.reward_trend_low"] == pytest.approx(0.1) and s["appo.reward_trend_high"] == pytest.approx(0.1)


def test_appo_total_seconds_counts_iterations_resumed_from_a_checkpoint():
    # a checkpoint's history is saved before its iteration's "seconds" exist: a run made of Prefect
    # segments had only its last iteration's seconds (41.7 s reported for a 20-iteration, ~400 s cell)
    hist = [{"iteration": 1, "reward.mean": 0.5, "rollout_s": 10.0, "update_s": 2.0},
            {"iteration": 2, "reward.mean": 0.5, "rollout_s": 9.0, "update_s": 1.0, "seconds": 11.5}]
    assert _summary(hist)["appo.total_seconds"] == pytest.approx(23.5)


def test_pooled_trend_over_seeds_keeps_seed_task_effects_and_resamples_seed_iterations():
    from apollo.rl.trend import pooled_points

    # two seeds on the same task at different levels, each rising 0.1 per iteration: pooled slope 0.1
    # (one "task" effect across seeds would mix the levels into the slope)
    hists = {"s0": [{"iteration": i, "reward.task.a": 0.1 * i} for i in range(1, 5)],
             "s1": [{"iteration": i, "reward.task.a": 5.0 + 0.1 * i} for i in range(1, 5)]}
    pts, clusters = pooled_points(hists)
    assert len(pts) == 8 and len(set(clusters)) == 8 and {p[1] for p in pts} == {"s0/a", "s1/a"}
    t = reward_trend(pts, clusters=clusters, n_boot=200)
    assert t["slope"] == pytest.approx(0.1) and t["iterations"] == 8
    assert t["low"] == pytest.approx(0.1) and t["high"] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="cluster keys"):
        reward_trend(pts, clusters=clusters[:3])


def test_trend_report_reads_appo_and_sao_histories(tmp_path, capsys):
    import json

    from apollo.rl.trend_report import main

    for s, base in ((0, 0.1), (1, 0.3), (2, 0.2)):
        d = tmp_path / "appo" / f"s{s}"
        d.mkdir(parents=True)
        h = [{"iteration": i, "reward.mean": base + 0.02 * i, "reward.task.x": base + 0.02 * i,
              "reward.task.y": base + 0.1 + 0.02 * i} for i in range(1, 10)]
        (d / "appo_history.json").write_text(json.dumps(h))
    d = tmp_path / "sao" / "s0"
    d.mkdir(parents=True)
    (d / "sao_history.json").write_text(json.dumps(
        [{"step": i, "reward": 0.5, "reward.task.x": 0.5} for i in range(1, 7)]))
    out = tmp_path / "t.json"
    assert main(["appo", "sao", "nothing", "--models", str(tmp_path), "--json", str(out),
                 "--plot", str(tmp_path / "t.png"), "--together"]) == 0
    text = capsys.readouterr()
    assert "no training history" in text.err and "nothing" in text.err
    rep = json.loads(out.read_text())
    assert rep["appo"]["pooled"]["slope"] == pytest.approx(0.02) and rep["appo"]["pooled"]["iterations"] == 27
    assert rep["sao"]["x"] == "step" and rep["sao"]["pooled"]["slope"] == pytest.approx(0.0)
    assert "(pooled over 3 seeds)" in text.out and (tmp_path / "t.png").stat().st_size > 0
    # together: 3 APPO runs (2 tasks x 9 iterations, Sxx = 60 per task) rising 0.02 and one flat SAO
    # run (1 task x 6 steps, Sxx = 17.5): slope = 0.02 * 360 / (360 + 17.5)
    tog = rep["_together"]["pooled"]
    assert tog["runs"] == 4 and tog["iterations"] == 33
    assert tog["slope"] == pytest.approx(0.02 * 360 / 377.5, rel=1e-9)
    assert main(["nothing", "--models", str(tmp_path)]) == 1
    # --against: the other variant's pooled slope minus this one's (the flat SAO run against APPO's 0.02)
    assert main(["appo", "sao", "--models", str(tmp_path), "--against", "appo", "--json", str(out)]) == 0
    diff = json.loads(out.read_text())["_against"]["differences"]["sao"]
    assert diff["slope"] == pytest.approx(-0.02) and "pooled slope difference" in capsys.readouterr().out
    assert main(["appo", "--models", str(tmp_path), "--against", "sao"]) == 1


def test_slope_difference_separates_a_rise_from_a_flat_run_and_not_two_alike():
    import random

    from apollo.rl.trend import pooled_points, slope_difference

    rng = random.Random(0)

    def runs(slope: float) -> dict[str, list[dict]]:
        return {f"s{s}": [{"iteration": i, "reward.task.a": 0.3 + slope * i + rng.gauss(0, 0.05),
                           "reward.task.b": 0.6 + slope * i + rng.gauss(0, 0.05)} for i in range(20)]
                for s in range(3)}

    rising, flat, flat2 = pooled_points(runs(0.02)), pooled_points(runs(0.0)), pooled_points(runs(0.0))
    d = slope_difference(rising, flat, n_boot=300)
    assert d["low"] > 0 and d["low"] <= d["slope"] <= d["high"] and d["slope"] == pytest.approx(0.02, abs=0.005)
    same = slope_difference(flat, flat2, n_boot=300)
    assert same["low"] < 0 < same["high"]
    with pytest.raises(ValueError, match="cluster keys"):
        slope_difference((rising[0], rising[1][:5]), flat)
