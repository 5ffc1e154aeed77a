"""The experiment instrument's pure functions: intervals, TTS extraction, the results schema."""

from __future__ import annotations

import json
from math import comb

import numpy as np
import pytest

from apollo.experiment.plots import tts_html, tts_png
from apollo.experiment.results import (
    RESULT_KEYS,
    ExperimentDataError,
    experiment_results,
    markdown,
    results_json,
    tts_records,
)
from apollo.experiment.stats import bootstrap_ci, bootstrap_means, paired_difference
from apollo.experiment.tts import best_at, eval_points, final_at, trajectory_curve
from apollo.schema import Action, EvalRecord, Observation, Step, Trajectory


def traj(task="t1", domain="loss_design", seed=0, evals=(), n_steps=6, step_s=10.0, tid=None) -> Trajectory:
    """``n_steps`` steps of ``step_s`` seconds from t=1000; ``evals`` = [(step index, score, forced)]."""
    steps = [Step(index=i, assistant_text="", action=Action(tool="think"), observation=Observation(),
                  started_at=1000.0 + i * step_s, wall_time_s=step_s) for i in range(n_steps)]
    t = Trajectory(trajectory_id=tid or f"{task}-{seed}-{len(evals)}", task_id=task, split="test",
                   domain=domain, policy_id="p", seed=seed, started_at=1000.0, steps=steps,
                   evals=[EvalRecord(step=s, score=sc, forced=f) for s, sc, f in evals])
    t.record_scores()
    return t


# ---- intervals ---------------------------------------------------------------------------------

def test_interval_matches_the_hand_computed_binomial_case():
    """One seed, tasks [0, 0, 0, 100]: a resample's mean is 25*K, K ~ Binomial(4, 1/4).
    P(K<=2) = 0.949 < 0.975 <= P(K<=3) = 0.996, and P(K=0) = 0.316 > 0.025: the 95% interval is [0, 75]."""
    cdf = np.cumsum([comb(4, k) * 0.25 ** k * 0.75 ** (4 - k) for k in range(5)])
    assert cdf[2] < 0.975 <= cdf[3] and cdf[0] > 0.025  # the hand computation itself
    e = bootstrap_ci([0, 0, 0, 100], resamples=20000, rng_seed=1)
    assert e.mean == 25.0
    assert e.ci == [0.0, 75.0]


def test_interval_resamples_seeds_too():
    """Two seeds x one task, scores 0 and 100: with tasks fixed, only seed resampling spreads the
    mean: {0, 50, 100} with probabilities 1/4, 1/2, 1/4, so the interval is [0, 100]; a constant
    matrix has a zero-width interval."""
    e = bootstrap_ci([[0.0], [100.0]], resamples=20000, rng_seed=2)
    assert (e.mean, e.ci) == (50.0, [0.0, 100.0])
    boots = bootstrap_means([[0.0], [100.0]], resamples=20000, rng_seed=2)
    assert set(np.unique(boots)) == {0.0, 50.0, 100.0}
    assert abs((boots == 50.0).mean() - 0.5) < 0.02
    assert bootstrap_ci(np.full((3, 5), 42.0)).ci == [42.0, 42.0]


def test_interval_is_seeded_and_close_to_normal_for_many_tasks():
    rng = np.random.default_rng(0)
    x = rng.normal(50, 10, size=400)
    a, b = bootstrap_ci(x, rng_seed=7), bootstrap_ci(x, rng_seed=7)
    assert a == b
    half = 1.96 * x.std() / np.sqrt(len(x))
    assert abs((a.high - a.low) / 2 - half) < 0.15 * half


def test_paired_difference_cancels_shared_task_difficulty():
    """Tasks of very different difficulty, variant = baseline + 5 on every cell: the paired interval
    is exactly [5, 5], while the unpaired intervals of each are wide."""
    base = np.array([[0.0, 30.0, 80.0, 100.0], [10.0, 20.0, 90.0, 95.0]])
    d = paired_difference(base + 5.0, base)
    assert (d.mean, d.ci) == (5.0, [5.0, 5.0])
    assert bootstrap_ci(base).high - bootstrap_ci(base).low > 30
    with pytest.raises(ValueError, match="shape"):
        paired_difference(base, base[:, :3])


def test_bad_scores_are_refused():
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_ci([])


# ---- test-time scaling ---------------------------------------------------------------------------

def test_tts_extraction_from_hand_made_eval_records():
    """Evals at step indexes 1 (score 30), 3 (10), forced final at 5 (50); steps of 10 s."""
    t = traj(evals=[(1, 30.0, False), (3, 10.0, False), (5, 50.0, True)])
    pts = eval_points(t)
    assert [(p.steps, p.wall_s, p.score) for p in pts] == [(2, 20.0, 30.0), (4, 40.0, 10.0), (6, 60.0, 50.0)]
    budgets = [1, 2, 3, 4, 6, 10]
    c = trajectory_curve(t, budgets, "steps")
    assert c["best"] == [0.0, 30.0, 30.0, 30.0, 50.0, 50.0]   # best-so-far never decreases
    assert c["final"] == [0.0, 30.0, 30.0, 10.0, 50.0, 50.0]  # final-at-budget can drop (a regression)
    assert trajectory_curve(t, [15, 20, 39.9, 40, 1e9], "wall_s") == {
        "best": [0.0, 30.0, 30.0, 30.0, 50.0], "final": [0.0, 30.0, 30.0, 10.0, 50.0]}
    assert best_at(pts, 1e9) == t.best_score and final_at(pts, 1e9) == t.final_score
    with pytest.raises(ValueError, match="axis"):
        best_at(pts, 3, "tokens")


def test_tts_uses_each_steps_own_wall_time():
    t = traj(evals=[(2, 40.0, True)], n_steps=3)
    t.steps[1].wall_time_s = 100.0  # a slow step (e.g. a long training command)
    t.steps[2].started_at = 1000.0 + 10.0 + 100.0
    assert eval_points(t)[0].wall_s == pytest.approx(120.0)
    bad = traj(evals=[(9, 40.0, True)], n_steps=3)
    with pytest.raises(ValueError, match=r"evals\[0\].step = 9"):
        eval_points(bad)


# ---- results -----------------------------------------------------------------------------------

def _cells():
    """untrained and full, seeds 0/1, two tasks in two domains, k=2 samples; full = untrained + 10."""
    cells = {}
    for v, plus in (("untrained", 0.0), ("full", 10.0)):
        for s in (0, 1):
            cells[(v, s)] = [
                traj("a", "loss_design", s, [(1, 20.0 + plus + s, False), (3, 10.0 + plus + s, True)], tid=f"{v}a{s}0"),
                traj("a", "loss_design", s, [(3, 30.0 + plus + s, True)], tid=f"{v}a{s}1"),
                traj("b", "data_filtering", s, [(5, 60.0 + plus, True)], tid=f"{v}b{s}0"),
                traj("b", "data_filtering", s, [(5, 70.0 + plus, True)], tid=f"{v}b{s}1"),
            ]
    return cells


def test_results_schema_and_values(tmp_path):
    res = experiment_results(_cells(), budgets={"steps": [2, 4, 6], "wall_s": [30, 60]}, resamples=2000)
    js = results_json(res)
    assert list(js) == ["untrained", "full"]
    for v, row in js.items():
        assert set(RESULT_KEYS) <= set(row)
        assert row["seeds"] == [0, 1] and row["samples_per_task"] == 2 and row["tasks"] == 2
        assert row["final_ci"][0] <= row["final_mean"] <= row["final_ci"][1]
        assert len(row["best_ci"]) == 2
    # untrained final: task a = mean(10+s, 30+s) = 20+s, task b = 65 -> seeds 0/1: 42.5, 43.0
    assert js["untrained"]["final_mean"] == pytest.approx(42.75)
    # best: task a = mean(20+s, 30+s) = 25+s
    assert js["untrained"]["best_mean"] == pytest.approx(45.25)
    assert js["full"]["diff_vs_untrained"]["mean"] == pytest.approx(10.0)
    assert js["full"]["diff_vs_untrained"]["ci"] == pytest.approx([10.0, 10.0])
    assert js["untrained"]["diff_vs_untrained"]["mean"] == 0.0
    assert js["full"]["domains"]["data_filtering"]["final_mean"] == pytest.approx(75.0)
    json.dumps(js)  # plain JSON types
    steps = res["tts"]["steps"]
    assert steps["budgets"] == [2.0, 4.0, 6.0]
    # untrained, budget 2 steps: sample 1 of task a has 20+s, others nothing yet -> a = (20+s)/2, b = 0
    assert steps["variants"]["untrained"]["best"]["mean"][0] == pytest.approx((10.0 + 10.5) / 2 / 2)
    assert steps["variants"]["untrained"]["final"]["mean"][-1] == pytest.approx(42.75)
    rows = tts_records(res)
    assert len(rows) == 2 * (3 + 2) and {"axis", "variant", "budget", "best", "best_low", "final_high"} <= set(rows[0])
    md = markdown(res)
    assert "| full | 0,1 | 2 |" in md and "10.00 [10.00, 10.00]" in md and "LD (1)" in md
    tts_png(res["tts"], tmp_path / "tts.png")
    tts_html(res["tts"], tmp_path / "tts.html")
    assert (tmp_path / "tts.png").read_bytes()[:4] == b"\x89PNG"
    html = (tmp_path / "tts.html").read_text()
    assert "<script" in html and "http" not in html.replace("http://www.w3.org/2000/svg", "")  # no CDN
    assert json.loads(html.split('type="application/json">')[1].split("</script>")[0]) == res["tts"]


def test_results_refuse_cells_with_other_tasks():
    cells = _cells()
    cells[("full", 1)] = cells[("full", 1)][:2]  # task b missing
    with pytest.raises(ExperimentDataError, match=r"variant=full seed=1 .*missing \['b'\]"):
        experiment_results(cells)
    with pytest.raises(ExperimentDataError, match="no trajectories"):
        experiment_results({("full", 0): []})


def test_difference_pairs_only_shared_seeds():
    cells = _cells()
    del cells[("untrained", 1)]
    js = results_json(experiment_results(cells, resamples=500))
    assert js["full"]["diff_vs_untrained"]["seeds"] == [0]
    no_base = results_json(experiment_results({k: v for k, v in cells.items() if k[0] == "full"}, resamples=500))
    assert no_base["full"]["diff_vs_untrained"] is None
