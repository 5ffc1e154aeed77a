"""Continuous batching for :class:`~apollo.engines.hf.HFEngine`: concurrent calls run together.

On CPU a forward of a small model costs mostly the reading of its weights, so one forward over many
tokens costs little more than one over a single token. With ``max_batch > 1`` the engine's calls go
to one :class:`DecodeBatcher` thread, which owns the model and schedules every forward as vLLM does:

* each running request owns a row (a *slot*) of :class:`SlotKV`, preallocated key/value buffers;
  row ``b`` covers columns ``[0, length_b)``;
* one forward (:meth:`SlotKV.forward`) takes a one-token segment of every decoding request and
  chunks of the inputs still being prefilled (chunked prefill, ``chunk_tokens`` per forward at
  most), writes their keys and values into their rows and returns each segment's next-token logits.
  Decoding requests go on while a new turn is prefilled, instead of waiting for it;
* with ``reuse_prefix``, a finished request's row stays *parked* with the tokens it covers; a new
  request that extends a parked row's tokens (the next turn of a multi-turn episode) takes that row
  and prefills only what is new, without copying a cache; one that shares a shorter prefix with it
  (a tree-rollout branch, a context window after summarization) gets a copy of those columns in a
  free row. ``park_slots`` rows beyond ``max_batch`` keep parked caches; the least recently parked
  one is reused first. :meth:`clear` drops them (after a weight update).

The forward drives the model's own modules (projections, norms, rotary embedding, MLP) layer by
layer, without transformers' cache and mask machinery: on CPU that machinery (a cache that grows by
concatenation, GQA keys repeated per step, a 4-D mask rebuilt per step) cost 37 ms per decode step of
6 rows × 1500 tokens against 12 ms here; and only each segment's last token goes through the
``lm_head`` (a prefill of the whole vocabulary's logits for every input token costs ~20 % more for a
135M model). It covers the Llama-family decoder layout (:data:`SLOT_MODEL_TYPES`: qwen2, qwen3,
llama, mistral); the engine falls back to one call at a time for another architecture.
``tests/test_hf_batch.py`` checks its logits against the model's own forward.

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
    reused: int = 0            # input tokens found in a parked row (not prefilled)
    new: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    slot: int = -1             # its row of the batch's SlotKV while running
    length: int = 0            # tokens its row covers


def slot_decode_supported(model: torch.nn.Module) -> bool:
    """Whether :class:`SlotKV` can drive ``model`` (a Llama-family decoder, full attention)."""
    cfg = getattr(model, "config", None)
    return (getattr(cfg, "model_type", None) in SLOT_MODEL_TYPES and not getattr(cfg, "use_sliding_window", False)
            and hasattr(getattr(model, "model", None), "rotary_emb"))


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # binary search on the first mismatch (prefix equality is monotone)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class DecodeBatcher:
    """``submit(request)`` blocks until the request is done; one daemon thread runs the model.

    ``threads``: intra-op threads of that thread (0: leave torch's setting). A decode step of a
    tiny model is a few hundred small operators: on a loaded 2-core machine two OpenMP threads
    wait on each other more than they compute (measured: 6 concurrent calls 2.9 s with 1 thread,
    16.7 s with 2, on a machine at load 6), so the default is 1.

    ``sample(logits, rng) -> (token, logprob, entropy)`` is the engine's sampling rule. ``max_len``:
    the longest sequence (input and output) a request can reach; the rows grow to it on demand.
    ``chunk_tokens``: the most input tokens prefilled per forward (all requests together).
    ``reuse_prefix``/``park_slots``: keep finished rows for the next turns (module docstring).
    A request that cannot fit ``max_len`` fails alone, before it joins a forward.
    """

    def __init__(self, model: torch.nn.Module, *, max_batch: int, eos_ids: list[int],
                 sample: Callable[[torch.Tensor, torch.Generator], tuple[int, float, float]],
                 device: str = "cpu", threads: int = 1, max_len: int | None = None, chunk_tokens: int = 512,
                 reuse_prefix: bool = False, park_slots: int | None = None):
        if not slot_decode_supported(model):
            raise ValueError(f"continuous batching drives {SLOT_MODEL_TYPES} models (full attention); "
                             f"{getattr(model.config, 'model_type', type(model).__name__)}: use max_batch 1")
        if int(chunk_tokens) < 1:
            raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
        self.model, self.max_batch, self.eos = model, int(max_batch), set(eos_ids)
        self._sample, self.device, self.threads = sample, device, int(threads)
        self.chunk_tokens, self.reuse_prefix = int(chunk_tokens), bool(reuse_prefix)
        parked = (max(2, self.max_batch // 2) if park_slots is None else int(park_slots)) if self.reuse_prefix else 0
        self.slots = SlotKV(model, self.max_batch + parked, device,
                            int(max_len or getattr(model.config, "max_position_embeddings", 4096)))
        self._pending: list[DecodeRequest] = []
        self._parked: dict[int, list[int]] = {}  # slot -> the tokens its columns cover (insertion order: LRU first)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self.forwards = 0      # forwards with at least one decoding request
        self.rows = 0          # decode tokens computed by them (rows / forwards = mean decode batch)
        self.prefilled = 0     # input tokens prefilled
        self.copied = 0        # input tokens copied from a parked row instead of prefilled

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

    def clear(self) -> None:
        """Forget the parked rows (their keys and values belong to the weights they were computed with)."""
        with self._cond:
            for s in list(self._parked):
                del self._parked[s]
                self.slots.free(s)

    # ---- the model thread
    def _admit(self, r: DecodeRequest) -> None:
        """Give ``r`` a row: a parked row it extends (taken), a copy of the longest shared prefix, or a fresh row."""
        if not r.ids:
            raise ValueError("a request needs at least one input token")
        if len(r.ids) + r.limit - 1 > self.slots.max_len:
            raise ValueError(f"{len(r.ids)} input tokens + {r.limit} new ones are over the engine's "
                             f"{self.slots.max_len} positions")
        best, best_n = -1, 0
        for s, toks in self._parked.items():
            n = min(common_prefix(toks, r.ids), len(r.ids) - 1)  # the last input token must run: its logits
            if n > best_n:
                best, best_n = s, n
        if best >= 0 and (best_n == len(self._parked[best]) or not self.slots.has_free()):
            del self._parked[best]  # the request extends the parked tokens (or no row is left): take the row
            r.slot = best
        else:
            r.slot = self._take_row()
            if best >= 0:  # a shared prefix (a branch, a new window): copy its columns, keep the parked row
                try:
                    self.slots.copy(best, r.slot, best_n)
                except BaseException:
                    self.slots.free(r.slot)
                    raise
                self.copied += best_n
        r.reused = r.length = best_n

    def _take_row(self) -> int:
        if not self.slots.has_free():
            oldest = next(iter(self._parked))  # least recently parked
            del self._parked[oldest]
            self.slots.free(oldest)
        return self.slots.take()

    def _retire(self, r: DecodeRequest) -> None:
        with self._cond:
            if self.reuse_prefix and r.error is None:
                self._parked[r.slot] = (r.ids + r.new)[:r.length]
            else:
                self.slots.free(r.slot)
        r.done.set()

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
                        self._admit(r)
                        active.append(r)
                    except BaseException as e:  # noqa: BLE001 - handed to the caller
                        r.error = e
                        r.done.set()
            try:
                active = self._step(active)
            except BaseException as e:  # noqa: BLE001 - every running request fails with it
                log.exception("batched forward failed")
                for r in active:
                    r.error = e
                    self._retire(r)
                active = []

    def _step(self, active: list[DecodeRequest]) -> list[DecodeRequest]:
        """One forward: a token of every decoding request, input chunks of the prefilling ones."""
        segs: list[tuple[DecodeRequest, list[int]]] = []
        budget = self.chunk_tokens
        for r in active:
            if r.new:  # decoding: feed the last sampled token
                segs.append((r, [r.new[-1]]))
            elif budget > 0:
                chunk = r.ids[r.length:r.length + budget]
                budget -= len(chunk)
                segs.append((r, chunk))
        logits = self.slots.forward([(r.slot, r.length, toks) for r, toks in segs])
        n_dec = sum(1 for r, _ in segs if r.new)
        if n_dec:
            self.forwards += 1
            self.rows += n_dec
        finished: set[int] = set()
        for i, (r, toks) in enumerate(segs):
            decoding = bool(r.new)
            r.length += len(toks)
            if not decoding:
                self.prefilled += len(toks)
                if r.length < len(r.ids):
                    continue  # more input to prefill
            tok, lp, ent = self._sample(logits[i], r.rng)
            r.new.append(tok)
            r.logprobs.append(lp)
            r.entropies.append(ent)
            if tok in self.eos or len(r.new) >= r.limit:
                finished.add(id(r))
                self._retire(r)  # its row covers ids + new[:-1] (r.length tokens)
        return [r for r in active if id(r) not in finished]


class SlotKV:
    """Key/value buffers of ``slots`` sequences, ``[slots, kv heads, capacity, head dim]`` per layer,
    and the forward over segments of them (:meth:`forward`).

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
        if need > self.max_len:
            raise ValueError(f"a sequence of {need} tokens is over the engine's max_len {self.max_len}")
        cap = min(max(need, 2 * self.capacity, 256), self.max_len)
        shape = (self.n_slots, self.kv_heads, cap, self.head_dim)
        keys = [torch.zeros(shape, dtype=self.kv_dtype, device=self.device) for _ in self.layers]
        values = [torch.zeros(shape, dtype=self.kv_dtype, device=self.device) for _ in self.layers]
        for old, new in zip(self.keys + self.values, keys + values):  # none before the first growth
            new[:, :, :self.capacity] = old
        self.keys, self.values, self.capacity = keys, values, cap

    def has_free(self) -> bool:
        return bool(self._free)

    def take(self) -> int:
        """The lowest free row (running rows stay packed at the top of the buffers)."""
        if not self._free:
            raise RuntimeError("no free slot: more running requests than slots")
        return self._free.pop(0)

    def free(self, slot: int) -> None:
        if 0 <= slot < self.n_slots and slot not in self._free:
            self._free.append(slot)
            self._free.sort()

    def copy(self, src: int, dst: int, length: int) -> None:
        """Copy row ``src``'s first ``length`` columns into row ``dst``."""
        for kb, vb in zip(self.keys, self.values, strict=True):
            kb[dst, :, :length] = kb[src, :, :length]
            vb[dst, :, :length] = vb[src, :, :length]

    @torch.no_grad()
    def forward(self, segments: list[tuple[int, int, list[int]]]) -> torch.Tensor:
        """Feed each segment ``(slot, start, tokens)``: ``tokens`` at positions ``start, start+1, …`` of
        that row (``start`` = the columns the row already covers); write their keys and values; return
        the next-token logits after each segment's last token, ``[len(segments), vocab]`` (float32).

        One-token segments (decoding) attend together over rows ``0 … max(their slots)`` and columns
        ``0 … max(their positions)``: rows in that range that are not decoding compute a dummy query
        and are discarded. A longer segment (prefill) attends causally over its own row."""
        if not segments:
            raise ValueError("forward of no segments")
        need = max(start + len(toks) for _, start, toks in segments)
        if need > self.capacity:
            self._grow(need)
        dev, H, KVH, D = self.device, self.heads, self.kv_heads, self.head_dim
        G = H // KVH
        flat_tok, flat_slot, flat_pos, last = [], [], [], []
        dec_i, dec_slot, dec_pos, pre = [], [], [], []  # decode token indices; prefill (slot, start, offset, L)
        for slot, start, toks in segments:
            if not toks:
                raise ValueError(f"an empty segment for slot {slot}")
            off = len(flat_tok)
            flat_tok += toks
            flat_slot += [slot] * len(toks)
            flat_pos += range(start, start + len(toks))
            last.append(off + len(toks) - 1)
            if len(toks) == 1:
                dec_i.append(off)
                dec_slot.append(slot)
                dec_pos.append(start)
            else:
                pre.append((slot, start, off, len(toks)))
        T = len(flat_tok)
        tok = torch.tensor(flat_tok, device=dev)[None]
        pos = torch.tensor(flat_pos, device=dev)
        slots_t = torch.tensor(flat_slot, device=dev)
        if dec_i:
            n = max(dec_slot) + 1
            width = max(dec_pos) + 1
            d_idx = torch.tensor(dec_i, device=dev)
            d_rows = torch.tensor(dec_slot, device=dev)
            row_pos = torch.zeros(n, dtype=torch.long, device=dev)  # other rows: column 0 only (a dummy)
            row_pos[d_rows] = torch.tensor(dec_pos, device=dev)
            keep = torch.arange(width, device=dev)[None, :] <= row_pos[:, None]  # [n, width]
            dec_bias = torch.zeros(n, 1, 1, width, dtype=self.kv_dtype, device=dev).masked_fill(
                ~keep[:, None, None, :], float("-inf"))
        pre_masks = [torch.arange(start + L, device=dev)[None, :] <= torch.arange(start, start + L, device=dev)[:, None]
                     for _, start, _, L in pre]
        m = self.model.model
        x = m.embed_tokens(tok)  # [1, T, hidden]
        cos, sin = m.rotary_emb(x, pos[None])
        for layer, kb, vb in zip(self.layers, self.keys, self.values, strict=True):
            a = layer.self_attn
            h = layer.input_layernorm(x)
            q = a.q_proj(h).view(1, T, H, D)
            k = a.k_proj(h).view(1, T, KVH, D)
            if hasattr(a, "q_norm"):  # qwen3: per-head RMSNorm before the rotary embedding
                q, k = a.q_norm(q), a.k_norm(k)
            q, k = self._rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)  # [1, heads, T, D]
            v = a.v_proj(h).view(1, T, KVH, D).transpose(1, 2)
            kb[slots_t, :, pos] = k[0].transpose(0, 1).to(self.kv_dtype)  # [T, KVH, D] into (row, column)
            vb[slots_t, :, pos] = v[0].transpose(0, 1).to(self.kv_dtype)
            q = q[0].transpose(0, 1).to(self.kv_dtype)  # [T, H, D]
            out = torch.empty(T, H, D, dtype=self.kv_dtype, device=dev)
            if dec_i:
                # grouped-query attention of one query token: heads h = g·G + j share kv head g
                qd = torch.zeros(n, KVH, G, D, dtype=self.kv_dtype, device=dev)
                qd[d_rows] = q[d_idx].reshape(-1, KVH, G, D)
                s = torch.matmul(qd, kb[:n, :, :width].transpose(-1, -2)) * a.scaling + dec_bias  # [n, KVH, G, width]
                o = torch.matmul(torch.softmax(s, dim=-1), vb[:n, :, :width])
                out[d_idx] = o[d_rows].reshape(-1, H, D)
            for (slot, start, off, L), mask in zip(pre, pre_masks, strict=True):
                qs = q[off:off + L].transpose(0, 1)[None]  # [1, H, L, D]
                o = torch.nn.functional.scaled_dot_product_attention(
                    qs, kb[slot:slot + 1, :, :start + L], vb[slot:slot + 1, :, :start + L], attn_mask=mask,
                    scale=a.scaling, enable_gqa=KVH != H)
                out[off:off + L] = o[0].transpose(0, 1)
            x = x + a.o_proj(out.reshape(1, T, H * D).to(self.dtype))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        x = m.norm(x[:, torch.tensor(last, device=dev)])  # only each segment's last token needs logits
        return self.model.lm_head(x)[0].float()


def kv_of(cache: Any) -> KV:
    """A ``DynamicCache``'s tensors as a per-layer list (batch of one)."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def cache_of(kv: KV) -> Any:
    from transformers import DynamicCache

    c = DynamicCache()
    for i, (k, v) in enumerate(kv):
        c.update(k, v, i)
    return c
