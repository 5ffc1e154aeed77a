"""Policy backends: one ``generate(messages) -> Generation`` interface for every engine.

``hf`` (transformers, default for tests), ``vllm_server`` (a served vLLM policy, token-in/token-out,
weights updated in place; the rollout runtime's engine), ``vllm`` (in-process ``vllm.LLM``),
``openai`` (any OpenAI-compatible server), and ``scripted`` (a noisy scripted agent, used to make
behaviour-cloning demonstrations; it reads the conversation like a model would).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
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
    # e.g. policy_version (served engines); cached_tokens / prefill_tokens (input tokens served from
    # the engine's prefix cache / processed by this call) and prefix_tokens, where the engine reports them
    meta: dict[str, Any] = field(default_factory=dict)


class LocalEngine:
    """An engine that loads the policy's weights in this process (``hf``, ``vllm``): the sampling
    settings and the policy's identity are set here, the backend loads in :meth:`_load` (its own
    keyword arguments: dtype, device, …), which must set ``tokenizer`` and ``max_context``.

    ``max_context``: the context length in tokens (None: the model's own).
    """

    name = "local"

    def __init__(self, model_path: str | Path, *, temperature: float = 0.7, top_p: float = 1.0,
                 max_new_tokens: int = 192, max_context: int | None = None, policy_version: int = 0,
                 **backend: Any):
        self.model_path = str(model_path)
        self.policy_id = Path(self.model_path).name or self.model_path
        self.policy_version = policy_version
        self.temperature, self.top_p, self.max_new_tokens = temperature, top_p, max_new_tokens
        self._load(max_context, **backend)

    def _load(self, max_context: int | None, **backend: Any) -> None:
        raise NotImplementedError


class Engine(Protocol):
    """``generate(messages, seed=)``. Engines that can continue a partial assistant turn (``hf``,
    ``vllm_server``; what tree-rollout branches need) also take ``prefix=[token ids]``: the turn
    starts with those tokens, the result's ``token_ids``/``logprobs``/``entropies`` are the new
    tokens only and ``text`` is the whole turn."""

    policy_id: str
    policy_version: int
    name: str

    def generate(self, messages: list[dict[str, Any]], *, seed: int | None = None) -> Generation: ...

    def count_tokens(self, messages: list[dict[str, Any]]) -> int: ...


# The engines by name, as ``"module:Class"`` paths imported when one is built: the engine modules
# stand on this one (they import Generation / LocalEngine from here), so this one names them and
# never imports them. Another engine is one more entry.
ENGINES: dict[str, str] = {
    "hf": "apollo.engines.hf:HFEngine",
    "vllm": "apollo.engines.vllm_engine:VLLMEngine",
    "vllm_server": "apollo.engines.vllm_server:VLLMServerEngine",
    "openai": "apollo.engines.openai_engine:OpenAIEngine",
}


def make_engine(kind: str, model_path: str, **kwargs: Any) -> Engine:
    """Build an engine by name (``hf``, ``vllm_server`` (needs ``url=``), ``vllm`` or ``openai``)."""
    if kind not in ENGINES:
        raise ValueError(f"unknown engine '{kind}' (expected {', '.join(ENGINES)})")
    module, _, cls = ENGINES[kind].partition(":")
    return getattr(importlib.import_module(module), cls)(model_path, **kwargs)
