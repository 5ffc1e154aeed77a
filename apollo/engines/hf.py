"""transformers backend: sampling with per-token ids, sampling logprobs and entropies.

An optional prefix KV cache (``prefix_cache_tokens > 0``) keeps the key/value cache of earlier
calls (their prompt and generated tokens) and reuses the longest cached prefix of a new call's
input, as vLLM's automatic prefix caching does: a multi-turn episode re-processes only what is new
since its last turn, and a tree-rollout branch (``prefix=``) only what follows its branch point.
``engine.stats`` counts, over all calls, the input tokens, the tokens found in the cache and the
tokens actually prefilled (input − cached): what :mod:`benchmarks.bench_tree` measures.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections import OrderedDict
from typing import Any

import torch

from apollo.config import resolve_dtype
from apollo.data.tokenize import tokenize_prompt
from apollo.engines.base import Generation, LocalEngine
from apollo.engines.hf_batch import (DecodeBatcher, DecodeRequest, cache_of, kv_of, sample_token, slot_decode_supported,
                                     speculative_accept)

log = logging.getLogger(__name__)


class HFEngine(LocalEngine):
    """``HFEngine(model_path, temperature=…, top_p=…, max_new_tokens=…, max_context=…,
    policy_version=…, dtype="float32" (or "auto": :func:`apollo.config.resolve_dtype`), device=None, model=None, tokenizer=None,
    prefix_cache_tokens=0)``: the sampling settings are :class:`~apollo.engines.base.LocalEngine`'s;
    ``model``/``tokenizer`` reuse loaded ones; ``prefix_cache_tokens`` caps the prefix KV cache in
    tokens (0: off, every call prefills its whole input, as before); ``max_batch > 1`` runs
    concurrent calls together (:mod:`apollo.engines.hf_batch`, continuous batching with chunked
    prefill; there the prefix cache is the batcher's parked rows, ``prefix_cache_tokens > 0`` turns it
    on; 1: each call runs its own decode loop in its caller's thread); ``decode_threads``: the batching thread's
    torch intra-op threads; ``speculate``: prompt-lookup draft tokens per decode step of the batcher (0: off;
    the tokens keep the sampling distribution exactly, :func:`~apollo.engines.hf_batch.speculative_accept`)."""

    name = "hf"

    def _load(self, max_context: int | None, *, dtype: str = "float32", device: str | None = None,
              model: Any = None, tokenizer: Any = None, prefix_cache_tokens: int = 0, max_batch: int = 1,
              decode_threads: int = 1, speculate: int = 0) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.prefix_cache = PrefixKVCache(prefix_cache_tokens) if prefix_cache_tokens > 0 else None
        self._stats_lock = threading.Lock()
        self.stats = _zero_stats()

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = resolve_dtype(dtype, self.device)
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(self.model_path)
        self.model = model or AutoModelForCausalLM.from_pretrained(
            self.model_path, dtype=getattr(torch, dtype)
        ).to(self.device)
        self.model.eval()
        cfg_max = getattr(self.model.config, "max_position_embeddings", None) or 4096
        self.max_context = max_context or cfg_max
        eos = {self.tokenizer.eos_token_id}
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != self.tokenizer.unk_token_id:
            eos.add(im_end)
        self.eos_ids = sorted(i for i in eos if i is not None)
        self.batcher = None
        if int(max_batch) > 1 and not slot_decode_supported(self.model):
            log.warning("hf engine: continuous batching does not drive %s models; each call decodes alone",
                        self.model.config.model_type)
        elif int(max_batch) > 1:
            self.batcher = DecodeBatcher(self.model, max_batch=int(max_batch), eos_ids=self.eos_ids,
                                         sample=self._sample, device=self.device, threads=decode_threads,
                                         max_len=self.max_context, reuse_prefix=self.prefix_cache is not None,
                                         speculate=int(speculate), accept=self._accept)

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        return tokenize_prompt(self.tokenizer, messages)

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return len(self.prompt_ids(messages))

    def reset_stats(self) -> dict[str, int]:
        """Zero the token counters (and return the old ones)."""
        with self._stats_lock:
            old, self.stats = self.stats, _zero_stats()
        return old

    def clear_prefix_cache(self) -> None:
        if self.prefix_cache is not None:
            self.prefix_cache.clear()
        if self.batcher is not None:
            self.batcher.clear()

    @torch.no_grad()
    def generate(self, messages: list[dict[str, Any]], *, seed: int | None = None,
                 prefix: list[int] | None = None) -> Generation:
        """Sample one assistant turn with the engine's own decode loop (KV cache).

        Each call draws from its own ``torch.Generator`` seeded with ``seed``, never from the
        global RNG: the engine is shared by worker threads, and a seed must reproduce the same
        tokens whatever runs beside it. Logprobs and entropies are those of the distribution
        sampled from (after temperature and top-p), as APPO/SAO importance ratios need.

        ``prefix``: token ids the assistant turn already starts with (a tree-rollout branch
        regenerates after ``response[:t+1]``); the model continues them. Then ``token_ids``,
        ``logprobs`` and ``entropies`` are those of the new tokens only, ``text`` is the whole
        turn (prefix and continuation decoded together) and ``meta["prefix_tokens"]`` its length.
        ``meta["cached_tokens"]``/``meta["prefill_tokens"]``: input tokens found in the prefix KV
        cache / processed by this call.
        """
        t0 = time.perf_counter()
        pre = [int(t) for t in (prefix or [])]
        ids = self.prompt_ids(messages) + pre
        budget = self.max_context - len(ids)
        if budget <= 8:
            raise ValueError(
                f"prompt has {len(ids)} tokens, over the model context {self.max_context}"
            )
        rng = torch.Generator(device=self.device)
        if seed is not None:
            rng.manual_seed(int(seed) % (2**63))
        else:
            rng.seed()
        limit = min(self.max_new_tokens, budget)
        if self.batcher is not None:
            req = self.batcher.submit(DecodeRequest(ids=ids, limit=limit, rng=rng))
            reused, new, logprobs, entropies = req.reused, req.new, req.logprobs, req.entropies
        else:
            reused, new, logprobs, entropies = self._decode(ids, limit, rng)
        with self._stats_lock:
            st = self.stats
            st["calls"] += 1
            st["input_tokens"] += len(ids)
            st["cached_tokens"] += reused
            st["prefill_tokens"] += len(ids) - reused
            st["generated_tokens"] += len(new)
        text = self.tokenizer.decode(pre + new, skip_special_tokens=True)
        return Generation(
            text=text,
            token_ids=new,
            logprobs=logprobs,
            entropies=entropies,
            prompt_tokens=len(ids),
            gen_time_s=time.perf_counter() - t0,
            finish_reason="stop" if new and new[-1] in self.eos_ids else "length",
            meta={"prefix_tokens": len(pre), "cached_tokens": reused, "prefill_tokens": len(ids) - reused},
        )


    def _sample(self, logits: torch.Tensor, rng: torch.Generator) -> tuple[int, float, float]:
        """One token from next-token ``logits`` under the engine's temperature and top-p."""
        return sample_token(logits, rng, self.temperature, self.top_p)

    def _accept(self, logits: torch.Tensor, draft: list[int], rng: torch.Generator) -> list[tuple[int, float, float]]:
        """Speculative verification of ``draft`` under the engine's temperature and top-p."""
        return speculative_accept(logits, draft, rng, self.temperature, self.top_p)

    def _prefill(self, ids: list[int]) -> tuple[int, torch.Tensor, list]:
        """Run the input (what the prefix cache does not cover): (cached tokens, last logits, KV)."""
        reused, past = self.prefix_cache.lookup(ids) if self.prefix_cache is not None else (0, None)
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([ids[reused:]], device=self.device), past_key_values=past,
                             use_cache=True, logits_to_keep=1)
        return reused, out.logits[0, -1].float(), kv_of(out.past_key_values)

    @torch.no_grad()
    def _decode(self, ids: list[int], limit: int, rng: torch.Generator) -> tuple[int, list[int], list[float], list[float]]:
        """The single-sequence decode loop (in the caller's thread)."""
        eos = set(self.eos_ids)
        reused, logits, kv = self._prefill(ids)
        past = cache_of(kv)
        new: list[int] = []
        logprobs: list[float] = []
        entropies: list[float] = []
        for _ in range(limit):
            tok, lp, ent = self._sample(logits, rng)
            new.append(tok)
            logprobs.append(lp)
            entropies.append(ent)
            if tok in eos:
                break
            out = self.model(input_ids=torch.tensor([[tok]], device=self.device), past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[0, -1].float()
        if self.prefix_cache is not None:  # what the KV cache covers: the input and the tokens fed back
            self.prefix_cache.store((ids + new)[:past.get_seq_length()], past)
        return reused, new, logprobs, entropies


def _zero_stats() -> dict[str, int]:
    return {"calls": 0, "input_tokens": 0, "cached_tokens": 0, "prefill_tokens": 0, "generated_tokens": 0}


class PrefixKVCache:
    """Key/value caches of earlier calls, keyed by the token ids they cover (LRU, capped in tokens).

    :meth:`lookup` finds the entry sharing the longest prefix with a new input and returns a copy
    cropped to that prefix (never the whole input: the last input token must run to give the
    next-token logits); :meth:`store` keeps a finished call's cache. An entry whose ids are a
    prefix of a newer one is dropped (the newer one serves both). Thread-safe; entries are copied
    on lookup, so concurrent calls never share a cache object.
    """

    def __init__(self, max_tokens: int):
        self.max_tokens = int(max_tokens)
        self._entries: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._tokens = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._tokens = 0

    def lookup(self, ids: list[int]) -> tuple[int, Any]:
        """``(n, cache)``: the first ``n`` ids are covered by ``cache`` (a private copy); ``(0, None)``."""
        with self._lock:
            best, best_key = 0, None
            for key in self._entries:
                n = _common_prefix(key, ids)
                if n > best:
                    best, best_key = n, key
            n = min(best, len(ids) - 1)
            if best_key is None or n <= 0:
                return 0, None
            self._entries.move_to_end(best_key)
            cache = copy.deepcopy(self._entries[best_key])
        extra = cache.get_seq_length() - n
        if extra > 0:
            cache.crop(-extra)  # drop the last `extra` positions
        return n, cache

    def store(self, ids: list[int], cache: Any) -> None:
        key = tuple(ids)
        if not key or len(key) > self.max_tokens:
            return
        with self._lock:
            for old in [k for k in self._entries if len(k) <= len(key) and key[:len(k)] == k]:
                self._tokens -= len(old)
                del self._entries[old]
            self._entries[key] = cache
            self._tokens += len(key)
            while self._tokens > self.max_tokens and self._entries:
                old, _ = self._entries.popitem(last=False)
                self._tokens -= len(old)


def _common_prefix(a: tuple[int, ...], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == tuple(b[:n]):
        return n
    lo, hi = 0, n  # binary search on the first mismatch (prefix equality is monotone)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == tuple(b[:mid]):
            lo = mid
        else:
            hi = mid - 1
    return lo
