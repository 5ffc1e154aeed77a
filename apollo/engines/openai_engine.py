"""Any OpenAI-compatible endpoint (a vLLM or SGLang server, a hosted API).

Used for rollouts and for the LLM judge; nothing is trained through it. ``model_path`` is the
served model name; ``base_url`` / ``api_key`` default to ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from apollo.engines.base import Generation


class OpenAIEngine:
    name = "openai"

    def __init__(
        self,
        model_path: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float = 0.7,
        top_p: float = 1.0,
        max_new_tokens: int = 1024,
        policy_version: int = 0,
        timeout_s: float = 600.0,
        **_: Any,
    ):
        from openai import OpenAI

        self.policy_id = model_path
        self.policy_version = policy_version
        self.temperature, self.top_p, self.max_new_tokens = temperature, top_p, max_new_tokens
        self.client = OpenAI(
            base_url=base_url or os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"),
            api_key=api_key or os.environ.get("OPENAI_API_KEY", "EMPTY"),
            timeout=timeout_s,
        )

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return sum(len(str(m.get("content", ""))) // 4 + 4 for m in messages)  # estimate only

    def generate(self, messages: list[dict[str, Any]], *, seed: int | None = None) -> Generation:
        t0 = time.perf_counter()
        msgs = [
            {"role": "user", "content": m["content"]} if m["role"] == "tool" else m for m in messages
        ]
        resp = self.client.chat.completions.create(
            model=self.policy_id,
            messages=msgs,
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_new_tokens,
            seed=seed,
            logprobs=True,
        )
        choice = resp.choices[0]
        logprobs = None
        if choice.logprobs and choice.logprobs.content:
            logprobs = [float(t.logprob) for t in choice.logprobs.content]
        usage = getattr(resp, "usage", None)
        return Generation(
            text=choice.message.content or "",
            logprobs=logprobs,
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            gen_time_s=time.perf_counter() - t0,
            finish_reason=choice.finish_reason,
        )
