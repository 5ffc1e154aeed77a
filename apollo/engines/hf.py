"""transformers backend: sampling with per-token ids, sampling logprobs and entropies."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from apollo.data.tokenize import tokenize_prompt
from apollo.engines.base import Generation


class HFEngine:
    name = "hf"

    def __init__(
        self,
        model_path: str | Path,
        *,
        temperature: float = 0.7,
        top_p: float = 1.0,
        max_new_tokens: int = 192,
        max_context: int | None = None,
        policy_version: int = 0,
        dtype: str = "float32",
        device: str | None = None,
        model: Any = None,
        tokenizer: Any = None,
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_path = str(model_path)
        self.policy_id = Path(self.model_path).name or self.model_path
        self.policy_version = policy_version
        self.temperature = temperature
        self.top_p = top_p
        self.max_new_tokens = max_new_tokens
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
        t0 = time.perf_counter()
        ids = self.prompt_ids(messages)
        budget = self.max_context - len(ids)
        if budget <= 8:
            raise ValueError(
                f"prompt has {len(ids)} tokens, over the model context {self.max_context}"
            )
        if seed is not None:
            torch.manual_seed(seed)
        input_ids = torch.tensor([ids], device=self.device)
        do_sample = self.temperature > 0
        out = self.model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=min(self.max_new_tokens, budget),
            do_sample=do_sample,
            temperature=self.temperature if do_sample else None,
            top_p=self.top_p if do_sample else None,
            top_k=0 if do_sample else None,
            eos_token_id=self.eos_ids,
            pad_token_id=self.tokenizer.pad_token_id or self.eos_ids[0],
            output_scores=True,
            return_dict_in_generate=True,
        )
        new = out.sequences[0, len(ids):].tolist()
        logprobs, entropies = [], []
        for tok, scores in zip(new, out.scores):
            lp = torch.log_softmax(scores[0].float(), dim=-1)
            logprobs.append(float(lp[tok]))
            p = lp.exp()
            entropies.append(float(-(p * torch.where(p > 0, lp, torch.zeros_like(lp))).sum()))
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
