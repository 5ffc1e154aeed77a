"""Any OpenAI-compatible endpoint (a vLLM or SGLang server, a hosted API).

Used for rollouts and for the LLM judge; nothing is trained through it. ``model_path`` is the
served model name; ``base_url`` / ``api_key`` default to ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``.

Messages go out as they are, tool observations in the ``tool`` role (the server's chat template
renders them as ``<tool_response>`` blocks, as training does). Token counts (the agent's context
budget) come from a real tokenizer: ``tokenizer`` (a local HF tokenizer or its path), else the
model name when it is a local model directory, else the server's ``/tokenize`` route (vLLM and
SGLang have one); a server without one needs ``tokenizer``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx

from apollo.data.tokenize import tokenize_prompt
from apollo.engines.base import Generation


def _load_tokenizer(tok: Any) -> Any:
    if tok is None or not isinstance(tok, (str, Path)):
        return tok
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tok))


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
        tokenizer: Any = None,
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
        self.tokenizer = _load_tokenizer(tokenizer if tokenizer is not None else
                                         (model_path if Path(model_path).is_dir() else None))

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        if self.tokenizer is not None:
            return len(tokenize_prompt(self.tokenizer, messages))
        root = str(self.client.base_url).rstrip("/").removesuffix("/v1")
        try:
            r = httpx.post(root + "/tokenize", json={"model": self.policy_id, "messages": messages,
                                                     "add_generation_prompt": True}, timeout=30)
            r.raise_for_status()
            return int(r.json()["count"])
        except (httpx.HTTPError, KeyError, ValueError) as e:
            raise RuntimeError(f"openai engine: cannot count tokens of model '{self.policy_id}' at {root} "
                               f"(no /tokenize route: {type(e).__name__}); set the engine's tokenizer") from e

    def generate(self, messages: list[dict[str, Any]], *, seed: int | None = None) -> Generation:
        t0 = time.perf_counter()
        resp = self.client.chat.completions.create(
            model=self.policy_id,
            messages=messages,
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
