"""SAO (arXiv 2607.07508): single-rollout asynchronous RL with a value model and strict
double-sided importance masks. Pure functions: torch in, torch out, no I/O.

These names and keyword arguments are a conformance surface (checked against an independent
reference implementation): keep them stable. Shapes: ``[B, T]`` token tensors; ``mask`` /
``action_mask`` is 1 on the policy's action tokens (tool observations, guidance and prompt text are
0). Off-mask inputs never influence a result.
"""

from __future__ import annotations

import torch

from apollo.rl.functional import (
    as_bool,
    check_rows,
    check_tokens,
    discounted_future_sum,
    masked_fraction,
    masked_mean,
    on_mask,
)

Tensor = torch.Tensor


def dis_mask(logp_new: Tensor, logp_rollout: Tensor, mask: Tensor, *, eps_low: float, eps_high: float) -> Tensor:
    """Double-sided importance mask (bool ``[B, T]``): ``1−eps_low < r < 1+eps_high`` (strict) and on ``mask``,
    with ``r = exp(logp_new − logp_rollout)``. Tokens outside the band are dropped, not clamped."""
    check_tokens({"logp_new": logp_new, "logp_rollout": logp_rollout, "mask": mask}, fn="dis_mask")
    m = as_bool(mask)
    with torch.no_grad():
        r = torch.exp(on_mask(logp_new.detach() - logp_rollout.detach(), m))
        return (r > 1.0 - eps_low) & (r < 1.0 + eps_high) & m


def sao_policy_loss(logp_new: Tensor, logp_rollout: Tensor, adv: Tensor, mask: Tensor, *,
                    eps_low: float, eps_high: float) -> tuple[Tensor, dict[str, Tensor]]:
    """SAO policy loss → ``(loss, stats)``.

    ``loss = −Σ f(r_t)·A_t·logp_new_t / (number of action tokens)`` with ``f(r) = r`` (detached)
    inside the band of :func:`dis_mask` and 0 outside, whatever the sign of ``A``. The denominator
    counts every action token of ``mask``, out-of-band ones included (they add 0 to the numerator),
    as the reference implementations of this bypass-mode objective do (twinkle; verl's
    ``token-mean`` over the response mask): dividing by the in-band tokens instead would enlarge the
    step exactly when many tokens drift out of the band, which the mask is there to damp. Its
    gradient is ``sg(r)·A·∇logp / n_action`` on in-band tokens and exactly 0 on out-of-band ones.

    Stats (detached scalars): ``masked_fraction`` (action tokens outside the band), ``low_fraction``
    / ``high_fraction`` (r ≤ 1−eps_low / r ≥ 1+eps_high), ``kept_tokens``, ``action_tokens``,
    ``ratio_mean`` (over action tokens), ``adv_mean`` (over kept tokens).
    """
    check_tokens({"logp_new": logp_new, "logp_rollout": logp_rollout, "adv": adv, "mask": mask},
                 fn="sao_policy_loss")
    m = as_bool(mask)
    keep = dis_mask(logp_new, logp_rollout, m, eps_low=eps_low, eps_high=eps_high)
    lp = on_mask(logp_new, keep)  # out-of-band tokens leave the graph here
    with torch.no_grad():
        r = torch.exp(on_mask(logp_new.detach() - logp_rollout.detach(), m))
    weight = on_mask(r * adv.detach(), keep)
    n_keep = keep.sum()
    loss = -(weight * lp).sum() / m.sum().clamp(min=1).to(lp.dtype)  # all action tokens: see the docstring
    stats = {
        "masked_fraction": masked_fraction(~keep, m),
        "low_fraction": masked_fraction(r <= 1.0 - eps_low, m),
        "high_fraction": masked_fraction(r >= 1.0 + eps_high, m),
        "kept_tokens": n_keep.detach().float(),
        "action_tokens": m.sum().detach().float(),
        "ratio_mean": masked_mean(r, m).detach(),
        "adv_mean": masked_mean(adv.detach(), keep).detach(),
    }
    return loss, stats


def skip_observation_gae(rewards: Tensor, values: Tensor, action_mask: Tensor, *, gamma: float = 1.0,
                         lam: float | Tensor = 1.0) -> tuple[Tensor, Tensor]:
    """GAE chained over action tokens only → ``(advantages, returns)``, both ``[B, T]``, 0 off the mask.

    Observation (tool output, guidance, prompt) tokens are skipped as if absent: for the action
    tokens ``t_1 < … < t_n`` of a row, ``δ_i = r_{t_i} + γ·V_{t_{i+1}} − V_{t_i}`` (so the next value
    after an action's last token is the value at the next action's first token, and 0 after the last
    action) and ``A_i = δ_i + γλ·A_{i+1}``. ``lam`` is a float or a per-row tensor ``[B]`` (the
    policy's ``policy_lambda`` per trajectory); rewards off the action mask are ignored (put the
    outcome reward on the last action token). ``returns = advantages + values`` on action tokens.
    """
    bsz, t_len = check_tokens({"rewards": rewards, "values": values, "action_mask": action_mask},
                              fn="skip_observation_gae")
    m = as_bool(action_mask)
    dtype = values.dtype if values.is_floating_point() else torch.float32
    lam_t = torch.as_tensor(lam, dtype=dtype, device=values.device)
    if lam_t.dim() == 1:
        check_rows("lam", lam_t, bsz, fn="skip_observation_gae")
    elif lam_t.dim() != 0:
        raise ValueError(f"skip_observation_gae: lam must be a float or [B], got shape {tuple(lam_t.shape)}")
    with torch.no_grad():
        r = on_mask(rewards.detach().to(dtype), m)
        v = on_mask(values.detach().to(dtype), m)
        # compact each row's action tokens to the front (stable: their order is kept)
        order = torch.argsort((~m).to(torch.int8), dim=1, stable=True)
        n_act = int(m.sum(dim=1).max()) if t_len else 0
        order = order[:, :n_act]
        valid = torch.gather(m, 1, order)
        rc, vc = torch.gather(r, 1, order), torch.gather(v, 1, order)
        v_next = torch.zeros_like(vc)
        v_next[:, :-1] = torch.where(valid[:, 1:], vc[:, 1:], torch.zeros((), dtype=dtype, device=vc.device))
        delta = on_mask(rc + gamma * v_next - vc, valid)
        adv_c = discounted_future_sum(delta, gamma * lam_t) if n_act else delta
        adv = torch.zeros_like(v)
        adv.scatter_(1, order, on_mask(adv_c, valid))
        adv = on_mask(adv, m)
        returns = on_mask(adv + v, m)
    return adv, returns


def policy_lambda(n_action_tokens: int | float | Tensor, *, alpha: float = 1.5) -> float | Tensor:
    """SAO's length-adaptive policy λ: ``clip(1 − 1/(alpha·n), 0, 1)`` (``n`` = action tokens of a trajectory).

    A float for a number, a tensor for a tensor; ``n = 0`` gives 0.
    """
    if isinstance(n_action_tokens, torch.Tensor):
        n = n_action_tokens.to(torch.float64 if n_action_tokens.dtype == torch.float64 else torch.float32)
        return (1.0 - 1.0 / (alpha * n)).clamp(0.0, 1.0)
    n = float(n_action_tokens)
    if n == 0:  # the formula's limit (−inf, clipped)
        return 0.0
    return min(1.0, max(0.0, 1.0 - 1.0 / (alpha * n)))


__all__ = ["dis_mask", "sao_policy_loss", "skip_observation_gae", "policy_lambda"]
