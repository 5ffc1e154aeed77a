"""The ReAct loop: think → act (one tool call) → observe, with asynchronous human guidance.

Guidance never interrupts generation: a generation in flight always completes; at each *step
boundary* (before building the next prompt) the agent takes whatever guidance is due from the
guidance channel and adds it as ``<real_user>…</real_user>`` user messages. Steps are posted to the
channel after they finish, so annotators can watch the trajectory live.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from apollo.agent.actions import parse_action
from apollo.agent.prompt import context_messages, initial_messages, summary_prompt
from apollo.engines.base import Engine, Generation
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
    max_wall_s: float | None = None  # None: the task's; working time, the engine's generation time excluded
    context_tokens: int = 4096  # η_L: at this many prompt tokens the earlier half is summarized
    summarize: bool = True
    command_timeout_s: float = 20.0
    max_output_chars: int = 1500


@dataclass
class EpisodeStart:
    """An episode that continues another one's state from a step boundary (a tree-rollout branch,
    :mod:`apollo.rl.tree`): steps ``0..k-1`` are taken as they were, step ``k`` regenerates after
    ``prefix`` (the first tokens of the original step ``k``'s response), then the loop goes on.

    ``steps``/``summaries``/``evals``: the records before step ``k`` (copied into the new
    trajectory); ``first_step``/``summary_index``: step ``k``'s context window, ``guidance``: what
    was delivered before step ``k`` (so its prompt is the original's, token for token);
    ``prefix_logprobs``/``prefix_entropies``: the original's values for the prefix tokens (the
    record of step ``k`` holds prefix + continuation); ``restore(ws)``: puts the fresh workspace
    in the state it had before step ``k``; ``evals_used``: evals already spent; ``elapsed_s``: working
    time already spent (the parent's wall time before step ``k`` minus its engine waits; counts
    against the task's budget).
    """

    steps: list[Step]
    prefix: list[int]
    summaries: list[Summary] = field(default_factory=list)
    evals: list[EvalRecord] = field(default_factory=list)
    first_step: int = 0
    summary_index: int | None = None
    guidance: list[Guidance] = field(default_factory=list)
    prefix_logprobs: list[float] | None = None
    prefix_entropies: list[float] | None = None
    restore: Callable[[Any], None] | None = None
    evals_used: int = 0
    elapsed_s: float = 0.0

    @property
    def step_index(self) -> int:
        return len(self.steps)


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


def run_episode(task: Any, engine: Engine, **kw: Any) -> Trajectory:
    """Roll out one trajectory of ``engine`` on ``task`` (blocking): :func:`arun_episode` with the
    same keyword arguments (``guidance``, ``config``, ``seed``, ``trajectory_id``, ``workspace_root``,
    ``meta``), run to completion on a fresh event loop."""
    return asyncio.run(arun_episode(task, engine, **kw))


async def _generate(engine: Engine, msgs: list[dict[str, Any]], seed: int,
                    prefix: list[int] | None = None) -> Generation:
    kw: dict[str, Any] = {"seed": seed}
    if prefix is not None:  # a branch: only engines that continue a partial turn take it (hf, vllm_server)
        kw["prefix"] = prefix
    agen = getattr(engine, "agenerate", None)
    if agen is not None:  # a served engine: the request waits on the network, not on a thread
        return await agen(msgs, **kw)
    return await asyncio.to_thread(engine.generate, msgs, **kw)


def _trace(gen: Generation, engine: Engine, start: EpisodeStart | None) -> TokenTrace | None:
    """The step's token record; after a branch ``prefix`` it is prefix + continuation."""
    if gen.token_ids is None:
        return None
    version = gen.meta.get("policy_version", engine.policy_version)
    if start is None:
        return TokenTrace(token_ids=gen.token_ids, logprobs=gen.logprobs, entropies=gen.entropies,
                          policy_version=version)

    def join(pre: list[float] | None, new: list[float] | None) -> list[float] | None:
        return None if pre is None or new is None else list(pre) + list(new)

    return TokenTrace(token_ids=list(start.prefix) + list(gen.token_ids),
                      logprobs=join(start.prefix_logprobs, gen.logprobs),
                      entropies=join(start.prefix_entropies, gen.entropies), policy_version=version)


async def arun_episode(
    task: Any,
    engine: Engine,
    *,
    guidance: GuidanceChannel | None = None,
    config: AgentConfig | None = None,
    seed: int = 0,
    trajectory_id: str | None = None,
    workspace_root: Any = None,
    meta: dict[str, Any] | None = None,
    start: EpisodeStart | None = None,
    on_boundary: Callable[[Any, int], None] | None = None,
) -> Trajectory:
    """The one episode loop (every engine, the scripted agent included); always ends with a forced
    final eval.

    ``start``: continue from another episode's step boundary (:class:`EpisodeStart`, tree-rollout
    branches). ``on_boundary(ws, i)``: called (in a worker thread) at every step boundary before
    step ``i`` is prompted, e.g. to snapshot the workspace (:class:`apollo.env.snapshot.WorkspaceSnapshots`).

    A coroutine so that many episodes run in flight on one event loop (:mod:`apollo.runtime`):
    generation awaits the engine (``agenerate`` when it has one, else ``generate`` in a worker
    thread), tool calls, guidance-channel calls and prompt building (tokenization, summarization)
    run in worker threads because they block on processes, files and CPU. Each step records its
    generation time and its tool time.

    A crash inside the episode (a tool, the workspace, a bad generation) ends the trajectory with
    ``finish_reason="error"`` and ``meta["error"]``: recorded, never trained on. An engine that
    cannot be reached (:class:`~apollo.engines.vllm_server.EngineUnavailable`) is not a crash of
    the episode: it propagates and fails the stage.
    """
    from apollo.engines.vllm_server import EngineUnavailable
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
    if start is not None:
        traj.steps = [st.model_copy(deep=True) for st in start.steps]
        traj.summaries = [sm.model_copy(deep=True) for sm in start.summaries]
        traj.evals = [ev.model_copy(deep=True) for ev in start.evals]
    if guidance is not None:  # the prefix lets the annotator UI rebuild every context window exactly
        await asyncio.to_thread(guidance.register, tid, task.task_id, meta={
            "prefix_messages": traj.prefix_messages, "domain": task.domain, "split": task.split,
            "max_steps": max_steps, "policy_id": engine.policy_id})
    first_step, summary_index = (start.first_step, start.summary_index) if start is not None else (0, None)
    first_i = start.step_index if start is not None else 0
    # the working-time budget (the task's max_working_time) counts the episode's wall time minus its waits
    # for the policy's engine: on a shared CPU that wait depends on how many episodes decode together
    # (10 SmolLM2 episodes in flight on 2 cores: ~12 s a turn, 8 of 18 rollouts ran out of 300 s), so a
    # wall-clock budget would make the score a function of the machine and of `workers`
    t_start = time.monotonic() - (start.elapsed_s if start is not None else 0.0)
    engine_wait = 0.0
    ws = Workspace(task, root=workspace_root, command_timeout_s=cfg.command_timeout_s,
                   max_output_chars=cfg.max_output_chars)
    await asyncio.to_thread(ws.__enter__)
    try:
        try:
            if start is not None:
                if start.restore is not None:
                    await asyncio.to_thread(start.restore, ws)
                ws.evals_used = start.evals_used
            for i in range(first_i, max_steps):
                if time.monotonic() - t_start - engine_wait > max_wall:
                    traj.finish_reason = "time_budget"
                    break
                if on_boundary is not None:
                    await asyncio.to_thread(on_boundary, ws, i)
                step_t0 = time.time()
                branching = start is not None and i == first_i
                # step boundary: due guidance enters the context now, never mid-generation
                if branching:  # the original step's guidance: the same prompt, token for token
                    pending = list(start.guidance)
                else:
                    pending = (await asyncio.to_thread(guidance.take_pending, tid, i)) if guidance is not None else []
                msgs, first_step, summary_index, n_prompt = await asyncio.to_thread(
                    _fit_window, engine, traj, i, first_step, summary_index, pending, cfg.context_tokens,
                    seed, cfg.summarize,
                )
                gen_t0 = time.monotonic()
                gen = await _generate(engine, msgs, seed * 100_003 + i, start.prefix if branching else None)
                engine_wait += time.monotonic() - gen_t0
                action = parse_action(gen.text)
                tool_t0 = time.perf_counter()
                if action.valid:
                    result = await asyncio.to_thread(ws.call, action.tool, action.arguments, i)
                    obs, ev, done = result.observation, result.eval, result.done
                else:
                    obs = Observation(text=f"Invalid action: {action.parse_error}.", error=True)
                    ev, done = None, False
                tool_s = time.perf_counter() - tool_t0
                tokens = _trace(gen, engine, start if branching else None)
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
                    tool_time_s=tool_s,
                    wall_time_s=time.time() - step_t0,
                )
                traj.steps.append(step)
                if ev is not None:
                    traj.evals.append(ev)
                if guidance is not None:
                    await asyncio.to_thread(
                        guidance.post_step, tid, i, action.tool, action.arguments, obs.text, step=step,
                        summary=traj.summaries[summary_index] if summary_index is not None else None)
                if done:
                    traj.finish_reason = "finish"
                    break
            else:
                traj.finish_reason = "max_steps"
        except EngineUnavailable:
            raise
        except Exception as e:  # a crash of the policy or tools ends the trajectory, not the stage
            log.exception("trajectory %s crashed at step %d", tid, len(traj.steps))
            traj.finish_reason = "error"
            traj.meta["error"] = f"{type(e).__name__}: {e}"
        final = await asyncio.to_thread(ws.final_eval, max(len(traj.steps) - 1, 0))
        traj.evals.append(EvalRecord(**{**final.model_dump(), "forced": True}))
    except BaseException:
        if guidance is not None:
            await asyncio.to_thread(guidance.end, tid, "error")
        raise
    finally:
        await asyncio.to_thread(ws.__exit__, None, None, None)
    traj.policy_version = _first_version(traj, engine.policy_version)
    traj.record_scores()
    traj.ended_at = time.time()
    if guidance is not None:
        await asyncio.to_thread(guidance.end, tid, "error" if traj.finish_reason == "error" else "finished",
                                final_score=traj.final_score)
    return traj


def _first_version(traj: Trajectory, default: int) -> int:
    """The trajectory's policy version: that of its first generated token (staleness is measured
    from there); steps record their own when weights change mid-trajectory."""
    for s in traj.steps:
        if s.tokens is not None and s.tokens.policy_version is not None:
            return s.tokens.policy_version
    return traj.policy_version if traj.steps else default
