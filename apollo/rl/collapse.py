"""The collapse criterion of the staleness runs (``make stability-staleness``), written down before
the runs and applied the same way to every mode, level and seed.

Let ``R_1 … R_n`` be the mean reward of the batch of each policy update (update 1 = the first,
critic warm-up updates included), ``m_t = mean(R_{t−49} … R_t)`` the trailing 50-update mean
(defined for ``t ≥ 50``) and ``b = m_50`` the mean of the first 50 updates. **The criterion fires
at update ``t``** when either

1. ``t ≥ 100`` and ``m_s < b − 0.05`` for every ``s`` in ``t … t+99``: the 50-update mean has
   fallen more than 0.05 (absolute reward, rewards lie in [0, 1]) below the first 50 updates' mean
   and stays there for 100 updates (the update ``t`` is where it fell; the criterion is confirmed
   at ``t + 99``); or
2. any of the update's reward, policy loss, value loss or grad norm is not finite (the update ``t``).

The earliest of the two is reported. Why the margin: a run that neither learns nor degrades has
``m_t`` wandering around ``b`` (the trailing means are strongly autocorrelated), and "below ``b``
for 100 updates" would fire on noise; 0.05 is about 3 standard errors of a 50-update mean of a
batch-4 countdown run (the 2026-12-01 stability run: ±0.029 at 1.96 SE). Why 100 updates: a dip
that recovers is not a collapse. A run that ends below ``b − 0.05`` for fewer than 100 updates
is reported ``pending`` (neither fired nor cleared).

Beside the criterion, :func:`curve_summary` reports what the table shows: the first / last 50
updates' mean reward, the lowest 50-update mean from update 100 on (``min_{t ≥ 100} m_t``) and
the peak-to-last drop (``max_t m_t − m_n``, "degrades" without collapsing).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

WINDOW = 50
START = 100
HOLD = 100
MARGIN = 0.05
FINITE_KEYS = ("reward", "policy_loss", "value_loss", "grad_norm")


def trailing_means(xs: Sequence[float], window: int = WINDOW) -> list[float]:
    """``m_t`` for ``t = window … n`` (index ``t − window``): means of the last ``window`` values."""
    out: list[float] = []
    s = 0.0
    for i, x in enumerate(xs):
        s += x
        if i >= window:
            s -= xs[i - window]
        if i >= window - 1:
            out.append(s / window)
    return out


def collapse(rewards: Sequence[float], *, nonfinite_at: int | None = None, window: int = WINDOW,
             start: int = START, hold: int = HOLD, margin: float = MARGIN) -> dict[str, Any]:
    """The criterion on a reward curve (``rewards[i]`` = update ``i + 1``). ``nonfinite_at``: the
    first update with a non-finite loss (:func:`first_nonfinite`), or None.

    Returns ``fired`` (bool), ``at`` (the update, 1-based, or None), ``reason`` (``reward`` |
    ``non_finite`` | None), ``pending`` (ends below the line for fewer than ``hold`` updates),
    ``baseline`` (``b``), ``line`` (``b − margin``)."""
    n = len(rewards)
    res: dict[str, Any] = {"fired": False, "at": None, "reason": None, "pending": False,
                           "baseline": math.nan, "line": math.nan}
    finite = [r for r in rewards[:nonfinite_at - 1 if nonfinite_at else n]]
    if len(finite) >= window:
        m = trailing_means(finite, window)  # m[t - window] = m_t
        b = m[0]
        line = b - margin
        res.update(baseline=b, line=line)
        below = 0  # length of the current run of m_t < line, counted from t ≥ start
        for t in range(max(start, window), len(finite) + 1):
            if m[t - window] < line:
                below += 1
                if below == hold:
                    res.update(fired=True, at=t - hold + 1, reason="reward")
                    break
            else:
                below = 0
        else:
            res["pending"] = below > 0
    if nonfinite_at is not None and (res["at"] is None or nonfinite_at < res["at"]):
        res.update(fired=True, at=int(nonfinite_at), reason="non_finite", pending=False)
    return res


def first_nonfinite(history: Sequence[Mapping[str, Any]], keys: Sequence[str] = FINITE_KEYS) -> int | None:
    """The first update (1-based, by position) where one of ``keys`` present in the row is not finite."""
    for i, row in enumerate(history):
        for k in keys:
            v = row.get(k)
            if isinstance(v, (int, float)) and not math.isfinite(v):
                return i + 1
    return None


def curve_summary(history: Sequence[Mapping[str, Any]], window: int = WINDOW, start: int = START) -> dict[str, Any]:
    """The table's numbers for one run's history (rows in update order, each with ``reward``)."""
    rewards = [float(r["reward"]) for r in history]
    nf = first_nonfinite(history)
    finite = rewards[:nf - 1] if nf else rewards
    m = trailing_means(finite, window) if len(finite) >= window else []
    after = m[start - window:] if len(m) > start - window else []
    return {
        "updates": len(rewards),
        "reward_first": sum(finite[:window]) / max(1, len(finite[:window])) if finite else math.nan,
        "reward_last": sum(finite[-window:]) / max(1, len(finite[-window:])) if finite else math.nan,
        "lowest_after_start": min(after) if after else math.nan,
        "peak": max(m) if m else math.nan,
        "drop_peak_to_last": (max(m) - m[-1]) if m else math.nan,
        "collapse": collapse(rewards, nonfinite_at=nf, window=window, start=start),
    }
