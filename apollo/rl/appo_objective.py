"""The APPO objective of the one trainer loop (:func:`apollo.train.loop.train`, ``objective=``).

Per micro-batch: the future-aware advantage ``Ã = A·(1 + weight·f)``
(:func:`apollo.rl.appo.future_aware_advantages`) is computed *inside* the loss, from the live
``log π_θ`` (detached) and the rollout logprobs, then :func:`apollo.rl.losses.dual_clip_ppo_loss`.
Computing ``f`` before the update instead would make it 1 everywhere for on-policy rollouts
(``Δ = 0`` at the start of the update); inside the loss it grows as the update moves the policy
away from the sampler, as in the reference (AMAP-ML/APPO). The future sum runs within a row (a
context window; tokens between turns have mask 0 but count as positions, as in verl's multi-turn
response mask).

Optional KL to the reference policy (``kl_coef > 0``): the low-variance k3 estimator
``exp(r) − r − 1`` with ``r = log π_ref − log π_θ`` (Schulman's k3), token mean, added to the loss;
the rows then carry ``ref_logprobs``.

Stats (``train.obj.*``): the dual-clip stats, ``future_weight`` (mean ``Ã/A`` where ``A ≠ 0``),
``kl_ref`` (k3, also logged when ``kl_coef`` is 0 but reference logprobs are present).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from apollo.rl.appo import future_aware_advantages
from apollo.rl.functional import masked_mean, on_mask
from apollo.rl.losses import dual_clip_ppo_loss
from apollo.train.objectives import TokenOutputs

Tensor = torch.Tensor


def k3_kl(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> Tensor:
    """Token mean of ``exp(r) − r − 1``, ``r = clamp(ref − logp, ±20)`` (an unbiased, non-negative KL(π_θ‖π_ref) estimate)."""
    r = on_mask(ref_logp - logp, mask).clamp(-20.0, 20.0)
    return masked_mean(torch.exp(r) - r - 1.0, mask)


@dataclass
class AppoObjective:
    """Future-aware dual-clip PPO (+ optional k3 KL); ``loss`` summed over trained tokens (the loop normalises)."""

    clip_low: float = 0.2
    clip_high: float = 0.28
    clip_c: float = 3.0
    decay_rate: float = 64.0
    future_eps: float = 0.2
    weight: float = 1.0
    safety_thresh: float = 6.0
    kl_coef: float = 0.0
    name: str = "appo"
    token_fields: tuple[str, ...] = field(default=("advantages", "rollout_logprobs"))

    def __post_init__(self) -> None:
        if self.kl_coef > 0 and "ref_logprobs" not in self.token_fields:
            self.token_fields = (*self.token_fields, "ref_logprobs")

    def __call__(self, batch: Mapping[str, Any], out: TokenOutputs) -> tuple[Tensor, dict[str, Tensor]]:
        m = out.mask
        old = batch["rollout_logprobs"].to(out.logp.device, out.logp.dtype)
        adv = batch["advantages"].to(out.logp.device, out.logp.dtype)
        a = future_aware_advantages(adv, out.logp.detach(), old, m, decay_rate=self.decay_rate, clip_c=self.clip_c,
                                    eps=self.future_eps, weight=self.weight, safety_thresh=self.safety_thresh)
        loss, stats = dual_clip_ppo_loss(out.logp, old, a, m, clip_low=self.clip_low, clip_high=self.clip_high,
                                         clip_c=self.clip_c)
        with torch.no_grad():
            nz = m & (adv != 0)
            stats["future_weight"] = masked_mean(torch.where(nz, a / torch.where(nz, adv, torch.ones_like(adv)),
                                                             torch.zeros_like(adv)), nz).detach()
        if batch.get("ref_logprobs") is not None:
            kl = k3_kl(out.logp, batch["ref_logprobs"].to(out.logp.device, out.logp.dtype), m)
            stats["kl_ref"] = kl.detach()
            if self.kl_coef > 0:
                loss = loss + self.kl_coef * kl
        return loss * m.sum().to(loss.dtype), stats
