"""SAO and its GRPO baselines on the mini suite's agent tasks: the asynchronous loop's episodes are
ReAct episodes (:func:`apollo.agent.react.run_episode`, sandboxed tools, η_L summaries) sampled
from the loop's served policy (:class:`~apollo.rl.sao_rollout.PolicyServer`).

* :class:`PolicyEngine` — the :class:`~apollo.engines.base.Engine` interface over the server: each
  turn carries the policy version it was sampled with (``meta["policy_version"]``), so a trajectory
  that spans a weight update keeps each token's version.
* :func:`trajectory_rollouts` — a finished trajectory → training rows (:class:`~apollo.rl.sao_rollout.Rollout`)
  on the tokens the policy sampled (:func:`apollo.rl.rows.step_segments`): usually one row; a
  trajectory whose context was summarized becomes one row per context window, each with the
  episode's reward on its last action token (with γ = 1 the critic's return is the same; the
  policy's λ-return is cut at the row boundary). Every token keeps its provenance
  (``meta["provenance"]``: ``policy``, ``human`` — a ``<real_user>`` message —, ``tool`` or
  ``context``) and its policy version (``versions``); only ``policy`` tokens can be trained.
* Guidance (``guided``): the simulated annotator watches the episodes through a guidance store and
  its advice enters the next prompt as ``<real_user>`` context — never a trained token.
* Masks (``masks``): the mask detectors (:class:`apollo.supervision.masker.Masker`) judge each
  finished trajectory; a dropped action's tokens leave the policy loss (``action_mask`` 0), as the
  action masks of masked SFT do.

Reward = final score / 100 (0 when the episode has no final score).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from apollo.engines.base import Generation
from apollo.rl.sao_rollout import PolicyServer, Rollout
from apollo.schema import Trajectory

log = logging.getLogger(__name__)
PROVENANCE = ("context", "policy", "tool", "human")


class PolicyEngine:
    """``generate(messages, seed=)`` over a :class:`PolicyServer` (no partial-turn ``prefix``)."""

    name = "sao_policy"

    def __init__(self, server: PolicyServer, max_context: int):
        from apollo.data.tokenize import tokenize_prompt

        self.server, self.max_context = server, int(max_context)
        self.tokenizer = server.tokenizer
        self._tokenize = tokenize_prompt
        self.policy_id = "sao"

    @property
    def policy_version(self) -> int:
        return self.server.version

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        return self._tokenize(self.tokenizer, messages)

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return len(self.prompt_ids(messages))

    def generate(self, messages: list[dict[str, Any]], *, seed: int | None = None) -> Generation:
        t0 = time.perf_counter()
        ids = self.prompt_ids(messages)
        if self.max_context - len(ids) <= 8:
            raise ValueError(f"prompt has {len(ids)} tokens, over the model context {self.max_context}")
        new, lps, ents, version = self.server.generate(ids, int(seed if seed is not None else time.time_ns()) % (2**62))
        return Generation(text=self.tokenizer.decode(new, skip_special_tokens=True), token_ids=list(new),
                          logprobs=list(lps), entropies=list(ents), prompt_tokens=len(ids),
                          gen_time_s=time.perf_counter() - t0,
                          finish_reason="stop" if new and new[-1] == self.server.eos_id else "length",
                          meta={"policy_version": version})


def reward_of(traj: Trajectory) -> float:
    return float(traj.final_score or 0.0) / 100.0


def token_provenance(input_ids: Sequence[int], trained: Sequence[bool], tokenizer: Any) -> list[str]:
    """Per token of a row: ``policy`` (a sampled action token), else by the chat message it sits in:
    ``human`` (a ``<real_user>`` message), ``tool`` (an observation), ``context``
    (system, task, summary, re-rendered turns, headers)."""
    start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    out = ["context"] * len(input_ids)
    marks = [i for i, t in enumerate(input_ids) if t == start] + [len(input_ids)]
    for a, b in zip(marks, marks[1:]):
        text = tokenizer.decode(list(input_ids[a:b]), skip_special_tokens=False)
        role, _, body = text.removeprefix("<|im_start|>").partition("\n")
        head = body.lstrip()
        # Qwen-style templates render a tool message as a user turn wrapped in <tool_response>; the
        # prompt code neutralizes any <real_user> look-alike in model or tool text, so the tag is the human's
        kind = ("tool" if role == "tool" or (role == "user" and head.startswith("<tool_response>"))
                else "human" if role == "user" and head.startswith("<real_user>") else "context")
        for i in range(a, b):
            out[i] = kind
    for i, t in enumerate(trained):
        if t:
            out[i] = "policy"
    return out


def trajectory_rollouts(traj: Trajectory, tokenizer: Any, *, group: str) -> list[Rollout]:
    """The training rows of a finished agent trajectory (see the module docstring). A step the mask
    stage dropped (``step.mask.keep`` false) keeps its tokens in the row as context, untrained."""
    from apollo.rl.rows import step_segments

    flat: list[tuple[int, bool, float]] = []  # per sampled token in order: (policy version, trainable, entropy)
    for st in traj.steps:
        tr = st.tokens
        if tr is None or not tr.token_ids:
            continue
        keep = st.mask is None or st.mask.keep
        version = int(tr.policy_version if tr.policy_version is not None else traj.policy_version)
        ents = list(tr.entropies) if tr.entropies is not None else [0.0] * len(tr.token_ids)
        flat += [(version, keep, float(e)) for e in ents]
    rows = step_segments(traj, tokenizer)
    reward = reward_of(traj)
    out: list[Rollout] = []
    for k, r in enumerate(rows):
        pos = r["positions"]
        mask = [1 if p >= 0 and flat[p][1] else 0 for p in pos]
        if not any(mask):
            continue
        out.append(Rollout(
            rollout_id=f"{traj.trajectory_id}#{k}" if len(rows) > 1 else traj.trajectory_id,
            task_id=traj.task_id, group=group, input_ids=list(r["input_ids"]), action_mask=mask,
            logprobs=[float(x) for x in r["rollout_logprobs"]],
            entropies=[flat[p][2] if p >= 0 else 0.0 for p in pos],
            versions=[flat[p][0] if p >= 0 else -1 for p in pos],
            reward=reward, turns=len(traj.steps),
            seconds=float((traj.ended_at or 0.0) - (traj.started_at or 0.0)), finished_at=time.time(),
            meta={"provenance": token_provenance(r["input_ids"], [p >= 0 for p in pos], tokenizer),
                  "trajectory_id": traj.trajectory_id, "row": k, "rows": len(rows),
                  "guided_steps": sum(1 for s in traj.steps if s.guidance),
                  "dropped_steps": sum(1 for s in traj.steps if s.mask is not None and not s.mask.keep),
                  "final_score": traj.final_score}))
    return out


@dataclass
class AgentEpisodes:
    """The episode source of :func:`apollo.rl.sao_loop.run_loop` on agent tasks.

    ``tasks``: task specs (:func:`apollo.env.tasks.list_tasks`); ``agent``: the ReAct loop's config;
    ``guidance``: a guidance store the simulated annotator watches (None: unguided); ``masker``: the
    mask detectors (None: every sampled token trained)."""

    tasks: Sequence[Any]
    agent: Any
    max_context: int
    guidance: Any = None
    masker: Any = None
    crashed: int = 0  # episodes that ended in a crash (never trained)

    def episode(self, server: PolicyServer, task: Any, *, seed: int, rollout_id: str, group: str,
                latency: Any = None) -> list[Rollout]:
        """One ReAct episode of ``task`` with the current policy → its training rows (maybe none: an
        episode whose every action was dropped, or that sampled nothing)."""
        from apollo.agent.react import run_episode

        engine = PolicyEngine(server, self.max_context)
        traj = run_episode(task, engine, guidance=self.guidance, config=self.agent, seed=seed,
                           trajectory_id=rollout_id, meta={"stage": "rl"})
        if traj.finish_reason == "error":  # a crash (a tool, the workspace): recorded, never trained on
            log.warning("%s crashed (%s): not trained", rollout_id, (traj.meta or {}).get("error", "?"))
            self.crashed += 1
            return []
        if self.masker is not None:
            self.masker.mask([traj], copy=False)
        rows = trajectory_rollouts(traj, server.tokenizer, group=group)
        if not rows:
            log.info("%s: no trainable tokens (final score %s)", rollout_id, traj.final_score)
        return rows
