"""Policy losses and outcome advantages, and the registries that select them by name from config
(in the manner of verl's ``core_algos``). Pure functions: torch in, torch out, no I/O.

Every policy loss has the signature ``fn(logp_new, logp_old, adv, mask, **kw) -> (loss, stats)``
over ``[B, T]`` tensors (``logp_old`` is the rollout/behaviour log-probability), the loss a
token mean over the trained tokens, ``stats`` a dict of detached scalars holding every mask
fraction. Every advantage estimator maps sequence rewards ``[N]`` and group ids to ``[N]``.

``dual_clip_ppo_loss`` and ``grpo_advantages`` are a conformance surface (checked against an
independent reference implementation): keep names and keywords stable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Hashable

import torch

from apollo.rl import appo, sao
from apollo.rl.functional import as_bool, check_tokens, group_normalize, masked_fraction, masked_mean, on_mask

Tensor = torch.Tensor
PolicyLoss = Callable[..., tuple[Tensor, dict[str, Tensor]]]
AdvantageFn = Callable[..., Tensor]

POLICY_LOSSES: dict[str, PolicyLoss] = {}
ADVANTAGES: dict[str, AdvantageFn] = {}


def _registrar(table: dict[str, Any], what: str) -> Callable[[str], Callable[[Any], Any]]:
    """``@register(name)`` for ``table``: a name is registered once (``what`` names it in the error)."""
    def register(name: str) -> Callable[[Any], Any]:
        def deco(fn: Any) -> Any:
            if name in table:
                raise ValueError(f"{what} {name!r} is already registered")
            table[name] = fn
            return fn

        return deco

    return register


def _lookup(table: dict[str, Any], what: str, name: str) -> Any:
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown {what} {name!r}; known: {sorted(table)}") from None


register_policy_loss = _registrar(POLICY_LOSSES, "policy loss")
register_advantage = _registrar(ADVANTAGES, "advantage estimator")


def get_policy_loss(name: str) -> PolicyLoss:
    return _lookup(POLICY_LOSSES, "policy loss", name)


def get_advantage(name: str) -> AdvantageFn:
    return _lookup(ADVANTAGES, "advantage estimator", name)


@register_policy_loss("dual_clip_ppo")
def dual_clip_ppo_loss(logp_new: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor, *,
                       clip_low: float = 0.2, clip_high: float = 0.28,
                       clip_c: float = 3.0) -> tuple[Tensor, dict[str, Tensor]]:
    """Dual-clip PPO → ``(loss, stats)``, the token mean over ``mask``.

    ``r = exp(clamp(logp_new − logp_old, ±20))``; per token ``l = max(−A·r, −A·clip(r, 1−clip_low,
    1+clip_high))`` (PPO with the asymmetric, clip-higher range), and where ``A < 0`` also
    ``min(l, −A·clip_c)`` (the dual clip: a very stale negative sample cannot dominate the step).

    Stats: ``clip_fraction`` (the clipped term is the active one), ``clip_low_fraction`` /
    ``clip_high_fraction`` (r below/above the range), ``dual_clip_fraction`` (A<0 and the dual
    bound is active), ``approx_kl`` (mean −Δ, k1), ``ratio_mean``, ``tokens``.
    """
    check_tokens({"logp_new": logp_new, "logp_old": logp_old, "adv": adv, "mask": mask}, fn="dual_clip_ppo_loss")
    if clip_c <= 1.0:
        raise ValueError(f"dual_clip_ppo_loss: clip_c must be > 1, got {clip_c}")
    m = as_bool(mask)
    delta = on_mask(logp_new - logp_old.detach(), m).clamp(-20.0, 20.0)
    ratio = torch.exp(delta)
    a = on_mask(adv.detach(), m)
    l1 = -a * ratio
    l2 = -a * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    clipped = torch.maximum(l1, l2)
    l3 = -a * clip_c
    dual = torch.minimum(clipped, l3)
    per_token = torch.where(a < 0, dual, clipped)
    loss = masked_mean(per_token, m)
    with torch.no_grad():
        stats = {
            "clip_fraction": masked_fraction(l2 > l1, m),
            "clip_low_fraction": masked_fraction(ratio < 1.0 - clip_low, m),
            "clip_high_fraction": masked_fraction(ratio > 1.0 + clip_high, m),
            "dual_clip_fraction": masked_fraction((a < 0) & (clipped > l3), m),
            "approx_kl": masked_mean(-delta, m).detach(),
            "ratio_mean": masked_mean(ratio, m).detach(),
            "tokens": m.sum().float(),
        }
    return loss, stats


@register_policy_loss("sao")
def _sao(logp_new: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor, *, eps_low: float,
         eps_high: float) -> tuple[Tensor, dict[str, Tensor]]:
    """:func:`apollo.rl.sao.sao_policy_loss` under the registry's argument names."""
    return sao.sao_policy_loss(logp_new, logp_old, adv, mask, eps_low=eps_low, eps_high=eps_high)


@register_policy_loss("policy_gradient")
def policy_gradient_loss(logp_new: Tensor, logp_old: Tensor, adv: Tensor,
                         mask: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Plain on-policy REINFORCE: ``−mean(A·logp_new)`` over the mask (``logp_old`` only for the KL stat)."""
    check_tokens({"logp_new": logp_new, "logp_old": logp_old, "adv": adv, "mask": mask}, fn="policy_gradient_loss")
    m = as_bool(mask)
    loss = -masked_mean(on_mask(adv.detach(), m) * on_mask(logp_new, m), m)
    return loss, {"approx_kl": masked_mean(on_mask(logp_old - logp_new, m), m).detach(), "tokens": m.sum().float()}


@register_advantage("grpo")
def grpo_advantages(rewards: Tensor, group_ids: Tensor | Sequence[Hashable], *, norm_by_std: bool = True) -> Tensor:
    """GRPO advantages ``[N]``: ``(R − group mean) / (group population std + 1e−6)`` (or only centred with
    ``norm_by_std=False``) within groups of equal id; a group of one gets 0."""
    keys = group_ids.tolist() if isinstance(group_ids, torch.Tensor) else list(group_ids)
    return group_normalize(rewards, keys, norm_by_std=norm_by_std, fn="grpo_advantages")


@register_advantage("appo_dual_group")
def _dual_group(rewards: Tensor, group_ids: Sequence[tuple[Hashable, str]], *, norm_by_std: bool = True) -> Tensor:
    """:func:`apollo.rl.appo.dual_group_advantages` with ``group_ids`` = (prompt id, kind) pairs."""
    pairs = list(group_ids)
    return appo.dual_group_advantages(rewards, [p for p, _ in pairs], [k for _, k in pairs], norm_by_std=norm_by_std)


def token_advantages(seq_adv: Tensor, mask: Tensor) -> Tensor:
    """Broadcast sequence advantages ``[B]`` onto the ``[B, T]`` mask (0 off the mask)."""
    check_tokens({"mask": mask}, fn="token_advantages")
    m = as_bool(mask)
    return on_mask(seq_adv[:, None].to(torch.float32).expand(m.shape), m)


def describe() -> dict[str, Any]:
    """Registered names (for error messages and ``--help``)."""
    return {"policy_losses": sorted(POLICY_LOSSES), "advantages": sorted(ADVANTAGES)}
