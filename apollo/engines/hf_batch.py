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
  one is reused first. :meth:`clear` drops them (after a weight update);
* with ``speculate`` k > 0, a decoding request's segment is its sampled token plus up to k draft
  tokens that :class:`NgramDrafter` looks up in its own context (prompt lookup: agents repeat paths,
  commands and values they have read); one forward scores them all and :func:`speculative_accept`
  keeps the longest prefix that exact speculative sampling accepts, so the sampled distribution is
  the model's own. Short segments attend in one batched call with a per-row causal mask.

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
SHORT_SEGMENT = 16  # segments up to this many tokens attend in one batched matmul (SlotKV.forward)


def target_logprobs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """Log-probabilities of the distribution a token is sampled from: ``logits`` under ``temperature``
    (0: the untempered distribution, sampled greedily) and nucleus ``top_p``."""
    sample = temperature > 0
    lp = torch.log_softmax(logits.float() / temperature if sample else logits.float(), dim=-1)
    if sample and top_p < 1.0:
        lp = top_p_filter(lp, top_p)
    return lp


def _entropy(lp: torch.Tensor, p: torch.Tensor) -> float:
    return float(-(p * torch.where(p > 0, lp, torch.zeros_like(lp))).sum())


def sample_token(logits: torch.Tensor, rng: torch.Generator, temperature: float,
                 top_p: float = 1.0) -> tuple[int, float, float]:
    """One token from next-token ``logits``: (id, its logprob, the entropy of the distribution sampled
    from), under ``temperature`` (0: greedy) and nucleus ``top_p``; draws from ``rng`` only."""
    lp = target_logprobs(logits, temperature, top_p)
    p = lp.exp()
    tok = int(torch.multinomial(p, 1, generator=rng)) if temperature > 0 else int(torch.argmax(lp))
    return tok, float(lp[tok]), _entropy(lp, p)


def speculative_accept(logits: torch.Tensor, draft: list[int], rng: torch.Generator, temperature: float,
                       top_p: float = 1.0) -> list[tuple[int, float, float]]:
    """Verify ``draft`` (k proposed tokens) against the model's next-token ``logits`` at the k + 1
    positions that fed the last sampled token and the draft: ``logits[i]`` is the distribution of the
    token after draft ``i - 1``. Returns the tokens emitted, each ``(id, logprob, entropy)`` under the
    target distribution (:func:`target_logprobs`): the accepted drafts, then one more token (the
    correction where a draft was rejected, else a token sampled after the whole draft).

    Speculative sampling with a deterministic draft (prob. 1 on the proposed token; Leviathan et al.
    2023, Chen et al. 2023): draft ``d`` is accepted with probability ``p(d)``; on rejection the
    token is drawn from ``p`` without ``d``, renormalized. Every emitted token is then distributed
    exactly as plain sampling from ``p`` would draw it (greedy: accepted iff it is the argmax), so
    the logprobs are the policy's, as RL ratios need; only the random stream differs from
    :func:`sample_token`'s. Draws from ``rng`` only."""
    if logits.shape[0] != len(draft) + 1:
        raise ValueError(f"{len(draft)} draft tokens need {len(draft) + 1} rows of logits, got {logits.shape[0]}")
    out: list[tuple[int, float, float]] = []
    for i, d in enumerate(draft):
        lp = target_logprobs(logits[i], temperature, top_p)
        p = lp.exp()
        ent = _entropy(lp, p)
        if temperature <= 0:
            tok = int(torch.argmax(lp))
            out.append((tok, float(lp[tok]), ent))
            if tok != d:
                return out
            continue
        if float(torch.rand((), generator=rng)) < float(p[d]):
            out.append((d, float(lp[d]), ent))
            continue
        rest = p.clone()
        rest[d] = 0.0  # u >= p(d) with u < 1, so p(d) < 1 and something else has mass
        tok = int(torch.multinomial(rest, 1, generator=rng))
        out.append((tok, float(lp[tok]), ent))
        return out
    out.append(sample_token(logits[len(draft)], rng, temperature, top_p))
    return out


class NgramDrafter:
    """Prompt-lookup drafts (vLLM's ``ngram`` speculator, transformers' ``prompt_lookup_num_tokens``):
    the tokens that followed the latest earlier occurrence of the sequence's last ``n`` tokens, the
    longest ``n <= max_n`` that occurred before. An agent's turn copies much of its context (the tool
    call format, paths, commands it ran, the text it wrote last turn), so these drafts are often right.
    ``extend`` appends tokens (O(max_n) each); ``propose(k)`` is a dictionary lookup."""

    def __init__(self, tokens: list[int] = (), max_n: int = 3):
        self.max_n = int(max_n)
        self.seq: list[int] = []
        self._next: list[dict[tuple[int, ...], int]] = [{} for _ in range(self.max_n)]  # [n-1]: n-gram -> next position
        self.extend(tokens)

    def extend(self, tokens) -> None:
        seq, maps = self.seq, self._next
        for t in tokens:
            p = len(seq)
            for n in range(1, min(self.max_n, p) + 1):  # the n-gram ending at p - 1 is followed by position p
                maps[n - 1][tuple(seq[p - n:p])] = p
            seq.append(int(t))

    def propose(self, k: int) -> list[int]:
        seq = self.seq
        for n in range(min(self.max_n, len(seq)), 0, -1):
            pos = self._next[n - 1].get(tuple(seq[-n:]))
            if pos is not None:
                return seq[pos:pos + k]
        return []


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
    drafter: NgramDrafter | None = None  # with speculation: its ids and new tokens, for drafts


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
    ``speculate``: draft tokens per decode step (0: off): each decoding request feeds its last token
    and up to ``speculate`` prompt-lookup drafts (:class:`NgramDrafter`) in one forward, and
    ``accept(logits, draft, rng)`` (:func:`speculative_accept` under the engine's sampling rule) keeps
    the right ones and adds one more token. On CPU a forward costs mostly the reading of the weights
    and of each row's keys and values, so verifying k tokens costs about what one does: the turn's
    tokens come in fewer forwards. ``drafted``/``accepted`` count the drafts fed and kept.
    A request that cannot fit ``max_len`` fails alone, before it joins a forward.
    """

    def __init__(self, model: torch.nn.Module, *, max_batch: int, eos_ids: list[int],
                 sample: Callable[[torch.Tensor, torch.Generator], tuple[int, float, float]],
                 device: str = "cpu", threads: int = 1, max_len: int | None = None, chunk_tokens: int = 512,
                 reuse_prefix: bool = False, park_slots: int | None = None, speculate: int = 0,
                 accept: Callable[[torch.Tensor, list[int], torch.Generator], list[tuple[int, float, float]]] | None = None):
        if not slot_decode_supported(model):
            raise ValueError(f"continuous batching drives {SLOT_MODEL_TYPES} models (full attention); "
                             f"{getattr(model.config, 'model_type', type(model).__name__)}: use max_batch 1")
        if int(chunk_tokens) < 1:
            raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
        self.model, self.max_batch, self.eos = model, int(max_batch), set(eos_ids)
        self._sample, self.device, self.threads = sample, device, int(threads)
        self.chunk_tokens, self.reuse_prefix = int(chunk_tokens), bool(reuse_prefix)
        if int(speculate) < 0 or (int(speculate) > 0 and accept is None):
            raise ValueError(f"speculate must be >= 0 and needs an accept rule, got {speculate}")
        self.speculate, self._accept = int(speculate), accept
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
        self.drafted = 0       # draft tokens fed (speculate > 0)
        self.accepted = 0      # of them, kept

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
        if self.speculate:
            r.drafter = NgramDrafter(r.ids)

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
        """One forward: a token of every decoding request (and its drafts), input chunks of the prefilling ones."""
        segs: list[tuple[DecodeRequest, list[int]]] = []
        budget = self.chunk_tokens
        for r in active:
            if r.new:  # decoding: feed the last sampled token, and drafts of what follows it
                room = min(self.speculate, r.limit - len(r.new) - 1)
                draft = r.drafter.propose(room) if room > 0 and r.drafter is not None else []
                segs.append((r, [r.new[-1]] + draft))
            elif budget > 0:
                chunk = r.ids[r.length:r.length + budget]
                budget -= len(chunk)
                segs.append((r, chunk))
        outs = [len(toks) if r.new else 1 for r, toks in segs]
        logits = self.slots.forward([(r.slot, r.length, toks) for r, toks in segs], outputs=outs)
        n_dec = sum(1 for r, _ in segs if r.new)
        if n_dec:
            self.forwards += 1
            self.rows += n_dec
        finished: set[int] = set()
        row = 0
        for (r, toks), n_out in zip(segs, outs, strict=True):
            seg_logits, row = logits[row:row + n_out], row + n_out
            if not r.new:  # prefilling
                r.length += len(toks)
                self.prefilled += len(toks)
                if r.length < len(r.ids):
                    continue  # more input to prefill
                emitted = [self._sample(seg_logits[0], r.rng)]
            elif len(toks) > 1:
                emitted = self._accept(seg_logits, toks[1:], r.rng)
                self.drafted += len(toks) - 1
                self.accepted += len(emitted) - 1
            else:
                emitted = [self._sample(seg_logits[0], r.rng)]
            done = False
            for tok, lp, ent in emitted:
                r.new.append(tok)
                r.logprobs.append(lp)
                r.entropies.append(ent)
                if tok in self.eos or len(r.new) >= r.limit:
                    done = True
                    break
            if r.drafter is not None and not done:
                r.drafter.extend(r.new[len(r.drafter.seq) - len(r.ids):])
            # the row covers ids + new[:-1]: the fed last token and the drafts kept before the newest token
            r.length = len(r.ids) + len(r.new) - 1
            if done:
                finished.add(id(r))
                self._retire(r)
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
        # the buffers in the weights' dtype: the keys and values are the projections' outputs, so bf16 buffers
        # lose nothing, and the attention (scaled_dot_product_attention, fp32 accumulation) reads half the
        # bytes. Measured on 2 AMX cores (SmolLM2-135M, 8 rows x 2,000 columns, a decode forward): 84 ms with
        # bf16 buffers, 99 ms with fp32 ones; 8 concurrent turns of a ~1,500-token context 11.1 s against 13.3 s
        self.kv_dtype = self.dtype
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
    def forward(self, segments: list[tuple[int, int, list[int]]], outputs: list[int] | None = None) -> torch.Tensor:
        """Feed each segment ``(slot, start, tokens)``: ``tokens`` at positions ``start, start+1, …`` of
        that row (``start`` = the columns the row already covers); write their keys and values; return
        the next-token logits after each segment's last token, ``[len(segments), vocab]`` (float32) —
        or, with ``outputs``, after each segment's last ``outputs[i]`` tokens, in segment order
        (``[sum(outputs), vocab]``: a speculative step's draft verification).

        Short segments (decoding: one token, or a token and its drafts; at most :data:`SHORT_SEGMENT`
        tokens) attend together, as one batched matmul over rows ``0 … max(their slots)`` and columns
        ``0 … their furthest position``, each query masked to its own row's causal columns: rows in that
        range that are not in a short segment compute dummy queries, discarded. A longer segment (a
        prefill chunk) attends causally over its own row."""
        if not segments:
            raise ValueError("forward of no segments")
        if outputs is not None and (len(outputs) != len(segments)
                                    or any(not 1 <= o <= len(t) for o, (_, _, t) in zip(outputs, segments))):
            raise ValueError(f"outputs {outputs}: one count per segment, each 1 … its length")
        need = max(start + len(toks) for _, start, toks in segments)
        if need > self.capacity:
            self._grow(need)
        dev, H, KVH, D = self.device, self.heads, self.kv_heads, self.head_dim
        G = H // KVH
        flat_tok, flat_slot, flat_pos, last = [], [], [], []
        dec_i, dec_slot, dec_j, dec_start, pre = [], [], [], {}, []  # short segments' tokens; prefill (slot, start, offset, L)
        for slot, start, toks in segments:
            if not toks:
                raise ValueError(f"an empty segment for slot {slot}")
            off = len(flat_tok)
            flat_tok += toks
            flat_slot += [slot] * len(toks)
            flat_pos += range(start, start + len(toks))
            n_out = 1 if outputs is None else outputs[len(last)]
            last.append(range(off + len(toks) - n_out, off + len(toks)))
            if len(toks) <= SHORT_SEGMENT:
                dec_i += range(off, off + len(toks))
                dec_slot += [slot] * len(toks)
                dec_j += range(len(toks))
                dec_start[slot] = start
            else:
                pre.append((slot, start, off, len(toks)))
        T = len(flat_tok)
        tok = torch.tensor(flat_tok, device=dev)[None]
        pos = torch.tensor(flat_pos, device=dev)
        slots_t = torch.tensor(flat_slot, device=dev)
        if dec_i:
            n, S = max(dec_slot) + 1, max(dec_j) + 1
            width = max(dec_start[s] + j for s, j in zip(dec_slot, dec_j)) + 1
            d_idx = torch.tensor(dec_i, device=dev)
            d_rows = torch.tensor(dec_slot, device=dev)
            d_j = torch.tensor(dec_j, device=dev)
            row_start = torch.zeros(n, dtype=torch.long, device=dev)  # other rows: dummy queries
            row_start[torch.tensor(list(dec_start), device=dev)] = torch.tensor(list(dec_start.values()), device=dev)
            # query j of row b sees columns 0 … start_b + j
            keep = torch.arange(width, device=dev)[None, None, :] <= (row_start[:, None] + torch.arange(S, device=dev))[:, :, None]
            dec_bias = torch.zeros(n, 1, 1, S, width, dtype=self.kv_dtype, device=dev).masked_fill(
                ~keep[:, None, None], float("-inf")).expand(n, 1, G, S, width).reshape(n, 1, G * S, width)
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
                # grouped-query attention of the short segments' queries: heads h = g·G + i share kv head g;
                # per row the G·S queries of a kv head in one matmul
                qd = torch.zeros(n, S, H, D, dtype=self.kv_dtype, device=dev)
                qd[d_rows, d_j] = q[d_idx]
                qd = qd.view(n, S, KVH, G, D).permute(0, 2, 3, 1, 4).reshape(n, KVH, G * S, D)
                o = torch.nn.functional.scaled_dot_product_attention(
                    qd, kb[:n, :, :width], vb[:n, :, :width], attn_mask=dec_bias, scale=a.scaling)  # [n, KVH, G·S, D]
                o = o.view(n, KVH, G, S, D).permute(0, 3, 1, 2, 4).reshape(n, S, H, D)
                out[d_idx] = o[d_rows, d_j]
            for (slot, start, off, L), mask in zip(pre, pre_masks, strict=True):
                qs = q[off:off + L].transpose(0, 1)[None]  # [1, H, L, D]
                o = torch.nn.functional.scaled_dot_product_attention(
                    qs, kb[slot:slot + 1, :, :start + L], vb[slot:slot + 1, :, :start + L], attn_mask=mask,
                    scale=a.scaling, enable_gqa=KVH != H)
                out[off:off + L] = o[0].transpose(0, 1)
            x = x + a.o_proj(out.reshape(1, T, H * D).to(self.dtype))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        x = m.norm(x[:, torch.tensor([i for r in last for i in r], device=dev)])  # only these need logits
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
