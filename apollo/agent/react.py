"""The ReAct loop: think → act (one tool call) → observe, with asynchronous human guidance.

Guidance never interrupts generation: a generation in flight always completes; at each *step
boundary* (before building the next prompt) the agent takes whatever guidance is due from the
guidance channel and adds it as ``<real_user>…</real_user>`` user messages. Steps are posted to the
channel after they finish, so annotators can watch the trajectory live.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from apollo.agent.actions import parse_action
from apollo.agent.prompt import context_messages, initial_messages, summary_prompt
from apollo.engines.base import Engine
from apollo.schema import (
    ContextRef,
    EvalRecord,
    Guidance,
    Observation,
    Step,
    Summary,
    TokenTrace,
    Trajectory,
    summary_mask,
)

log = logging.getLogger(__name__)


class GuidanceChannel(Protocol):
    """apollo.guidance.store.GuidanceStore (direct) or apollo.guidance.client.GuidanceClient (HTTP)."""

    def register(self, trajectory_id: str, task_id: str, *, meta: dict[str, Any] | None = None) -> Any: ...
    def post_step(self, trajectory_id: str, step_index: int, tool: str | None,
                  arguments: dict[str, Any], observation: str, *, step: Step | None = None,
                  summary: Summary | None = None) -> Any: ...
    def take_pending(self, trajectory_id: str, step_index: int) -> list[Guidance]: ...
    def end(self, trajectory_id: str, status: str = "finished", *, final_score: float | None = None) -> None: ...


@dataclass
class AgentConfig:
    max_steps: int | None = None  # None: the task's own budget
    max_wall_s: float | None = None
    context_tokens: int = 4096  # η_L: at this many prompt tokens the earlier half is summarized
    summarize: bool = True
    command_timeout_s: float = 20.0
    max_output_chars: int = 1500


def _summarize(engine: Engine, traj: Trajectory, step_index: int, first_step: int,
               summary_index: int | None, seed: int) -> tuple[int, int]:
    """The policy condenses the earlier half of the window; returns the new (first_step, summary)."""
    mid = first_step + max(1, (step_index - first_step) // 2)
    summ = Summary(index=len(traj.summaries), covers_from=first_step, covers_to=mid,
                   prev_summary_index=summary_index, before_step=step_index, text="")
    prompt = summary_prompt(traj, summ)
    gen = engine.generate(prompt, seed=seed)
    summ.text = gen.text.strip()  # what the model wrote (also what the agent sees next): no placeholder
    summ.mask = summary_mask(summ.text, gen.finish_reason, len(gen.token_ids or []))
    summ.prompt_tokens = gen.prompt_tokens or engine.count_tokens(prompt)
    if gen.token_ids is not None:
        summ.tokens = TokenTrace(token_ids=gen.token_ids, logprobs=gen.logprobs, entropies=gen.entropies)
    traj.summaries.append(summ)
    return mid, summ.index


def _fit_window(engine: Engine, traj: Trajectory, step_index: int, first_step: int,
                summary_index: int | None, pending: list[Guidance], budget: int, seed: int,
                summarize: bool) -> tuple[list[dict[str, Any]], int, int | None, int]:
    """Build the prompt; when it reaches the budget (η_L), summarize the earlier half.

    If a window is still over budget after summarizing (or summarization is off), the window
    slides; ``ContextRef`` records exactly which steps and summary the agent saw.
    """
    summarized = False
    while True:
        msgs = context_messages(traj, step_index, first_step=first_step, summary_index=summary_index,
                                pending_guidance=pending)
        n = engine.count_tokens(msgs)
        if n < budget or first_step >= step_index:
            return msgs, first_step, summary_index, n
        if summarize and not summarized and step_index - first_step >= 2:
            first_step, summary_index = _summarize(engine, traj, step_index, first_step, summary_index,
                                                   seed * 7919 + step_index)
            summarized = True
            continue
        first_step = min(step_index, first_step + max(1, (step_index - first_step) // 2))


def run_episode(
    task: Any,
    engine: Engine,
    *,
    guidance: GuidanceChannel | None = None,
    config: AgentConfig | None = None,
    seed: int = 0,
    trajectory_id: str | None = None,
    workspace_root: Any = None,
    meta: dict[str, Any] | None = None,
) -> Trajectory:
    """Roll out one trajectory of ``engine`` on ``task``; always ends with a forced final eval."""
    from apollo.env.workspace import Workspace

    cfg = config or AgentConfig()
    tid = trajectory_id or f"{task.task_id}-{uuid.uuid4().hex[:10]}"
    max_steps = cfg.max_steps or task.max_steps
    max_wall = cfg.max_wall_s or task.max_wall_s
    traj = Trajectory(
        trajectory_id=tid,
        task_id=task.task_id,
        split=task.split,
        domain=task.domain,
        policy_id=engine.policy_id,
        policy_version=engine.policy_version,
        engine=engine.name,
        seed=seed,
        started_at=time.time(),
        prefix_messages=initial_messages(task.description),
        meta=dict(meta or {}),
        task_facts=task.facts() if hasattr(task, "facts") else None,  # what the mask detectors need
    )
    if guidance is not None:  # the prefix lets the annotator UI rebuild every context window exactly
        guidance.register(tid, task.task_id, meta={
            "prefix_messages": traj.prefix_messages, "domain": task.domain, "split": task.split,
            "max_steps": max_steps, "policy_id": engine.policy_id})
    first_step, summary_index = 0, None
    t_start = time.monotonic()
    with Workspace(task, root=workspace_root, command_timeout_s=cfg.command_timeout_s,
                   max_output_chars=cfg.max_output_chars) as ws:
        try:
            for i in range(max_steps):
                if time.monotonic() - t_start > max_wall:
                    traj.finish_reason = "time_budget"
                    break
                step_t0 = time.time()
                # step boundary: due guidance enters the context now, never mid-generation
                pending = guidance.take_pending(tid, i) if guidance is not None else []
                msgs, first_step, summary_index, n_prompt = _fit_window(
                    engine, traj, i, first_step, summary_index, pending, cfg.context_tokens, seed,
                    cfg.summarize,
                )
                gen = engine.generate(msgs, seed=seed * 100_003 + i)
                action = parse_action(gen.text)
                if action.valid:
                    result = ws.call(action.tool, action.arguments, step=i)
                    obs, ev, done = result.observation, result.eval, result.done
                else:
                    obs = Observation(text=f"Invalid action: {action.parse_error}.", error=True)
                    ev, done = None, False
                tokens = None
                if gen.token_ids is not None:
                    tokens = TokenTrace(token_ids=gen.token_ids, logprobs=gen.logprobs,
                                        entropies=gen.entropies)
                step = Step(
                    index=i,
                    assistant_text=gen.text,
                    action=action,
                    observation=obs,
                    guidance=pending,
                    tokens=tokens,
                    context=ContextRef(first_step=first_step, summary_index=summary_index),
                    prompt_tokens=gen.prompt_tokens or n_prompt,
                    started_at=step_t0,
                    gen_time_s=gen.gen_time_s,
                    wall_time_s=time.time() - step_t0,
                )
                traj.steps.append(step)
                if ev is not None:
                    traj.evals.append(ev)
                if guidance is not None:
                    guidance.post_step(tid, i, action.tool, action.arguments, obs.text, step=step,
                                       summary=traj.summaries[summary_index] if summary_index is not None else None)
                if done:
                    traj.finish_reason = "finish"
                    break
            else:
                traj.finish_reason = "max_steps"
        except Exception as e:  # a crash of the policy or tools ends the trajectory, not the stage
            log.exception("trajectory %s failed at step %d", tid, len(traj.steps))
            traj.finish_reason = "error"
            traj.meta["error"] = f"{type(e).__name__}: {e}"
        final = ws.final_eval(step=max(len(traj.steps) - 1, 0))
        traj.evals.append(EvalRecord(**{**final.model_dump(), "forced": True}))
    traj.record_scores()
    traj.ended_at = time.time()
    if guidance is not None:
        guidance.end(tid, "error" if traj.finish_reason == "error" else "finished", final_score=traj.final_score)
    return traj
