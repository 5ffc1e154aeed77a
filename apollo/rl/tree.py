"""Tree rollouts for agents (APPO, arXiv 2606.12384; reference code AMAP-ML/APPO).

Per task: ``n_init`` initial episodes run to the end (the workspace is snapshotted at every step
boundary, :class:`~apollo.env.snapshot.WorkspaceSnapshots`); the current policy then scores every
assistant token of those episodes (:class:`HFPolicyScorer`: one forward pass per step, current
logprobs and entropy); :func:`apollo.rl.appo.branch_scores` turns entropy and the future-value
ratio into a branch score; :func:`select_branch_points` picks the top ``n_branch`` per task pooled
over its initial episodes; each branch regenerates from ``prompt + response[:t+1]`` inside the
step that holds token ``t`` (the engine continues the partial turn, ``generate(..., prefix=)``),
with the workspace restored to its snapshot before that step, and then runs the ordinary episode
loop (:func:`apollo.agent.react.arun_episode` with an :class:`~apollo.agent.react.EpisodeStart`).

An agent episode's "response" is the concatenation of its assistant turns' tokens (summaries and
tool observations are not in it); a token position in it maps back to ``(step index, token index
within that step's response)``. Selection follows the reference (``build_appo_branch_request``):
candidates are valid, non-whitespace tokens (here also not an end-of-turn token: a branch after it
would continue a finished turn); *strict* candidates have ``Z(H) > 0``, ``Z(FV) > 0`` and
``BS > 0``; the top ``B`` strict ones per task are taken, topped up from all candidates by score
when fewer, and, when still fewer, the chosen ones are repeated in order (the budget ``N + B`` is
kept; a repeated point gives a second, differently seeded branch).

Tree links go into the trajectory record: ``parent_trajectory_id``, ``branch_step_index``,
``branch_token_index`` (within the step's response), and ``meta``: ``kind`` ("init"/"branch"),
``branch_flat_index`` (position in the parent's response, the split ``s_b`` of
:func:`apollo.rl.appo.branch_credit`), ``branch_score``, ``branch_strict``.
:func:`tree_batch` lays a tree's trajectories out for :func:`~apollo.rl.appo.dual_group_advantages`
and :func:`~apollo.rl.appo.branch_credit`.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import uuid
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from apollo.agent.react import AgentConfig, EpisodeStart, arun_episode
from apollo.env.snapshot import WorkspaceSnapshots
from apollo.rl.appo import branch_scores
from apollo.schema import Trajectory

log = logging.getLogger(__name__)

__all__ = [
    "BranchPoint", "HFPolicyScorer", "ResponseTokens", "atree_rollout", "branch_start", "plan_branches",
    "response_tokens", "select_branch_points", "tree_batch", "tree_kind", "tree_rollout",
]


# --- an episode's response tokens ---------------------------------------------------------------


@dataclass
class ResponseTokens:
    """The assistant tokens of one episode, concatenated over its steps; ``where[p]`` is
    ``(step index, token index within that step)`` of position ``p``."""

    token_ids: list[int]
    logprobs: list[float] | None  # rollout (sampling) logprobs; None when a step lacks them
    entropies: list[float] | None
    where: list[tuple[int, int]]

    def __len__(self) -> int:
        return len(self.token_ids)

    def position(self, step: int, token: int) -> int:
        return self.where.index((step, token))


def response_tokens(traj: Trajectory) -> ResponseTokens:
    ids: list[int] = []
    lps: list[float] | None = []
    ents: list[float] | None = []
    where: list[tuple[int, int]] = []
    for st in traj.steps:
        tr = st.tokens
        if tr is None:
            continue
        ids += tr.token_ids
        where += [(st.index, j) for j in range(len(tr.token_ids))]
        lps = None if lps is None or tr.logprobs is None else lps + list(tr.logprobs)
        ents = None if ents is None or tr.entropies is None else ents + list(tr.entropies)
    return ResponseTokens(ids, lps, ents, where)


class HFPolicyScorer:
    """Current-policy logprobs and entropies of an episode's response tokens (one forward pass per
    step over that step's prompt, rebuilt exactly as the loop built it, and its response).

    ``temperature`` scales the logits as the sampler did, so the logprobs compare with the
    rollout's sampling logprobs (top-p is not applied: use top_p = 1 for APPO). Returns
    ``(logprobs, entropies)``, lists aligned with :func:`response_tokens`.
    """

    def __init__(self, model: Any, tokenizer: Any, *, temperature: float = 1.0):
        self.model, self.tokenizer = model, tokenizer
        self.temperature = temperature if temperature > 0 else 1.0

    @classmethod
    def from_engine(cls, engine: Any) -> HFPolicyScorer:
        if not hasattr(engine, "model"):
            raise TypeError(f"engine {getattr(engine, 'name', engine)!r} holds no in-process model; pass "
                            f"scorer=HFPolicyScorer(model, tokenizer) for the current policy")
        return cls(engine.model, engine.tokenizer, temperature=getattr(engine, "temperature", 1.0))

    @torch.no_grad()
    def __call__(self, traj: Trajectory) -> tuple[list[float], list[float]]:
        from apollo.agent.prompt import context_messages
        from apollo.data.tokenize import tokenize_prompt

        device = next(self.model.parameters()).device
        lps: list[float] = []
        ents: list[float] = []
        for st in traj.steps:
            if st.tokens is None:
                continue
            msgs = context_messages(traj, st.index, first_step=st.context.first_step,
                                    summary_index=st.context.summary_index, pending_guidance=st.guidance)
            prompt = tokenize_prompt(self.tokenizer, msgs)
            resp = list(st.tokens.token_ids)
            x = torch.tensor([prompt + resp], device=device)
            logits = self.model(input_ids=x).logits[0, len(prompt) - 1: len(prompt) + len(resp) - 1].float()
            lp = torch.log_softmax(logits / self.temperature, dim=-1)
            lps += lp.gather(1, torch.tensor(resp, device=device)[:, None])[:, 0].tolist()
            p = lp.exp()
            ents += (-(p * torch.where(p > 0, lp, torch.zeros_like(lp))).sum(-1)).tolist()
        return lps, ents


# --- branch points --------------------------------------------------------------------------------


def select_branch_points(scores: torch.Tensor, z_entropy: torch.Tensor, z_future: torch.Tensor,
                         eligible: torch.Tensor, groups: Sequence[Hashable], n_branch: int,
                         ) -> list[tuple[int, int, float, bool]]:
    """``(row, t, score, strict)`` branch points: per group (task), the top ``n_branch`` strict
    candidates pooled over its rows, topped up from all eligible tokens by score, then repeated
    in order to fill ``n_branch`` (reference behaviour; a group with no eligible token gets none).

    ``scores``/``z_entropy``/``z_future``: :func:`apollo.rl.appo.branch_scores` outputs ``[N, T]``;
    ``eligible`` ``[N, T]`` bool (valid, non-whitespace, not an end token). Ties keep row-major order.
    """
    if scores.shape != eligible.shape or len(groups) != scores.shape[0]:
        raise ValueError(f"select_branch_points: scores {tuple(scores.shape)}, eligible "
                         f"{tuple(eligible.shape)}, {len(groups)} groups")
    if n_branch <= 0:
        return []
    strict_ok = (z_entropy > 0) & (z_future > 0) & (scores > 0) & eligible.bool()
    pooled: dict[Hashable, list[tuple[float, int, int]]] = defaultdict(list)
    strict: dict[Hashable, list[tuple[float, int, int]]] = defaultdict(list)
    order: list[Hashable] = []
    for row in range(scores.shape[0]):
        g = groups[row]
        for t in torch.nonzero(eligible[row].bool(), as_tuple=False).flatten().tolist():
            if g not in pooled:
                order.append(g)
            cand = (float(scores[row, t]), row, t)
            pooled[g].append(cand)
            if bool(strict_ok[row, t]):
                strict[g].append(cand)
    out: list[tuple[int, int, float, bool]] = []
    for g in order:
        chosen = [(s, r, t, True) for s, r, t in sorted(strict[g], key=lambda c: c[0], reverse=True)[:n_branch]]
        taken = {(r, t) for _, r, t, _ in chosen}
        for s, r, t in sorted(pooled[g], key=lambda c: c[0], reverse=True):
            if len(chosen) >= n_branch:
                break
            if (r, t) not in taken:
                chosen.append((s, r, t, False))
                taken.add((r, t))
        k = 0
        while chosen and len(chosen) < n_branch:
            chosen.append(chosen[k])
            k += 1
        out += [(r, t, s, st) for s, r, t, st in chosen]
    return out


@dataclass(frozen=True)
class BranchPoint:
    parent: int  # index into the initial trajectories
    step_index: int
    token_index: int  # within that step's response
    flat_index: int  # within the parent's whole response (the split s_b)
    score: float
    strict: bool


def plan_branches(inits: Sequence[Trajectory], scorer: Callable[[Trajectory], tuple[list[float], list[float]]],
                  n_branch: int, *, tokenizer: Any, eos_ids: Sequence[int] = (), gamma: float = 1.0,
                  fv_clip: float = 0.2) -> list[BranchPoint]:
    """Score the initial episodes with the current policy and pick the branch points (per task).

    Entropy: the rollout's where the engine recorded it, else the scorer's. ``logp_rollout``:
    the recorded sampling logprobs; an episode without them gets the scorer's (FV ≡ 1: only the
    fallback can pick its tokens)."""
    resp = [response_tokens(t) for t in inits]
    n, width = len(inits), max((len(r) for r in resp), default=0)
    if n == 0 or width == 0:
        return []
    ent = torch.zeros(n, width)
    lp_pol = torch.zeros(n, width)
    lp_roll = torch.zeros(n, width)
    mask = torch.zeros(n, width, dtype=torch.bool)
    blank = torch.ones(n, width, dtype=torch.bool)
    eos = {int(e) for e in eos_ids}
    text_of: dict[int, bool] = {}
    for i, (traj, r) in enumerate(zip(inits, resp)):
        m = len(r)
        if m == 0:
            continue
        pol, pol_ent = scorer(traj)
        if len(pol) != m:
            raise ValueError(f"scorer gave {len(pol)} logprobs for {m} response tokens of {traj.trajectory_id}")
        lp_pol[i, :m] = torch.tensor(pol)
        lp_roll[i, :m] = torch.tensor(r.logprobs if r.logprobs is not None else pol)
        if r.logprobs is None:
            log.warning("%s has no rollout logprobs: FV is 1 on all its tokens", traj.trajectory_id)
        ent[i, :m] = torch.tensor(r.entropies if r.entropies is not None else pol_ent)
        mask[i, :m] = True
        for t, tok in enumerate(r.token_ids):
            if tok not in text_of:
                text_of[tok] = tok not in eos and bool(tokenizer.decode([tok]).strip())
            blank[i, t] = not text_of[tok]
    scores, z_h, z_fv = branch_scores(ent, lp_pol, lp_roll, mask.float(), gamma=gamma, fv_clip=fv_clip)
    picks = select_branch_points(scores, z_h, z_fv, mask & ~blank, [t.task_id for t in inits], n_branch)
    out = []
    for row, t, s, strict in picks:
        step, tok = resp[row].where[t]
        out.append(BranchPoint(row, step, tok, t, s, strict))
    return out


def branch_start(parent: Trajectory, point: BranchPoint, snaps: WorkspaceSnapshots) -> EpisodeStart:
    """How a branch at ``point`` starts: the parent's steps before it, the parent's context window
    and guidance of that step, ``response[:t+1]`` as the prefix, the workspace before that step."""
    k, j = point.step_index, point.token_index
    st = parent.steps[k]
    tr = st.tokens
    if tr is None or j >= len(tr.token_ids):
        raise ValueError(f"{parent.trajectory_id}: step {k} has no response token {j}")
    evals = [e for e in parent.evals if not e.forced and e.step < k]
    return EpisodeStart(
        steps=parent.steps[:k], prefix=list(tr.token_ids[: j + 1]),
        summaries=[s for s in parent.summaries if s.before_step <= k], evals=evals,
        first_step=st.context.first_step, summary_index=st.context.summary_index, guidance=list(st.guidance),
        prefix_logprobs=None if tr.logprobs is None else list(tr.logprobs[: j + 1]),
        prefix_entropies=None if tr.entropies is None else list(tr.entropies[: j + 1]),
        restore=lambda ws: snaps.restore(ws, k), evals_used=len(evals),
        elapsed_s=max(0.0, st.started_at - parent.started_at - sum(p.gen_time_s or 0.0 for p in parent.steps[:k])),
    )


# --- the driver ----------------------------------------------------------------------------------


def tree_kind(traj: Trajectory) -> str:
    return "branch" if traj.parent_trajectory_id is not None else "init"


async def atree_rollout(task: Any, engine: Any, n_init: int, n_branch: int, *,
                        scorer: Callable[[Trajectory], tuple[list[float], list[float]]] | None = None,
                        config: AgentConfig | None = None, seed: int = 0, gamma: float = 1.0,
                        fv_clip: float = 0.2, concurrency: int = 1, workspace_root: Any = None,
                        snapshot_root: Path | str | None = None, meta: dict[str, Any] | None = None,
                        on_phase: Callable[[str, list[Trajectory]], None] | None = None) -> list[Trajectory]:
    """``n_init`` initial episodes of ``task``, then ``n_branch`` branches from them → init + branch
    trajectories (``meta["kind"]``). Seeds: initial ``e`` gets ``seed·1000 + e``, branch ``j``
    ``seed·1000 + 500 + j``. ``scorer``: current-policy ``(logprobs, entropies)`` of an episode's
    response (default :class:`HFPolicyScorer` of the engine's own model). ``concurrency``:
    episodes in flight. ``on_phase(name, trajs)``: called after "init" and "branch" (progress,
    measurements). Snapshots live under ``snapshot_root`` (a temporary folder by default) and are
    deleted at the end.
    """
    if n_init < 1 or n_branch < 0:
        raise ValueError(f"tree_rollout: n_init must be ≥ 1 and n_branch ≥ 0, got {n_init}, {n_branch}")
    score = scorer or HFPolicyScorer.from_engine(engine)
    root = Path(snapshot_root) if snapshot_root is not None else Path(tempfile.mkdtemp(prefix="apollo-tree-"))
    sem = asyncio.Semaphore(max(1, concurrency))
    tag = uuid.uuid4().hex[:6]

    async def run(**kw: Any) -> Trajectory:
        async with sem:
            return await arun_episode(task, engine, config=config, workspace_root=workspace_root, **kw)

    snaps = [WorkspaceSnapshots(root / f"init-{e}") for e in range(n_init)]
    try:
        inits = list(await asyncio.gather(*[
            run(seed=seed * 1000 + e, trajectory_id=f"{task.task_id}-tree{seed}-{tag}-i{e}",
                meta={**(meta or {}), "kind": "init"}, on_boundary=snaps[e].take)
            for e in range(n_init)]))
        if on_phase is not None:
            on_phase("init", inits)
        points = await asyncio.to_thread(
            plan_branches, inits, score, n_branch, tokenizer=engine.tokenizer,
            eos_ids=getattr(engine, "eos_ids", ()), gamma=gamma, fv_clip=fv_clip)
        log.info("%s: %d branch points (%d strict) over %d initial episodes", task.task_id, len(points),
                 sum(p.strict for p in points), n_init)

        async def branch(j: int, p: BranchPoint) -> Trajectory:
            parent = inits[p.parent]
            traj = await run(seed=seed * 1000 + 500 + j, trajectory_id=f"{parent.trajectory_id}-b{j}",
                             start=branch_start(parent, p, snaps[p.parent]),
                             meta={**(meta or {}), "kind": "branch", "branch_flat_index": p.flat_index,
                                   "branch_score": p.score, "branch_strict": p.strict})
            traj.parent_trajectory_id = parent.trajectory_id
            traj.branch_step_index, traj.branch_token_index = p.step_index, p.token_index
            return traj

        branches = list(await asyncio.gather(*[branch(j, p) for j, p in enumerate(points)]))
        if on_phase is not None:
            on_phase("branch", branches)
    finally:
        for s in snaps:
            s.close()
        if snapshot_root is None:
            shutil.rmtree(root, ignore_errors=True)
    return inits + branches


def tree_rollout(task: Any, engine: Any, n_init: int, n_branch: int, **kw: Any) -> list[Trajectory]:
    """:func:`atree_rollout`, blocking (its own event loop)."""
    return asyncio.run(atree_rollout(task, engine, n_init, n_branch, **kw))


def tree_batch(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """Lay out tree trajectories for the APPO advantage functions: ``rewards`` (final score / 100),
    ``prompt_ids`` (task ids), ``kinds`` — the arguments of :func:`~apollo.rl.appo.dual_group_advantages`
    —, ``init_rows``/``branch_rows`` (indices into ``trajs``), and per branch ``branch_parent``
    (index into the initial rows) and ``branch_split`` (its parent's response position) for
    :func:`~apollo.rl.appo.branch_credit`."""
    kinds = [tree_kind(t) for t in trajs]
    init_rows = [i for i, k in enumerate(kinds) if k == "init"]
    branch_rows = [i for i, k in enumerate(kinds) if k == "branch"]
    init_of = {trajs[i].trajectory_id: n for n, i in enumerate(init_rows)}
    parents, splits = [], []
    for i in branch_rows:
        t = trajs[i]
        if t.parent_trajectory_id not in init_of:
            raise ValueError(f"branch {t.trajectory_id}: parent {t.parent_trajectory_id} is not among the "
                             f"initial trajectories")
        parents.append(init_of[t.parent_trajectory_id])
        split = t.meta.get("branch_flat_index")
        if split is None:
            parent = trajs[init_rows[init_of[t.parent_trajectory_id]]]
            split = response_tokens(parent).position(t.branch_step_index, t.branch_token_index)
        splits.append(int(split))
    return {
        "rewards": torch.tensor([(t.final_score or 0.0) / 100.0 for t in trajs]),
        "prompt_ids": [t.task_id for t in trajs],
        "kinds": kinds,
        "init_rows": init_rows,
        "branch_rows": branch_rows,
        "branch_parent": torch.tensor(parents, dtype=torch.long),
        "branch_split": torch.tensor(splits, dtype=torch.long),
    }
