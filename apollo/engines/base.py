"""Policy backends: one ``generate(messages) -> Generation`` interface for every engine.

``hf`` (transformers, default for tests), ``vllm_server`` (a served vLLM policy, token-in/token-out,
weights updated in place; the rollout runtime's engine), ``vllm`` (in-process ``vllm.LLM``),
``openai`` (any OpenAI-compatible server), and ``scripted`` (a noisy scripted agent, used to make
behaviour-cloning demonstrations; it reads the conversation like a model would).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Generation:
    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None  # sampling logprobs of the generated tokens
    entropies: list[float] | None = None  # entropy of the sampling distribution per token
    prompt_tokens: int = 0
    gen_time_s: float = 0.0
    # "stop": the model ended its turn; "length": cut at max_new_tokens (no end token was produced);
    # None: the engine cannot tell
    finish_reason: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. policy_version (served engines)


class Engine(Protocol):
    policy_id: str
    policy_version: int
    name: str

    def generate(self, messages: list[dict[str, Any]], *, seed: int | None = None) -> Generation: ...

    def count_tokens(self, messages: list[dict[str, Any]]) -> int: ...


def make_engine(kind: str, model_path: str, **kwargs: Any) -> Engine:
    """Build an engine by name (``hf``, ``vllm_server`` (needs ``url=``), ``vllm`` or ``openai``)."""
    if kind == "hf":
        from apollo.engines.hf import HFEngine

        return HFEngine(model_path, **kwargs)
    if kind == "vllm":
        from apollo.engines.vllm_engine import VLLMEngine

        return VLLMEngine(model_path, **kwargs)
    if kind == "vllm_server":
        from apollo.engines.vllm_server import VLLMServerEngine

        return VLLMServerEngine(model_path, **kwargs)
    if kind == "openai":
        from apollo.engines.openai_engine import OpenAIEngine

        return OpenAIEngine(model_path, **kwargs)
    raise ValueError(f"unknown engine '{kind}' (expected hf, vllm_server, vllm or openai)")
