"""Prompt building: the context window the agent sees at a step.

Rules that matter for training and for safety:

* Human guidance enters as a ``user`` message ``<real_user>…</real_user>`` placed right before the
  assistant turn of the step it was delivered at. Only messages that came from the guidance store
  become ``<real_user>`` messages.
* Any ``<real_user>``-looking text produced by the model or by the environment is neutralized
  (``<real_user>`` → ``<real-user>``) before it enters a prompt, so it can never pose as a human.
* The same function rebuilds the context for the dataset builder, so a training sample is exactly
  the window the agent saw.
"""

from __future__ import annotations

import re
from typing import Any

from apollo.schema import Guidance, Step, Trajectory

SYSTEM_PROMPT = (
    "You are a research agent working in a sandboxed workspace. "
    "Tools: run_command(command, session_id, wait_for_completion), get_session_output(session_id), "
    "check_session_idle(session_id), open_file(path), edit_file(path, start_line, end_line, content), "
    "create_file(path, content), list_files(path), sleep(seconds), eval(), finish(). "
    "Messages in <real_user> tags come from a human supervisor: follow them. "
    "Answer with a short thought, then one <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>."
)

_REAL_USER_RE = re.compile(r"<(/?)\s*real_user\s*>", re.IGNORECASE)


def neutralize(text: str) -> str:
    """Defuse guidance tags in text that does not come from the guidance store."""
    return _REAL_USER_RE.sub(lambda m: f"<{m.group(1)}real-user>", text)


def guidance_message(g: Guidance) -> dict[str, str]:
    return {"role": "user", "content": f"<real_user>{neutralize(g.text)}</real_user>"}


def observation_content(step: Step) -> str:
    obs = step.observation
    text = neutralize(obs.text)
    if obs.truncated:
        text += "\n[output truncated]"
    return text


def initial_messages(task_description: str, system_prompt: str = SYSTEM_PROMPT) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": neutralize(task_description)},
    ]


SUMMARY_INSTRUCTION = (
    "The context is getting long. Summarize the work so far as a structured snapshot with these "
    "sections: State of the art (best result and how it was obtained); Hypotheses; Key knowledge; "
    "Reflection (one line per <real_user> message: what it asked and what was done); File state; "
    "Recent sessions; Recent actions; Experiment history. Answer with the snapshot only."
)


def summary_prompt(traj: Trajectory, summ: Any) -> list[dict[str, Any]]:
    """The exact prompt of a summarization call (used at run time and by the dataset builder)."""
    msgs = context_messages(traj, summ.covers_to, first_step=summ.covers_from,
                            summary_index=summ.prev_summary_index)
    msgs.append({"role": "user", "content": SUMMARY_INSTRUCTION})
    return msgs


SUMMARY_PREFIX = "Summary of the earlier work:\n"


def summary_message(text: str) -> dict[str, str]:
    return {"role": "user", "content": SUMMARY_PREFIX + neutralize(text)}


def step_messages(step: Step, *, with_observation: bool = True) -> list[dict[str, str]]:
    """The messages of one step: delivered guidance, the assistant turn, the tool observation."""
    msgs: list[dict[str, str]] = [guidance_message(g) for g in step.guidance]
    msgs.append({"role": "assistant", "content": neutralize(step.assistant_text)})
    if with_observation:
        msgs.append({"role": "tool", "content": observation_content(step)})
    return msgs


def context_messages(
    traj: Trajectory,
    upto_step: int,
    *,
    first_step: int = 0,
    summary_index: int | None = None,
    pending_guidance: list[Guidance] | None = None,
) -> list[dict[str, Any]]:
    """The prompt for step ``upto_step``: prefix, optional summary, verbatim steps, new guidance."""
    msgs: list[dict[str, Any]] = [dict(m) for m in traj.prefix_messages]
    if summary_index is not None:
        msgs.append(summary_message(traj.summaries[summary_index].text))
    for step in traj.steps[first_step:upto_step]:
        msgs.extend(step_messages(step))
    for g in pending_guidance or []:
        msgs.append(guidance_message(g))
    return msgs


def window_conversation(traj: Trajectory, first_step: int, last_step: int, summary_index: int | None):
    """A whole context window as one conversation + which assistant turns are trainable.

    Returns ``(messages, trainable)`` where ``trainable[i]`` says whether message ``i`` is an
    assistant action that carries loss (kept by the mask stage, or never masked).
    """
    msgs = context_messages(traj, first_step, first_step=first_step, summary_index=summary_index)
    trainable = [False] * len(msgs)
    for step in traj.steps[first_step : last_step + 1]:
        sm = step_messages(step, with_observation=step.index < last_step)
        for m in sm:
            msgs.append(m)
            keep = step.mask.keep if step.mask is not None else True
            trainable.append(m["role"] == "assistant" and keep and step.action.valid)
    return msgs, trainable
