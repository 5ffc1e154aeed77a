"""APPO (arXiv 2606.12384; reference code AMAP-ML/APPO): branch scores, dual-group advantages,
branch credit and the future-aware advantage. Pure functions: torch in, torch out, no I/O.

These names and keyword arguments are a conformance surface (checked against an independent
reference implementation): keep them stable. Shapes: ``[B, T]`` token tensors, ``mask`` 1 on the
tokens that count; off-mask inputs never influence a result (they may hold padding or ``nan``).
Details follow the reference code: z-scores use the population std + 1e-6, summed log-ratios are
clamped to ±20 before ``exp``, a GRPO group of one gets advantage 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Hashable

import torch

from apollo.rl.functional import (
    as_bool,
    check_rows,
    check_tokens,
    discounted_future_sum,
    group_normalize,
    masked_zscore,
    on_mask,
)

Tensor = torch.Tensor
KINDS = ("init", "branch")


def branch_scores(entropy: Tensor, logp_policy: Tensor, logp_rollout: Tensor, mask: Tensor, *,
                  gamma: float = 1.0, fv_clip: float = 0.2) -> tuple[Tensor, Tensor, Tensor]:
    """Branch score ``BS_t = Z(H_t)·Z(FV_t)`` of every response token → ``(scores, z_entropy, z_future)``.

    ``FV_t = clip(exp(clamp(Σ_{k≥t} γ^{k−t}(logp_policy_k − logp_rollout_k)·mask_k, −20, 20)),
    1−fv_clip, 1+fv_clip)`` (no clip when ``fv_clip <= 0``): how much more likely the current
    policy finds the rest of the response than the policy that sampled it. ``Z`` is a per-row
    z-score over the valid tokens (population std + 1e-6). All three outputs are 0 off the mask.
    Candidate selection (Z(H)>0, Z(FV)>0, BS>0, non-whitespace, top-B per prompt) is the caller's.
    """
    check_tokens({"entropy": entropy, "logp_policy": logp_policy, "logp_rollout": logp_rollout, "mask": mask},
                 fn="branch_scores")
    m = as_bool(mask)
    log_ratio = on_mask(logp_policy - logp_rollout, m)
    future = discounted_future_sum(log_ratio, gamma).clamp(-20.0, 20.0)
    fv = torch.exp(future)
    if fv_clip > 0:
        fv = fv.clamp(1.0 - fv_clip, 1.0 + fv_clip)
    z_h = masked_zscore(on_mask(entropy, m), m)
    z_fv = masked_zscore(fv, m)
    return on_mask(z_h * z_fv, m), z_h, z_fv


def _keys(ids: Tensor | Sequence[Hashable]) -> list[Hashable]:
    return ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)


def dual_group_advantages(rewards: Tensor, prompt_ids: Tensor | Sequence[Hashable],
                          kinds: Sequence[str], *, norm_by_std: bool = True) -> Tensor:
    """Sequence-level advantages ``[N]``: GRPO within each (prompt, kind ∈ {"init", "branch"}) group.

    Initial rollouts are compared only with initial rollouts of the same prompt, branches only with
    branches (their rewards are conditioned on a shared prefix). A group of one gets 0.
    """
    n = check_rows("rewards", rewards, None, fn="dual_group_advantages")
    pids, ks = _keys(prompt_ids), list(kinds)
    if len(pids) != n or len(ks) != n:
        raise ValueError(f"dual_group_advantages: {n} rewards, {len(pids)} prompt_ids, {len(ks)} kinds")
    bad = sorted({str(k) for k in ks} - set(KINDS))
    if bad:
        raise ValueError(f"dual_group_advantages: kinds must be 'init' or 'branch', got {bad}")
    return group_normalize(rewards, list(zip(pids, ks)), norm_by_std=norm_by_std, fn="dual_group_advantages")


def branch_credit(init_adv: Tensor, branch_adv: Tensor, branch_parent: Tensor, branch_split: Tensor,
                  mask: Tensor) -> Tensor:
    """Token advantages ``[N_init, T]`` of the initial rollouts, with the credit of their branches.

    ``A_{o,t} = A_o + mean{A_b : b branched from row o with t ≤ s_b}`` (the mean term only where at
    least one branch covers t), times ``mask``. ``init_adv [N_init]``; ``branch_adv``,
    ``branch_parent`` (row index into the initial rollouts) and ``branch_split`` (the response
    token index s_b the branch regenerated after) are ``[N_b]``. Branch rows themselves are not
    trained. A split index beyond T covers the whole row.
    """
    check_tokens({"mask": mask}, fn="branch_credit")
    n_init, t_len = mask.shape
    check_rows("init_adv", init_adv, n_init, fn="branch_credit")
    nb = check_rows("branch_adv", branch_adv, None, fn="branch_credit")
    check_rows("branch_parent", branch_parent, nb, fn="branch_credit")
    check_rows("branch_split", branch_split, nb, fn="branch_credit")
    if nb and (int(branch_parent.min()) < 0 or int(branch_parent.max()) >= n_init):
        raise ValueError(f"branch_credit: branch_parent must index the {n_init} initial rows, "
                         f"got {branch_parent.tolist()}")
    if nb and int(branch_split.min()) < 0:
        raise ValueError(f"branch_credit: branch_split must be ≥ 0, got {branch_split.tolist()}")
    m = as_bool(mask)
    dtype = init_adv.dtype if init_adv.is_floating_point() else torch.float32
    pos = torch.arange(t_len, device=mask.device)
    covers = (pos[None, :] <= branch_split.to(mask.device)[:, None]).to(dtype)  # [N_b, T]
    parent = torch.nn.functional.one_hot(branch_parent.long().to(mask.device), n_init).to(dtype).T  # [N_init, N_b]
    total = parent @ (covers * branch_adv.to(mask.device, dtype)[:, None])
    count = parent @ covers
    credit = torch.where(count > 0, total / count.clamp(min=1), torch.zeros((), dtype=dtype, device=mask.device))
    return on_mask(init_adv.to(mask.device, dtype)[:, None] + credit, m)


def future_aware_advantages(adv: Tensor, logp_new: Tensor, logp_old: Tensor, mask: Tensor, *,
                            decay_rate: float = 64.0, clip_c: float = 3.0, eps: float = 0.2,
                            clip_high_only: bool = True, weight: float = 1.0,
                            safety_thresh: float = 6.0) -> Tensor:
    """The future-aware advantage ``Ã_t = A_t·(1 + weight·f_t)·mask_t`` (detached weights).

    ``Δ_k = clamp(logp_new − logp_old, ±20)``; ``M_k = 1[Δ_k ≤ log clip_c]`` (tokens past the
    dual-clip bound carry no gradient, so they do not steer the weight);
    ``FutureKL_t = Σ_{k≥t} γ^{k−t} M_k Δ_k mask_k`` with ``γ = 2^(−1/decay_rate)`` (half-life
    ``decay_rate`` tokens); ``f_t = clip(exp(FutureKL_t), 1 if clip_high_only else 1−eps, 1+eps)``
    (``eps <= 0``: only capped at 10, as the reference). Where ``A_t < 0`` and ``exp(Δ_t) >
    safety_thresh``, ``f_t`` is clipped to [0.8, 1.0] so a stale negative sample is not
    over-penalised. ``adv`` is ``[B, T]`` (broadcast a sequence advantage before calling).
    """
    check_tokens({"adv": adv, "logp_new": logp_new, "logp_old": logp_old, "mask": mask},
                 fn="future_aware_advantages")
    if clip_c <= 1.0:
        raise ValueError(f"future_aware_advantages: clip_c must be > 1 (dual-clip bound), got {clip_c}")
    if decay_rate <= 0:
        raise ValueError(f"future_aware_advantages: decay_rate must be > 0, got {decay_rate}")
    m = as_bool(mask)
    with torch.no_grad():
        delta = on_mask(logp_new.detach() - logp_old.detach(), m).clamp(-20.0, 20.0)
        ratio = torch.exp(delta)
        participates = delta <= math.log(clip_c)
        kl = torch.where(participates & m, delta, torch.zeros((), dtype=delta.dtype, device=delta.device))
        future_kl = discounted_future_sum(kl, 2.0 ** (-1.0 / decay_rate))
        raw = torch.exp(future_kl)
        if eps > 0:
            f = raw.clamp(1.0 if clip_high_only else 1.0 - eps, 1.0 + eps)
        else:
            f = raw.clamp(max=10.0)
        a = on_mask(adv.detach(), m)
        f = torch.where((a < 0) & (ratio > safety_thresh), f.clamp(0.8, 1.0), f)
    return on_mask(on_mask(adv, m) * (1.0 + weight * f), m)
