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
from apollo.agent.prompt import SUMMARY_INSTRUCTION, SUMMARY_PREFIX
from apollo.data.tokenize import tokenize_prompt
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


def snapshot(messages: list[dict[str, Any]]) -> str:
    """A deterministic structured snapshot of the conversation (the scripted agent's summary)."""
    history, guidance = history_from_messages(messages)
    earlier = next((m["content"] for m in messages
                    if m["role"] == "user" and m["content"].startswith(SUMMARY_PREFIX)), "")
    scores = [re.search(r"overall_score=([0-9.]+)", obs) for _, _, obs in history]
    best = max((float(m.group(1)) for m in scores if m), default=None)
    files = sorted({str(a.get("path")) for t, a, _ in history if t in ("edit_file", "create_file") and a.get("path")})
    sessions = sorted({str(a.get("session_id", "default")) for t, a, _ in history if t == "run_command"})
    commands = [a.get("command", "") for t, a, _ in history if t == "run_command"]
    lines = [
        f"State of the art: best score {best:g}." if best is not None else "State of the art: not evaluated yet.",
        "Hypotheses: the provided scripts solve the task with the right options.",
        "Key knowledge: " + ("; ".join(c for c in commands[-2:]) if commands else "workspace listed, scripts read."),
        "Reflection: " + (" | ".join(f"asked: {g[:80]}; followed it" for g in guidance) if guidance else "none."),
        "File state: " + (", ".join(files) if files else "unchanged."),
        "Recent sessions: " + (", ".join(sessions) if sessions else "none."),
        "Recent actions: " + ", ".join(str(t) for t, _, _ in history[-4:]),
        "Experiment history: " + ("earlier summary kept. " if earlier else "") + f"{len(history)} actions.",
    ]
    return "\n".join(lines)


class ScriptedEngine:
    name = "scripted"

    def __init__(self, task: Any, *, noise: float = 0.0, seed: int = 0, tokenizer: Any = None,
                 policy_id: str = "scripted", key_noise: float = 0.0):
        from apollo.env.scripted import ScriptedAgent

        self.policy_id = policy_id if noise == 0 else f"{policy_id}-noise{noise:g}"
        self.policy_version = 0
        self.tokenizer = tokenizer
        self.agent = ScriptedAgent(task, random.Random(seed), noise=noise, key_noise=key_noise)
        self._memory: list[tuple[str | None, dict, str]] = []

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        if self.tokenizer is not None:
            return len(tokenize_prompt(self.tokenizer, messages))
        return sum(len(str(m["content"])) for m in messages) // 3

    def generate(self, messages: list[dict[str, Any]], *, seed: int | None = None) -> Generation:
        t0 = time.perf_counter()
        if messages and messages[-1]["role"] == "user" and messages[-1]["content"] == SUMMARY_INSTRUCTION:
            return Generation(text=snapshot(messages[:-1]), gen_time_s=time.perf_counter() - t0)
        history, guidance = history_from_messages(messages)
        if any(m["role"] == "user" and m["content"].startswith(SUMMARY_PREFIX) for m in messages):
            # the context was summarized: the agent's own memory holds the steps that left it
            keep = max(0, len(self._memory) + 1 - len(history))
            history = self._memory[:keep] + history
        self._memory = history
        thought, tool, args = self.agent.next_action(history, guidance=guidance)
        return Generation(text=format_action(thought, tool, args), gen_time_s=time.perf_counter() - t0)


def run_scripted(task: Any, *, noise: float = 0.0, seed: int = 0, annotate: bool = False,
                 annotator_config: Any = None, max_steps: int | None = None, root: Any = None,
                 tokenizer: Any = None, trajectory_id: str | None = None, meta: dict[str, Any] | None = None,
                 **config: Any) -> tuple[Any, ScriptedEngine]:
    """One episode of the scripted agent in the one episode loop; ``(trajectory, engine)``.

    ``annotate``: the simulated annotator watches inline (:class:`~apollo.agent.inline_annotator.
    InlineAnnotator`, with ``annotator_config``, an :class:`~apollo.guidance.annotator.AnnotatorConfig`,
    when given), so its guidance reaches the agent at the next step, deterministically.
    ``engine.agent.mistakes`` lists the mistakes the agent made.
    """
    from apollo.agent.inline_annotator import InlineAnnotator
    from apollo.agent.react import AgentConfig, run_episode

    engine = ScriptedEngine(task, noise=noise, seed=seed, tokenizer=tokenizer)
    cfg = AgentConfig(max_steps=max_steps, **config)
    channel = InlineAnnotator(task, annotator_config) if annotate else None
    try:
        traj = run_episode(task, engine, guidance=channel, config=cfg, seed=seed, workspace_root=root,
                           trajectory_id=trajectory_id, meta=meta)
    finally:
        if channel is not None:
            channel.close()
    traj.meta["mistakes"] = list(engine.agent.mistakes)
    return traj, engine


def run_reference(task: Any, root: Any = None) -> float:
    """Final score of the reference plan: the scripted agent (noise 0) in the one episode loop."""
    return run_scripted(task, noise=0.0, seed=0, root=root)[0].final_score or 0.0
