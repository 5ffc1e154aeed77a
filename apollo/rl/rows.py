"""From agent trajectories to the trainer's token rows, on the tokens the policy actually sampled.

An agent episode is many generations: step ``k`` sampled ``response_k`` after ``prompt_k`` (its
context window, rebuilt with :func:`apollo.agent.prompt.context_messages` exactly as the loop built
it). A row is ``prompt_k + response_k`` with labels on ``response_k`` only, the rollout logprobs
and the advantages aligned with ``input_ids`` (0 elsewhere). Consecutive steps share one row when
the next prompt starts with the current row's tokens (the usual case: the chat template renders
the sampled turn back to the same ids); otherwise (a summary started a new window, or a
re-rendered turn tokenizes differently) a new row starts. So every trained token is the sampled
one, its ``rollout_logprobs`` the sampler's, and no context token is trained.

Positions: the trained tokens of all rows of a trajectory, in order, are exactly
:func:`apollo.rl.tree.response_tokens` of it (the flat response that branch scores, branch splits
and :func:`apollo.rl.appo.branch_credit` index), so a per-token advantage ``adv[p]`` of the flat
response lands on the row token that was sampled at ``p``.

Summary calls are not trained here (they are separate generations without recorded token traces).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from apollo.schema import Trajectory

IGNORE_INDEX = -100


def step_segments(traj: Trajectory, tokenizer: Any) -> list[dict[str, Any]]:
    """Rows of ``traj`` without advantages: ``input_ids``, ``labels``, ``rollout_logprobs`` and
    ``positions`` (per token, its index in the flat response, or -1 for context tokens)."""
    from apollo.agent.prompt import context_messages
    from apollo.data.tokenize import tokenize_prompt

    rows: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    flat = 0
    for st in traj.steps:
        tr = st.tokens
        if tr is None or not tr.token_ids:
            continue
        msgs = context_messages(traj, st.index, first_step=st.context.first_step,
                                summary_index=st.context.summary_index, pending_guidance=st.guidance)
        prompt = tokenize_prompt(tokenizer, msgs)
        resp = list(tr.token_ids)
        lps = list(tr.logprobs) if tr.logprobs is not None else [0.0] * len(resp)
        if cur is not None and prompt[: len(cur["input_ids"])] == cur["input_ids"]:
            ctx = prompt[len(cur["input_ids"]):]  # the observation and the next header
        else:
            if cur is not None:
                rows.append(cur)
            cur = {"input_ids": [], "labels": [], "rollout_logprobs": [], "positions": []}
            ctx = prompt
        cur["input_ids"] += ctx + resp
        cur["labels"] += [IGNORE_INDEX] * len(ctx) + resp
        cur["rollout_logprobs"] += [0.0] * len(ctx) + [float(x) for x in lps]
        cur["positions"] += [-1] * len(ctx) + list(range(flat, flat + len(resp)))
        flat += len(resp)
    if cur is not None:
        rows.append(cur)
    return rows


def trajectory_rows(traj: Trajectory, tokenizer: Any, token_adv: Sequence[float],
                    ref_logprobs: Sequence[float] | None = None) -> list[dict[str, Any]]:
    """Trainer rows of ``traj`` with ``advantages`` from ``token_adv`` (one value per flat response
    token, :func:`apollo.rl.tree.response_tokens` order). ``ref_logprobs`` (same order), when
    given, become the rows' ``ref_logprobs`` (the KL term)."""
    rows = step_segments(traj, tokenizer)
    n = sum(1 for r in rows for p in r["positions"] if p >= 0)
    if len(token_adv) != n:
        raise ValueError(f"{traj.trajectory_id}: {len(token_adv)} token advantages for {n} response tokens")
    if ref_logprobs is not None and len(ref_logprobs) != n:
        raise ValueError(f"{traj.trajectory_id}: {len(ref_logprobs)} reference logprobs for {n} response tokens")
    out = []
    for r in rows:
        row = {"input_ids": r["input_ids"], "labels": r["labels"], "rollout_logprobs": r["rollout_logprobs"],
               "advantages": [float(token_adv[p]) if p >= 0 else 0.0 for p in r["positions"]],
               "trajectory_id": traj.trajectory_id, "task_id": traj.task_id}
        if ref_logprobs is not None:
            row["ref_logprobs"] = [float(ref_logprobs[p]) if p >= 0 else 0.0 for p in r["positions"]]
        out.append(row)
    return out
