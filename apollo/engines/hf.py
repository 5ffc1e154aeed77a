"""transformers backend: sampling with per-token ids, sampling logprobs and entropies."""

from __future__ import annotations

import time
from typing import Any

import torch

from apollo.data.tokenize import tokenize_prompt
from apollo.engines.base import Generation, LocalEngine


class HFEngine(LocalEngine):
    """``HFEngine(model_path, temperature=…, top_p=…, max_new_tokens=…, max_context=…,
    policy_version=…, dtype="float32", device=None, model=None, tokenizer=None)``: the sampling
    settings are :class:`~apollo.engines.base.LocalEngine`'s; ``model``/``tokenizer`` reuse loaded ones."""

    name = "hf"

    def _load(self, max_context: int | None, *, dtype: str = "float32", device: str | None = None,
              model: Any = None, tokenizer: Any = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
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

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        return tokenize_prompt(self.tokenizer, messages)

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return len(self.prompt_ids(messages))

    @torch.no_grad()
    def generate(self, messages: list[dict[str, Any]], *, seed: int | None = None) -> Generation:
        """Sample one assistant turn with the engine's own decode loop (KV cache).

        Each call draws from its own ``torch.Generator`` seeded with ``seed``, never from the
        global RNG: the engine is shared by worker threads, and a seed must reproduce the same
        tokens whatever runs beside it. Logprobs and entropies are those of the distribution
        sampled from (after temperature and top-p), as APPO/SAO importance ratios need.
        """
        t0 = time.perf_counter()
        ids = self.prompt_ids(messages)
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
        sample = self.temperature > 0
        eos = set(self.eos_ids)
        out = self.model(input_ids=torch.tensor([ids], device=self.device), use_cache=True)
        new: list[int] = []
        logprobs: list[float] = []
        entropies: list[float] = []
        for _ in range(min(self.max_new_tokens, budget)):
            logits = out.logits[0, -1].float()
            lp = torch.log_softmax(logits / self.temperature if sample else logits, dim=-1)
            if sample and self.top_p < 1.0:
                lp = _top_p(lp, self.top_p)
            p = lp.exp()
            tok = int(torch.multinomial(p, 1, generator=rng)) if sample else int(torch.argmax(lp))
            new.append(tok)
            logprobs.append(float(lp[tok]))
            entropies.append(float(-(p * torch.where(p > 0, lp, torch.zeros_like(lp))).sum()))
            if tok in eos:
                break
            out = self.model(input_ids=torch.tensor([[tok]], device=self.device),
                             past_key_values=out.past_key_values, use_cache=True)
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        return Generation(
            text=text,
            token_ids=new,
            logprobs=logprobs,
            entropies=entropies,
            prompt_tokens=len(ids),
            gen_time_s=time.perf_counter() - t0,
            finish_reason="stop" if new and new[-1] in self.eos_ids else "length",
        )


def _top_p(lp: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering of log-probabilities, renormalized (the smallest set with mass ≥ top_p)."""
    sorted_lp, order = torch.sort(lp, descending=True)
    cum = sorted_lp.exp().cumsum(-1)
    drop = cum - sorted_lp.exp() >= top_p  # tokens entirely beyond the nucleus
    sorted_lp = sorted_lp.masked_fill(drop, float("-inf"))
    out = torch.full_like(lp, float("-inf")).scatter(0, order, sorted_lp)
    return torch.log_softmax(out, dim=-1)
