"""The ideal speed-up bench_async.py prints beside its measured ratio (hand-computed cases)."""

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "bench_async", Path(__file__).resolve().parents[1] / "benchmarks" / "bench_async.py")
bench_async = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_async)


def test_equal_durations_give_no_speedup():
    # every episode takes the same time: a synchronous batch wastes nothing
    assert bench_async.ideal_ratio([3.0] * 10, workers=4, batch=4) == pytest.approx(1.0)


def test_two_point_distribution_matches_the_hand_computed_makespan():
    # durations 1 or 9 s, a batch of 2 on 2 workers: makespan 1 with prob 1/4, else 9 -> E = 7;
    # async: 2 workers / mean 5 s = 0.4/s; sync: 2 / 7 = 0.2857/s; ratio 1.4
    assert bench_async.ideal_ratio([1.0, 9.0], workers=2, batch=2, draws=20000) == pytest.approx(1.4, abs=0.03)


def test_fewer_workers_than_batch_are_list_scheduled():
    # batch 4 on 2 workers, all 2 s: makespan 4 s; sync 4/4 = 1/s, async 2/2 = 1/s
    assert bench_async.ideal_ratio([2.0], workers=2, batch=4) == pytest.approx(1.0)
    # a heavier tail helps asynchrony more
    light = bench_async.ideal_ratio([1.0, 2.0], workers=8, batch=8, draws=3000)
    heavy = bench_async.ideal_ratio([1.0, 20.0], workers=8, batch=8, draws=3000)
    assert heavy > light > 1.0


def test_no_durations_is_nan():
    assert bench_async.ideal_ratio([], workers=2, batch=2) != bench_async.ideal_ratio([], workers=2, batch=2)
