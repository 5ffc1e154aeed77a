"""Policy losses and advantage estimators: hand-computed dual-clip PPO and GRPO, the registries,
and mask/padding/gradient properties."""

from __future__ import annotations

import math

import pytest
import torch

from apollo.rl.losses import (
    ADVANTAGES,
    POLICY_LOSSES,
    dual_clip_ppo_loss,
    get_advantage,
    get_policy_loss,
    grpo_advantages,
)
from apollo.rl.sao import sao_policy_loss

NAN = float("nan")


def t(x, dtype=torch.float64):
    return torch.tensor(x, dtype=dtype)


def _ppo_case():
    r = [1.0, 1.5, 0.5, 0.5, 4.0, 1.0]
    lp_new = t([[math.log(x) for x in r]]).requires_grad_(True)
    adv = t([[1.0, 1.0, 1.0, -1.0, -1.0, 9.0]])
    return lp_new, torch.zeros_like(lp_new), adv, t([[1, 1, 1, 1, 1, 0]])


def test_dual_clip_ppo_hand_case():
    lp_new, lp_old, adv, mask = _ppo_case()
    loss, stats = dual_clip_ppo_loss(lp_new, lp_old, adv, mask)
    # per token (range [0.8, 1.28], c = 3):
    #   r 1,   A  1: max(−1, −1)          = −1
    #   r 1.5, A  1: max(−1.5, −1.28)     = −1.28 (clipped)
    #   r 0.5, A  1: max(−0.5, −0.8)      = −0.5
    #   r 0.5, A −1: max(0.5, 0.8) = 0.8, min(0.8, 3) = 0.8 (clipped)
    #   r 4,   A −1: max(4, 1.28) = 4,   min(4, 3)   = 3   (dual clip)
    assert float(loss) == pytest.approx((-1 - 1.28 - 0.5 + 0.8 + 3) / 5, abs=1e-12)
    assert float(stats["clip_fraction"]) == pytest.approx(2 / 5)
    assert float(stats["dual_clip_fraction"]) == pytest.approx(1 / 5)
    assert float(stats["clip_low_fraction"]) == pytest.approx(2 / 5)
    assert float(stats["clip_high_fraction"]) == pytest.approx(2 / 5)
    assert float(stats["tokens"]) == 5
    loss.backward()
    # ∂/∂logp = −A·r/5 where the unclipped term is active, 0 where clipped/dual-clipped/off the mask
    assert lp_new.grad[0].tolist() == pytest.approx([-0.2, 0.0, -0.1, 0.0, 0.0, 0.0], abs=1e-12)


def test_dual_clip_ppo_custom_bounds():
    lp = t([[math.log(1.1), math.log(0.95)]]).requires_grad_(True)
    loss, stats = dual_clip_ppo_loss(lp, torch.zeros_like(lp), t([[2.0, -1.0]]), t([[1, 1]]), clip_low=0.1,
                                     clip_high=0.05, clip_c=2.0)
    # r 1.1, A 2: max(−2.2, −2·1.05) = −2.1; r 0.95, A −1: max(0.95, 0.95) = 0.95, min(0.95, 2) = 0.95
    assert float(loss) == pytest.approx((-2.1 + 0.95) / 2, abs=1e-12)
    with pytest.raises(ValueError, match="clip_c"):
        dual_clip_ppo_loss(lp, torch.zeros_like(lp), t([[2.0, -1.0]]), t([[1, 1]]), clip_c=1.0)


def test_dual_clip_ppo_padding_invariance_and_garbage():
    lp_new, lp_old, adv, mask = _ppo_case()
    base, _ = dual_clip_ppo_loss(lp_new.detach(), lp_old, adv, mask)
    pad = lambda x, v: torch.cat([x, torch.full((1, 3), v, dtype=x.dtype)], dim=1)  # noqa: E731
    lp2 = pad(lp_new.detach(), NAN).requires_grad_(True)
    padded, _ = dual_clip_ppo_loss(lp2, pad(lp_old, NAN), pad(adv, NAN), pad(mask, 0))
    assert float(padded) == pytest.approx(float(base), abs=1e-12)
    padded.backward()
    assert torch.isfinite(lp2.grad).all() and lp2.grad[0, 5:].abs().max() == 0
    # a second row of all padding does not change the token mean
    two, _ = dual_clip_ppo_loss(torch.cat([lp_new.detach(), lp_new.detach()]), torch.cat([lp_old, lp_old]),
                                torch.cat([adv, adv]), torch.cat([mask, torch.zeros_like(mask)]))
    assert float(two) == pytest.approx(float(base), abs=1e-12)
    empty, _ = dual_clip_ppo_loss(lp_new, lp_old, adv, torch.zeros_like(mask))
    assert float(empty) == 0.0


def test_grpo_advantages_hand_case():
    rewards = t([1.0, 2.0, 0.0, 0.0, 1.0, 5.0])
    groups = torch.tensor([7, 7, 3, 3, 3, 9])
    adv = grpo_advantages(rewards, groups)
    # group 7: mean 1.5, std 0.5; group 3: mean 1/3, population std sqrt(2/9); group 9: alone → 0
    s = math.sqrt(2 / 9) + 1e-6
    assert adv.tolist() == pytest.approx([-0.5 / 0.500001, 0.5 / 0.500001, -1 / 3 / s, -1 / 3 / s, 2 / 3 / s, 0.0],
                                         abs=1e-12)
    centred = grpo_advantages(rewards, ["a", "a", "b", "b", "b", "c"], norm_by_std=False)
    assert centred.tolist() == pytest.approx([-0.5, 0.5, -1 / 3, -1 / 3, 2 / 3, 0.0], abs=1e-12)
    equal = grpo_advantages(t([0.7, 0.7, 0.7]), [0, 0, 0])
    assert equal.abs().max() < 1e-9  # no signal in a group of equal rewards (up to the mean's rounding / 1e-6)
    with pytest.raises(ValueError, match="group ids"):
        grpo_advantages(rewards, [0, 1])


def test_registries_select_by_name():
    assert get_policy_loss("dual_clip_ppo") is dual_clip_ppo_loss
    assert get_advantage("grpo") is grpo_advantages
    assert {"dual_clip_ppo", "sao", "policy_gradient"} <= set(POLICY_LOSSES)
    assert {"grpo", "appo_dual_group"} <= set(ADVANTAGES)
    lp_new, lp_old, adv, mask = _ppo_case()
    a, _ = get_policy_loss("sao")(lp_new, lp_old, adv, mask, eps_low=0.3, eps_high=0.8)
    b, _ = sao_policy_loss(lp_new, lp_old, adv, mask, eps_low=0.3, eps_high=0.8)
    assert float(a) == float(b)
    dg = get_advantage("appo_dual_group")(t([1.0, 0.0, 3.0]), [(0, "init"), (0, "init"), (0, "branch")])
    assert dg.tolist() == pytest.approx([1 / 1.000002, -1 / 1.000002, 0.0], abs=1e-9)
    with pytest.raises(ValueError, match="known"):
        get_policy_loss("ppo2")


def test_policy_gradient_loss_moves_positive_tokens_up():
    lp = t([[-1.0, -2.0, -0.5]]).requires_grad_(True)
    loss, _ = get_policy_loss("policy_gradient")(lp, lp.detach(), t([[1.0, -1.0, 4.0]]), t([[1, 1, 0]]))
    loss.backward()
    assert lp.grad[0].tolist() == pytest.approx([-0.5, 0.5, 0.0])  # descent raises A>0, lowers A<0
