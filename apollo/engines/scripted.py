"""A policy backend driven by the noisy scripted agent of ``apollo.env.scripted``.

It reads the conversation like a model would (its own earlier tool calls, the tool observations,
``<real_user>`` guidance) and answers with a formatted tool call. Used to make the
behaviour-cloning demonstrations of the embedded tiny model, and as the scripted reference agent.
"""

from __future__ import annotations

import random
import re
import time
from typing import Any

from apollo.agent.actions import format_action, parse_action
from apollo.engines.base import Generation

_GUIDANCE_RE = re.compile(r"^<real_user>(.*)</real_user>$", re.DOTALL)


def history_from_messages(messages: list[dict[str, Any]]) -> tuple[list[tuple[str | None, dict, str]], list[str]]:
    """``[(tool, arguments, observation_text)]`` and guidance texts, read back from a prompt."""
    history: list[tuple[str | None, dict, str]] = []
    guidance: list[str] = []
    for m in messages:
        if m["role"] == "assistant":
            a = parse_action(m["content"])
            history.append((a.tool, a.arguments, ""))
        elif m["role"] == "tool" and history:
            tool, args, _ = history[-1]
            history[-1] = (tool, args, m["content"])
        elif m["role"] == "user":
            g = _GUIDANCE_RE.match(m["content"].strip())
            if g:
                guidance.append(g.group(1))
    return history, guidance


class ScriptedEngine:
    name = "scripted"

    def __init__(self, task: Any, *, noise: float = 0.0, seed: int = 0, tokenizer: Any = None,
                 policy_id: str = "scripted"):
        from apollo.env.scripted import ScriptedAgent

        self.policy_id = policy_id if noise == 0 else f"{policy_id}-noise{noise:g}"
        self.policy_version = 0
        self.tokenizer = tokenizer
        self.agent = ScriptedAgent(task, random.Random(seed), noise=noise)

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        if self.tokenizer is not None:
            return len(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
        return sum(len(str(m["content"])) for m in messages) // 3

    def generate(self, messages: list[dict[str, Any]], *, seed: int | None = None) -> Generation:
        t0 = time.perf_counter()
        history, guidance = history_from_messages(messages)
        thought, tool, args = self.agent.next_action(history, guidance=guidance)
        return Generation(text=format_action(thought, tool, args), gen_time_s=time.perf_counter() - t0)
