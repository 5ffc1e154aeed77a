"""Bootstrap intervals over a (seed x task) score matrix: pure numpy, seeded.

Why two-way: a variant's score varies with the seed (rollout sampling, annotator timing, training
order, evaluation sampling) *and* with the task drawn into the test suite. The interval resamples
both axes with replacement, independently (a two-way / "cluster" bootstrap): each resample picks
``n_seeds`` seeds and ``n_tasks`` tasks and takes the mean of every (picked seed, picked task) cell.
The interval is the percentile interval of the resampled means. A paired difference is the same
computation on the cellwise difference of two matrices aligned on (seed, task), so shared task
difficulty and shared seeds cancel before resampling.

A resample's mean is ``c_s^T M c_t / (n_s n_t)`` with multinomial counts ``c_s``, ``c_t``, which
avoids materialising the resampled matrices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_RESAMPLES = 4000
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class Estimate:
    mean: float
    low: float
    high: float

    @property
    def ci(self) -> list[float]:
        return [self.low, self.high]

    def as_dict(self) -> dict[str, float | list[float]]:
        return {"mean": self.mean, "ci": self.ci}


def as_matrix(scores) -> np.ndarray:
    """A (seeds x tasks) float matrix; a 1-D input is one seed."""
    m = np.asarray(scores, dtype=float)
    if m.ndim == 1:
        m = m[None, :]
    if m.ndim != 2 or m.size == 0:
        raise ValueError(f"scores must be a non-empty (seeds x tasks) matrix, got shape {m.shape}")
    if not np.all(np.isfinite(m)):
        raise ValueError("scores contain NaN or infinite values")
    return m


def bootstrap_means(scores, resamples: int = DEFAULT_RESAMPLES, rng_seed: int = 0) -> np.ndarray:
    """``resamples`` means of the matrix, each over seeds and tasks resampled with replacement."""
    m = as_matrix(scores)
    n_s, n_t = m.shape
    rng = np.random.default_rng(rng_seed)
    cs = rng.multinomial(n_s, np.full(n_s, 1.0 / n_s), size=resamples).astype(float)
    ct = rng.multinomial(n_t, np.full(n_t, 1.0 / n_t), size=resamples).astype(float)
    return np.einsum("bs,st,bt->b", cs, m, ct) / (n_s * n_t)


def bootstrap_ci(scores, confidence: float = DEFAULT_CONFIDENCE, resamples: int = DEFAULT_RESAMPLES,
                 rng_seed: int = 0) -> Estimate:
    """Mean of the matrix and its two-way percentile bootstrap interval."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    m = as_matrix(scores)
    boots = bootstrap_means(m, resamples, rng_seed)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(boots, [alpha, 1.0 - alpha], method="inverted_cdf")
    return Estimate(float(m.mean()), float(low), float(high))


def paired_difference(a, b, confidence: float = DEFAULT_CONFIDENCE, resamples: int = DEFAULT_RESAMPLES,
                      rng_seed: int = 0) -> Estimate:
    """Mean of ``a - b`` over aligned (seed, task) cells, with its two-way bootstrap interval."""
    ma, mb = as_matrix(a), as_matrix(b)
    if ma.shape != mb.shape:
        raise ValueError(f"paired matrices differ in shape: {ma.shape} vs {mb.shape}")
    return bootstrap_ci(ma - mb, confidence, resamples, rng_seed)
