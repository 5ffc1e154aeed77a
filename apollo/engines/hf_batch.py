"""Continuous batching for :class:`~apollo.engines.hf.HFEngine`: concurrent calls decode together.

A tiny model on CPU spends a decode step mostly on per-operator overhead, not on arithmetic, so
one forward over B sequences costs about what one over a single sequence does. With
``max_batch > 1`` the engine's calls go to one :class:`DecodeBatcher` thread, which owns the model:

* a new request is prefilled on its own (through the engine's prefix KV cache when it has one)
  and its first token sampled from the prefill logits; its KV cache is then copied into a free
  row (a *slot*) of :class:`SlotKV`, preallocated key/value buffers;
* every request still running then advances one token per batched forward: each row's new key and
  value are written at that row's own length, attention runs over the longest row with a mask that
  hides every other row's unused columns, and rotary positions are per row;
* requests join and leave between two forwards (continuous batching, as vLLM schedules): a join
  copies one cache into its slot, a leave frees the slot; no other row moves.

The batched forward (:meth:`SlotKV.step`) drives the model's own modules (projections, norms,
rotary embedding, MLP) layer by layer, without transformers' cache and mask machinery: on CPU that
machinery (a cache that grows by concatenation, GQA keys repeated per step, a 4-D mask rebuilt per
step) cost 37 ms per decode step of 6 rows × 1500 tokens against 12 ms here. It covers the
Llama-family decoder layout (:data:`SLOT_MODEL_TYPES`: qwen2, qwen3, llama, mistral); the engine
falls back to one call at a time for another architecture. ``tests/test_hf_batch.py`` checks its
logits against the model's own forward.

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
KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values [1, kv heads, length, head dim]
SLOT_MODEL_TYPES = ("qwen2", "qwen3", "llama", "mistral")


def sample_token(logits: torch.Tensor, rng: torch.Generator, temperature: float,
                 top_p: float = 1.0) -> tuple[int, float, float]:
    """One token from next-token ``logits``: (id, its logprob, the entropy of the distribution sampled
    from), under ``temperature`` (0: greedy) and nucleus ``top_p``; draws from ``rng`` only."""
    sample = temperature > 0
    lp = torch.log_softmax(logits.float() / temperature if sample else logits.float(), dim=-1)
    if sample and top_p < 1.0:
        lp = top_p_filter(lp, top_p)
    p = lp.exp()
    tok = int(torch.multinomial(p, 1, generator=rng)) if sample else int(torch.argmax(lp))
    return tok, float(lp[tok]), float(-(p * torch.where(p > 0, lp, torch.zeros_like(lp))).sum())


def top_p_filter(lp: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering of log-probabilities, renormalized (the smallest set with mass ≥ top_p)."""
    sorted_lp, order = torch.sort(lp, descending=True)
    cum = sorted_lp.exp().cumsum(-1)
    drop = cum - sorted_lp.exp() >= top_p  # tokens entirely beyond the nucleus
    sorted_lp = sorted_lp.masked_fill(drop, float("-inf"))
    out = torch.full_like(lp, float("-inf")).scatter(0, order, sorted_lp)
    return torch.log_softmax(out, dim=-1)


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
    kv: KV | None = None       # the cache after prefill, and at the end (the finish callback's)
    slot: int = -1             # its row of the batch's SlotKV while running
    length: int = 0            # tokens its cache covers
    logits: torch.Tensor | None = None  # next-token logits waiting to be sampled


def slot_decode_supported(model: torch.nn.Module) -> bool:
    """Whether :class:`SlotKV` can drive ``model`` (a Llama-family decoder, full attention)."""
    cfg = getattr(model, "config", None)
    return (getattr(cfg, "model_type", None) in SLOT_MODEL_TYPES and not getattr(cfg, "use_sliding_window", False)
            and hasattr(getattr(model, "model", None), "rotary_emb"))


class DecodeBatcher:
    """``submit(request)`` blocks until the request is done; one daemon thread runs the model.

    ``threads``: intra-op threads of that thread (0: leave torch's setting). A decode step of a
    tiny model is a few hundred small operators: on a loaded 2-core machine two OpenMP threads
    wait on each other more than they compute (measured: 6 concurrent calls 2.9 s with 1 thread,
    16.7 s with 2, on a machine at load 6), so the default is 1.

    ``sample(logits, rng) -> (token, logprob, entropy)`` is the engine's sampling rule;
    ``prefill(ids) -> (reused, logits, kv)`` its single-sequence prefill (prefix cache included);
    ``finish(request)``, when given, is called with each finished request, whose ``kv`` then covers
    ``ids + new[:-1]`` (``request.length`` tokens). ``max_len``: the longest sequence (input and
    output) a request can reach; the slots grow to it on demand.
    """

    def __init__(self, model: torch.nn.Module, *, max_batch: int, eos_ids: list[int],
                 sample: Callable[[torch.Tensor, torch.Generator], tuple[int, float, float]],
                 prefill: Callable[[list[int]], tuple[int, torch.Tensor, KV]],
                 finish: Callable[[DecodeRequest], None] | None = None, device: str = "cpu", threads: int = 1,
                 max_len: int | None = None):
        if not slot_decode_supported(model):
            raise ValueError(f"continuous batching drives {SLOT_MODEL_TYPES} models (full attention); "
                             f"{getattr(model.config, 'model_type', type(model).__name__)}: use max_batch 1")
        self.model, self.max_batch, self.eos = model, int(max_batch), set(eos_ids)
        self._sample, self._prefill, self._finish, self.device = sample, prefill, finish, device
        self.threads = int(threads)
        self.slots = SlotKV(model, self.max_batch, device,
                            int(max_len or getattr(model.config, "max_position_embeddings", 4096)))
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
        while True:
            with self._cond:
                while not self._pending and not active:
                    self._cond.wait()
                room = max(0, self.max_batch - len(active))
                new, self._pending = self._pending[:room], self._pending[room:]
            for r in new:
                try:
                    r.reused, r.logits, kv = self._prefill(r.ids)
                    r.length = len(r.ids)
                    r.slot = self.slots.load(kv, r.length)
                    active.append(r)
                except BaseException as e:  # noqa: BLE001 - handed to the caller
                    r.error = e
                    r.done.set()
            try:
                active = self._step(active)
            except BaseException as e:  # noqa: BLE001 - every running request fails with it
                log.exception("batched decode failed")
                for r in active:
                    self.slots.free(r.slot)
                    r.error = e
                    r.done.set()
                active = []

    def _step(self, active: list[DecodeRequest]) -> list[DecodeRequest]:
        """Sample a token for every request, retire the finished ones, one batched forward for the rest."""
        going: list[DecodeRequest] = []
        for r in active:
            tok, lp, ent = self._sample(r.logits, r.rng)
            r.logits = None
            r.new.append(tok)
            r.logprobs.append(lp)
            r.entropies.append(ent)
            if tok in self.eos or len(r.new) >= r.limit:
                if self._finish is not None:
                    r.kv = self.slots.export(r.slot, r.length)
                    self._finish(r)
                    r.kv = None
                self.slots.free(r.slot)
                r.done.set()
            else:
                going.append(r)
        if not going:
            return []
        logits = self.slots.step([r.slot for r in going], [r.new[-1] for r in going], [r.length for r in going])
        self.forwards += 1
        self.rows += len(going)
        for i, r in enumerate(going):
            r.length += 1
            r.logits = logits[i]
        return going


class SlotKV:
    """Key/value buffers of ``slots`` sequences, ``[slots, kv heads, capacity, head dim]`` per layer,
    and the batched one-token forward over them (:meth:`step`).

    A sequence keeps its row (slot) from join to leave; row ``b`` covers columns ``[0, length_b)``.
    Capacity starts at 256 columns and doubles on demand, up to ``max_len``.
    """

    def __init__(self, model: torch.nn.Module, slots: int, device: str, max_len: int):
        import sys

        self.model, self.n_slots, self.device, self.max_len = model, int(slots), device, int(max_len)
        cfg = model.config
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads)
        self.layers = list(model.model.layers)
        self.dtype = next(model.parameters()).dtype
        # the buffers and the attention in fp32 on CPU whatever the weights' dtype: bf16 batched matmuls of
        # this shape (a query group x thousands of columns) are slower there (10 rows x 2,000 columns, one
        # layer: 5.1 ms in bf16, 3.2 ms in fp32, 2 cores), while bf16 projections are ~2x faster than fp32
        self.kv_dtype = torch.float32 if torch.device(device).type == "cpu" else self.dtype
        attn = self.layers[0].self_attn
        self._rope = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.capacity = 0
        self._free = list(range(self.n_slots))

    def _grow(self, need: int) -> None:
        cap = min(max(need, 2 * self.capacity, 256), max(self.max_len, need))
        shape = (self.n_slots, self.kv_heads, cap, self.head_dim)
        keys = [torch.zeros(shape, dtype=self.kv_dtype, device=self.device) for _ in self.layers]
        values = [torch.zeros(shape, dtype=self.kv_dtype, device=self.device) for _ in self.layers]
        for old, new in zip(self.keys + self.values, keys + values):  # none before the first growth
            new[:, :, :self.capacity] = old
        self.keys, self.values, self.capacity = keys, values, cap

    def load(self, kv: KV, length: int) -> int:
        """Copy one sequence's cache (``length`` columns) into the lowest free slot; return the slot."""
        if not self._free:
            raise RuntimeError("no free slot: more running requests than max_batch")
        slot = self._free.pop(0)
        try:
            if length > self.capacity:
                self._grow(length)
            for (k, v), kb, vb in zip(kv, self.keys, self.values, strict=True):
                kb[slot, :, :length] = k[0, :, :length]
                vb[slot, :, :length] = v[0, :, :length]
        except BaseException:
            self.free(slot)
            raise
        return slot

    def free(self, slot: int) -> None:
        if 0 <= slot < self.n_slots and slot not in self._free:
            self._free.append(slot)
            self._free.sort()  # lowest first: running rows stay packed at the top of the buffers

    def export(self, slot: int, length: int) -> KV:
        """A copy of one slot's first ``length`` columns, as a batch-of-one per-layer cache."""
        return [(kb[slot:slot + 1, :, :length].to(self.dtype, copy=True), vb[slot:slot + 1, :, :length].to(self.dtype, copy=True))
                for kb, vb in zip(self.keys, self.values, strict=True)]

    @torch.no_grad()
    def step(self, slots: list[int], tokens: list[int], positions: list[int]) -> torch.Tensor:
        """Feed ``tokens[i]`` at position ``positions[i]`` (= the slot's length) to ``slots[i]``;
        write their keys and values; return the next-token logits ``[len(slots), vocab]``.

        The forward runs over rows ``0 … max(slots)`` (free rows in that range compute a dummy
        token at column 0 and are discarded) and columns ``0 … max(positions)``."""
        n = max(slots) + 1
        width = max(positions) + 1
        if width > self.capacity:
            self._grow(width)
        dev = self.device
        rows = torch.tensor(slots, device=dev)
        tok = torch.zeros(n, 1, dtype=torch.long, device=dev)
        pos = torch.zeros(n, 1, dtype=torch.long, device=dev)
        tok[rows, 0] = torch.tensor(tokens, device=dev)
        pos[rows, 0] = torch.tensor(positions, device=dev)
        cols = pos[:, 0]
        keep = torch.arange(width, device=dev)[None, :] <= pos  # [n, width]: a row sees its own columns
        bias = torch.zeros(n, 1, 1, width, dtype=self.kv_dtype, device=dev).masked_fill(
            ~keep[:, None, None, :], float("-inf"))
        H, KVH, D = self.heads, self.kv_heads, self.head_dim
        every = torch.arange(n, device=dev)
        m = self.model.model
        x = m.embed_tokens(tok)  # [n, 1, hidden]
        cos, sin = m.rotary_emb(x, pos)
        for layer, kb, vb in zip(self.layers, self.keys, self.values, strict=True):
            a = layer.self_attn
            h = layer.input_layernorm(x)
            q = a.q_proj(h).view(n, 1, H, D)
            k = a.k_proj(h).view(n, 1, KVH, D)
            if hasattr(a, "q_norm"):  # qwen3: per-head RMSNorm before the rotary embedding
                q, k = a.q_norm(q), a.k_norm(k)
            q, k = self._rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)  # [n, heads, 1, D]
            v = a.v_proj(h).view(n, 1, KVH, D).transpose(1, 2)
            kb[every, :, cols] = k[:, :, 0].to(self.kv_dtype)
            vb[every, :, cols] = v[:, :, 0].to(self.kv_dtype)
            # grouped-query attention of one query token: heads h = g·(H/KVH) + j share kv head g
            qg = q.reshape(n, KVH, H // KVH, D).to(self.kv_dtype)
            s = torch.matmul(qg, kb[:n, :, :width].transpose(-1, -2)) * a.scaling + bias  # [n, KVH, H/KVH, width]
            o = torch.matmul(torch.softmax(s, dim=-1), vb[:n, :, :width])
            x = x + a.o_proj(o.reshape(n, 1, H * D).to(self.dtype))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        logits = self.model.lm_head(m.norm(x))[:, 0]
        return logits[rows].float()


def kv_of(cache: Any) -> KV:
    """A ``DynamicCache``'s tensors as a per-layer list (batch of one)."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def cache_of(kv: KV) -> Any:
    from transformers import DynamicCache

    c = DynamicCache()
    for i, (k, v) in enumerate(kv):
        c.update(k, v, i)
    return c
