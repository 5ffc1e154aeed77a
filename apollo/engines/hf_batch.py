"""Continuous batching for :class:`~apollo.engines.hf.HFEngine`: concurrent calls decode together.

A tiny model on CPU spends a decode step mostly on per-operator overhead, not on arithmetic, so
one forward over B sequences costs about what one over a single sequence does. With
``max_batch > 1`` the engine's calls go to one :class:`DecodeBatcher` thread, which owns the model:

* a new request is prefilled on its own (through the engine's prefix KV cache when it has one)
  and its first token sampled from the prefill logits;
* every request still running then advances one token per batched forward: the sequences' KV
  caches are left-padded to a common length, with an attention mask that hides the padding and
  per-row ``position_ids`` (the rotary positions of each sequence, not of the padded layout);
* requests join and leave between two forwards (continuous batching, as vLLM schedules); the
  batched cache is rebuilt only when the set of running requests changes.

Each request samples from its own seeded ``torch.Generator`` and gets the same logprobs and
entropies as the single-sequence path. A batched forward is not bit-identical to a lone one (a
different matrix shape can round differently), so a seed reproduces a trajectory exactly only with
``max_batch: 1``; the greedy test checks that batching does not change what the model computes
beyond rounding.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

log = logging.getLogger(__name__)
KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values [1, heads, length, dim]


@dataclass(eq=False)
class DecodeRequest:
    """One generation call: ``ids`` the whole input, ``limit`` the most tokens to generate."""

    ids: list[int]
    limit: int
    rng: torch.Generator
    reused: int = 0
    new: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    kv: KV | None = None       # this sequence's own cache (when not inside the batched one)
    length: int = 0            # tokens its cache covers
    logits: torch.Tensor | None = None  # next-token logits waiting to be sampled


class DecodeBatcher:
    """``submit(request)`` blocks until the request is done; one daemon thread runs the model.

    ``threads``: intra-op threads of that thread (0: leave torch's setting). A decode step of a
    tiny model is a few hundred small operators: on a loaded 2-core machine two OpenMP threads
    wait on each other more than they compute (measured: 6 concurrent calls 2.9 s with 1 thread,
    16.7 s with 2, on a machine at load 6), so the default is 1.

    ``sample(logits, rng) -> (token, logprob, entropy)`` is the engine's sampling rule;
    ``prefill(ids) -> (reused, logits, kv)`` its single-sequence prefill (prefix cache included);
    ``finish(request)`` is called with each finished request whose ``kv`` covers ``ids + new[:-1]``.
    """

    def __init__(self, model: torch.nn.Module, *, max_batch: int, eos_ids: list[int],
                 sample: Callable[[torch.Tensor, torch.Generator], tuple[int, float, float]],
                 prefill: Callable[[list[int]], tuple[int, torch.Tensor, KV]],
                 finish: Callable[[DecodeRequest], None], device: str = "cpu", threads: int = 1):
        self.model, self.max_batch, self.eos = model, int(max_batch), set(eos_ids)
        self._sample, self._prefill, self._finish, self.device = sample, prefill, finish, device
        self.threads = int(threads)
        self._pending: list[DecodeRequest] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self.forwards = 0      # batched decode forwards
        self.rows = 0          # sequences advanced by them (rows / forwards = mean batch)

    def submit(self, req: DecodeRequest) -> DecodeRequest:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="hf-decode-batcher", daemon=True)
                self._thread.start()
            self._pending.append(req)
            self._cond.notify()
        req.done.wait()
        if req.error is not None:
            raise req.error
        return req

    # ---- the model thread
    def _run(self) -> None:
        if self.threads > 0:  # OpenMP's thread count is this thread's own setting
            torch.set_num_threads(self.threads)
        active: list[DecodeRequest] = []
        batch: _Batch | None = None
        while True:
            with self._cond:
                while not self._pending and not active:
                    self._cond.wait()
                room = max(0, self.max_batch - len(active))
                new, self._pending = self._pending[:room], self._pending[room:]
            for r in new:
                try:
                    r.reused, r.logits, r.kv = self._prefill(r.ids)
                    r.length = len(r.ids)
                    active.append(r)
                except BaseException as e:  # noqa: BLE001 - handed to the caller
                    r.error = e
                    r.done.set()
            try:
                batch, active = self._step(active, batch)
            except BaseException as e:  # noqa: BLE001 - every running request fails with it
                log.exception("batched decode failed")
                for r in active:
                    r.error = e
                    r.done.set()
                active, batch = [], None

    def _step(self, active: list[DecodeRequest], batch: _Batch | None) -> tuple[_Batch | None, list[DecodeRequest]]:
        """Sample a token for every request, retire the finished ones, one batched forward for the rest."""
        going: list[DecodeRequest] = []
        for r in active:
            tok, lp, ent = self._sample(r.logits, r.rng)
            r.logits = None
            r.new.append(tok)
            r.logprobs.append(lp)
            r.entropies.append(ent)
            if tok in self.eos or len(r.new) >= r.limit:
                if batch is not None and r in batch.rows:
                    batch.take_out(r)
                self._finish(r)
                r.kv = None
                r.done.set()
            else:
                going.append(r)
        if not going:
            return None, []
        if batch is None or batch.rows != going:
            if batch is not None:
                for r in going:
                    if r.kv is None:  # it ran in the old batch
                        batch.take_out(r)
            batch = _Batch(going, self.device)
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([[r.new[-1]] for r in going], device=self.device),
                             attention_mask=batch.attention_mask(), position_ids=batch.position_ids(),
                             past_key_values=batch.cache, use_cache=True)
        batch.advanced()
        self.forwards += 1
        self.rows += len(going)
        logits = out.logits[:, -1].float()
        for i, r in enumerate(going):
            r.logits = logits[i]
        return batch, going


class _Batch:
    """The running sequences' caches, left-padded into one ``DynamicCache``."""

    def __init__(self, rows: list[DecodeRequest], device: str):
        from transformers import DynamicCache

        self.rows = list(rows)
        self.width = max(r.length for r in rows)
        self.pad = [self.width - r.length for r in rows]
        self.cache = DynamicCache()
        for layer in range(len(rows[0].kv)):
            ks, vs = [], []
            for r, p in zip(rows, self.pad, strict=True):
                k, v = r.kv[layer]
                if p:
                    z = k.new_zeros(k.shape[0], k.shape[1], p, k.shape[3])
                    k, v = torch.cat([z, k], dim=2), torch.cat([z, v], dim=2)
                ks.append(k)
                vs.append(v)
            self.cache.update(torch.cat(ks, dim=0), torch.cat(vs, dim=0), layer)
        for r in rows:
            r.kv = None  # the batch holds it now
        self.device = device

    def attention_mask(self) -> torch.Tensor:
        m = torch.ones(len(self.rows), self.width + 1, dtype=torch.long, device=self.device)
        for i, p in enumerate(self.pad):
            if p:
                m[i, :p] = 0
        return m

    def position_ids(self) -> torch.Tensor:
        return torch.tensor([[r.length] for r in self.rows], device=self.device)

    def advanced(self) -> None:
        self.width += 1
        for r in self.rows:
            r.length += 1

    def take_out(self, r: DecodeRequest) -> None:
        """Give row ``r`` its own (unpadded) cache back."""
        i = self.rows.index(r)
        p = self.pad[i]
        r.kv = [(layer.keys[i:i + 1, :, p:].clone(), layer.values[i:i + 1, :, p:].clone())
                for layer in self.cache.layers]


def kv_of(cache: Any) -> KV:
    """A ``DynamicCache``'s tensors as a per-layer list (batch of one)."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def cache_of(kv: KV) -> Any:
    from transformers import DynamicCache

    c = DynamicCache()
    for i, (k, v) in enumerate(kv):
        c.update(k, v, i)
    return c
