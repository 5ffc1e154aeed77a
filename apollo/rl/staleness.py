"""A staleness control for the asynchronous loops (:mod:`apollo.rl.sao_loop`): rollout workers that
sample from the policy of ``k`` versions ago, with ``k`` fixed or drawn from a long-tailed
distribution like the one many slow workers produce.

On a 2-core machine the loop runs two workers and small batches, so its natural staleness stays
below one policy version; the SAO paper's contrast (asynchronous GRPO collapsing, SAO holding) is
about far staler data. :class:`LaggedPolicyServer` makes that staleness affordable: it keeps a ring
of the last ``depth + 1`` published weights (one :class:`~apollo.rl.sao_rollout.PolicyServer`
each) and serves a turn from the weights ``k`` versions behind the newest, where ``k`` is the
calling worker's current lag. :func:`lagged` wraps an episode function so that each rollout
*group* (SAO: one episode; GRPO: the G episodes of a prompt, sampled by one worker with one set of
weights) draws its ``k`` once (:func:`make_lag`) and keeps it for all its turns; a turn is served by
"newest − k" *at that turn*, so an episode that spans weight updates still moves forward with them,
``k`` behind, as a slow worker would. Every sampled token records the version of the weights that
produced it (the slot's :attr:`~apollo.rl.sao_rollout.PolicyServer.version`), so the staleness the
loop logs (``staleness.traj_*``, ``staleness.token_*``) is measured, not assumed; the lag drawn is
in ``Rollout.meta["lag"]`` (logged as ``lag.mean`` / ``lag.max``).

Lag distributions (params ``sao.lag``):

- ``{dist: none}``: no ring, the plain server (the default; today's behaviour);
- ``{dist: fixed, k: K}``;
- ``{dist: pareto, scale: s, shape: a, cap: c}``: ``k = min(c, ⌊s·(X − 1)⌋)`` with ``X`` Pareto(a)
  (``X ≥ 1``, ``P(X ≥ x) = x^−a``), so ``P(k ≥ j) = (1 + j/s)^−a`` for ``1 ≤ j ≤ c``: most groups
  are fresh or nearly so, a few are very stale. :func:`lag_mean` gives its exact mean.

The ring holds ``depth + 1`` model copies (``depth`` = the largest lag: ``k`` or ``cap``): cheap
for the tiny presets the stability runs use; for a 135M model it is ``depth + 1`` times its memory.
A lag larger than the versions published so far is served by the oldest weights there are.
"""

from __future__ import annotations

import math
import random
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import torch

from apollo.rl.sao_rollout import PolicyServer, Rollout

LagFn = Callable[[], int]


def lag_depth(spec: Mapping[str, Any]) -> int:
    """The largest lag ``spec`` can draw (the ring keeps that many versions besides the newest)."""
    kind = spec.get("dist", "none")
    if kind == "none":
        return 0
    if kind == "fixed":
        return int(spec["k"])
    if kind == "pareto":
        return int(spec["cap"])
    raise ValueError(f"sao.lag.dist: unknown {kind!r} (none, fixed, pareto)")


def make_lag(spec: Mapping[str, Any], seed: int) -> LagFn:
    """A thread-safe draw of the lag ``k`` (policy versions) from ``spec`` (see the module doc)."""
    kind = spec.get("dist", "none")
    depth = lag_depth(spec)  # also validates ``dist``
    if depth < 0:
        raise ValueError(f"sao.lag: a lag must be ≥ 0, got {dict(spec)}")
    if kind in ("none", "fixed"):
        return lambda: depth
    scale, shape = float(spec["scale"]), float(spec["shape"])
    if scale <= 0 or shape <= 0:
        raise ValueError(f"sao.lag: pareto needs scale > 0 and shape > 0, got {dict(spec)}")
    rng = random.Random(seed)
    lock = threading.Lock()

    def draw() -> int:
        with lock:
            x = rng.paretovariate(shape)
        return min(depth, math.floor(scale * (x - 1.0)))

    return draw


def lag_tail(spec: Mapping[str, Any], j: int) -> float:
    """``P(k ≥ j)`` under ``spec``."""
    if j <= 0:
        return 1.0
    depth = lag_depth(spec)
    if j > depth:
        return 0.0
    if spec.get("dist", "none") == "fixed":
        return 1.0
    return (1.0 + j / float(spec["scale"])) ** -float(spec["shape"])


def lag_mean(spec: Mapping[str, Any]) -> float:
    """The exact mean lag of ``spec``: ``Σ_{j=1..depth} P(k ≥ j)``."""
    return sum(lag_tail(spec, j) for j in range(1, lag_depth(spec) + 1))


class LaggedPolicyServer:
    """A :class:`~apollo.rl.sao_rollout.PolicyServer` look-alike that serves each turn from the
    weights ``k`` versions behind the newest published, ``k`` being the calling thread's lag
    (:meth:`set_lag`; 0 when unset).

    ``publish(state_dict)`` loads the weights into the oldest slot once the ring is full (after the
    turns in flight on that slot finish: :meth:`PolicyServer.publish`) or into a new slot before,
    and makes it the newest; it returns the new version like the plain server's.
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, depth: int, **server_kw: Any):
        if depth < 0:
            raise ValueError(f"LaggedPolicyServer: depth must be ≥ 0, got {depth}")
        first = PolicyServer(model, tokenizer, **server_kw)
        self.depth = int(depth)
        self.tokenizer = tokenizer
        self.temperature, self.max_new_tokens, self.eos_id = first.temperature, first.max_new_tokens, first.eos_id
        self._kw = dict(server_kw)
        self._slots: deque[PolicyServer] = deque([first])  # oldest … newest
        self._lock = threading.Lock()
        self._local = threading.local()
        self.served: dict[int, int] = {}  # version -> turns served with it (the tests' and the logs' check)

    # -- the plain server's surface ------------------------------------------------------------
    @property
    def version(self) -> int:
        """The newest published version (what the learner is at)."""
        return self._slots[-1].version

    @version.setter
    def version(self, v: int) -> None:  # a resumed loop: the ring restarts from the learner's version
        with self._lock:
            self._slots[-1].version = int(v)

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return self._slots[-1].prompt_ids(messages)

    def observation_ids(self, text: str) -> list[int]:
        return self._slots[-1].observation_ids(text)

    @property
    def model(self) -> torch.nn.Module:
        return self._slots[-1].model

    # -- lag -------------------------------------------------------------------------------------
    def set_lag(self, k: int) -> None:
        self._local.lag = max(0, int(k))

    @property
    def lag(self) -> int:
        return int(getattr(self._local, "lag", 0))

    def versions(self) -> list[int]:
        """The versions the ring holds, oldest first."""
        with self._lock:
            return [s.version for s in self._slots]

    def slot(self, lag: int) -> PolicyServer:
        """The server holding the weights ``lag`` versions behind the newest (the oldest there is
        when fewer were published)."""
        with self._lock:
            return self._slots[max(0, len(self._slots) - 1 - int(lag))]

    def generate(self, ids: list[int], seed: int) -> tuple[list[int], list[float], list[float], int]:
        """One turn from the weights ``self.lag`` versions ago → (ids, logprobs, entropies, the
        version of the weights that sampled it)."""
        out = self.slot(self.lag).generate(ids, seed)
        with self._lock:
            self.served[out[3]] = self.served.get(out[3], 0) + 1
        return out

    def publish(self, state_dict: dict[str, torch.Tensor], version: int | None = None) -> int:
        with self._lock:
            new = self._slots[-1].version + 1 if version is None else int(version)
            if len(self._slots) <= self.depth:
                slot = PolicyServer(self._slots[-1].model, self.tokenizer, **self._kw)
            else:  # the oldest weights are not served any more: reuse their slot
                slot = self._slots.popleft()
            slot.publish(state_dict, version=new)
            self._slots.append(slot)
            return new


EpisodeFn = Callable[..., list[Rollout]]


def lagged(episode: EpisodeFn, draw: LagFn) -> EpisodeFn:
    """``episode`` with a lag per rollout group: the first episode of a group (its ``group`` kwarg)
    on a worker thread draws ``k``, every episode of the group runs with the server's lag set to
    ``k`` (on that thread), and each returned row carries ``meta["lag"] = k``."""
    local = threading.local()

    def run(server: Any, task: Any, *, group: str, **kw: Any) -> list[Rollout]:
        if getattr(local, "group", None) != group:
            local.group, local.k = group, int(draw())
        server.set_lag(local.k)
        try:
            rows = episode(server, task, group=group, **kw)
        finally:
            server.set_lag(0)
        for r in rows:
            r.meta["lag"] = local.k
        return rows

    return run


def lag_stats(rollouts: list[Rollout]) -> dict[str, float]:
    """``lag.mean`` / ``lag.max`` of the rows that carry a drawn lag (none: empty)."""
    lags = [float(r.meta["lag"]) for r in rollouts if "lag" in r.meta]
    if not lags:
        return {}
    return {"lag.mean": sum(lags) / len(lags), "lag.max": max(lags)}
