"""Does the train reward rise? A slope with a 95% interval, the task mix taken out.

An RL iteration draws a few train tasks, and the tasks differ far more in reward than one iteration
of training changes it: the plain least-squares slope of the per-iteration mean reward mostly
measures which tasks were drawn. :func:`reward_trend` fits ``reward = a_task + b · iteration``
(task fixed effects: each task is compared with itself over time) and gives ``b`` with a 95%
bootstrap interval that resamples whole iterations (the unit the training noise comes in).
A ``b`` whose interval lies above 0 is a rise; an interval across 0 is no evidence either way.

Pure Python, no I/O; ``points`` are ``(iteration, task, reward)``.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence

Point = tuple[float, str, float]


def fixed_effects_slope(points: Sequence[Point]) -> float:
    """Least-squares ``b`` of ``reward = a_task + b · iteration``: the within-task slope,
    ``Σ (x − x̄_task)(y − ȳ_task) / Σ (x − x̄_task)²``; NaN when no task is seen at two iterations."""
    by_task: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for x, task, y in points:
        by_task[task].append((float(x), float(y)))
    sxy = sxx = 0.0
    for pts in by_task.values():
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        sxy += sum((x - mx) * (y - my) for x, y in pts)
        sxx += sum((x - mx) ** 2 for x, _ in pts)
    return sxy / sxx if sxx > 0 else math.nan


def _by_cluster(points: Sequence[Point], clusters: Sequence[Hashable], who: str) -> dict[Hashable, list[Point]]:
    """The points grouped by their cluster key (the bootstrap's resampled unit)."""
    if len(clusters) != len(points):
        raise ValueError(f"{who}: {len(clusters)} cluster keys for {len(points)} points")
    by: dict[Hashable, list[Point]] = defaultdict(list)
    for k, p in zip(clusters, points):
        by[k].append(p)
    return by


def _interval(boots: list[float]) -> tuple[float, float]:
    """The 95% percentile interval of bootstrap draws (NaNs when there are none)."""
    if not boots:
        return math.nan, math.nan
    boots = sorted(boots)
    return boots[int(0.025 * (len(boots) - 1))], boots[int(math.ceil(0.975 * (len(boots) - 1)))]


def reward_trend(points: Iterable[Point], *, n_boot: int = 2000, seed: int = 0,
                 clusters: Sequence[Hashable] | None = None) -> dict[str, float]:
    """``slope`` (reward per iteration, task fixed effects), ``low``/``high`` (95% percentile
    bootstrap over iterations), ``n`` points, ``iterations`` (resampled units); NaNs when it cannot be
    estimated. ``clusters`` (one key per point; default its iteration) names the resampled unit:
    pooled over seeds it is ``(seed, iteration)`` (:func:`pooled_points`)."""
    pts = list(points)
    iters = _by_cluster(pts, [float(p[0]) for p in pts] if clusters is None else list(clusters), "reward_trend")
    slope = fixed_effects_slope(pts)
    keys = sorted(iters) if clusters is None else sorted(iters, key=repr)
    boots: list[float] = []
    if math.isfinite(slope) and len(keys) >= 3:
        rng = random.Random(seed)
        for _ in range(n_boot):
            # a resampled iteration keeps its x; duplicates are separate draws of the same iteration
            sample = [p for k in (rng.choice(keys) for _ in keys) for p in iters[k]]
            b = fixed_effects_slope(sample)
            if math.isfinite(b):
                boots.append(b)
    low, high = _interval(boots)
    return {"slope": slope, "low": low, "high": high, "n": float(len(pts)), "iterations": float(len(keys))}


def slope_difference(a: tuple[Sequence[Point], Sequence[Hashable]], b: tuple[Sequence[Point], Sequence[Hashable]],
                     *, n_boot: int = 2000, seed: int = 0) -> dict[str, float]:
    """Slope of ``a`` minus slope of ``b`` (each :func:`fixed_effects_slope`), with a 95% percentile
    bootstrap interval that resamples each side's clusters on its own (independent runs, e.g. two
    variants' seeds). ``a`` and ``b`` are ``(points, clusters)`` as :func:`pooled_points` returns.
    An interval that excludes 0 says the two rise at different rates."""
    def groups(pc: tuple[Sequence[Point], Sequence[Hashable]]) -> list[list[Point]]:
        by = _by_cluster(pc[0], pc[1], "slope_difference")
        return [by[k] for k in sorted(by, key=repr)]

    ga, gb = groups(a), groups(b)
    diff = fixed_effects_slope(list(a[0])) - fixed_effects_slope(list(b[0]))
    boots: list[float] = []
    if math.isfinite(diff) and len(ga) >= 3 and len(gb) >= 3:
        rng = random.Random(seed)
        for _ in range(n_boot):
            sa = [p for g in (rng.choice(ga) for _ in ga) for p in g]
            sb = [p for g in (rng.choice(gb) for _ in gb) for p in g]
            d = fixed_effects_slope(sa) - fixed_effects_slope(sb)
            if math.isfinite(d):
                boots.append(d)
    low, high = _interval(boots)
    return {"slope": diff, "low": low, "high": high}


def task_points(history: Sequence[dict], x: str = "iteration") -> list[Point]:
    """``(history[x], task, mean reward)`` from a training history whose entries carry
    ``reward.task.<task id>`` (APPO: per iteration, ``x="iteration"``; the SAO family: per update,
    ``x="step"``)."""
    out: list[Point] = []
    for h in history:
        for k, v in h.items():
            if k.startswith("reward.task."):
                out.append((float(h[x]), k[len("reward.task."):], float(v)))
    return out


def pooled_points(histories: Mapping[str, Sequence[dict]], x: str = "iteration") -> tuple[list[Point], list[tuple]]:
    """The points of several runs of one variant (``{seed: history}``) for one pooled trend: each
    (seed, task) is its own fixed effect, each (seed, iteration) a resampled unit. Returns
    ``(points, clusters)`` for :func:`reward_trend`."""
    points: list[Point] = []
    clusters: list[tuple] = []
    for run, history in histories.items():
        for it, task, y in task_points(history, x):
            points.append((it, f"{run}/{task}", y))
            clusters.append((run, it))
    return points, clusters


def trend_metrics(points: Iterable[Point], prefix: str) -> dict[str, float]:
    """``<prefix>.reward_trend`` and its ``_low`` / ``_high`` (:func:`reward_trend`) as summary
    metrics; a value that cannot be estimated is left out (not 0)."""
    trend = reward_trend(points)
    return {f"{prefix}.reward_trend{suffix}": trend[k]
            for k, suffix in (("slope", ""), ("low", "_low"), ("high", "_high")) if math.isfinite(trend[k])}
