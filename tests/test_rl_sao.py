"""SAO pure functions: hand-computed cases and properties (strict band, gradients only in band,
GAE that skips observations, per-row λ)."""

from __future__ import annotations

import math

import pytest
import torch

from apollo.rl.sao import dis_mask, policy_lambda, sao_policy_loss, skip_observation_gae

NAN = float("nan")


def t(x, dtype=torch.float64):
    return torch.tensor(x, dtype=dtype)


# ----------------------------------------------------------------------------------------- dis_mask


def test_dis_mask_is_strict_and_on_mask():
    # ratios 0.5 (= 1 − eps_low: out), 0.50001 (in), 1.8 (= 1 + eps_high: out), 1.79 (in), 1 off the mask
    lp = t([[math.log(0.5), math.log(0.50001), math.log(1.8), math.log(1.79), 0.0]])
    keep = dis_mask(lp, torch.zeros_like(lp), t([[1, 1, 1, 1, 0]]), eps_low=0.5, eps_high=0.8)
    assert keep.dtype == torch.bool and keep.tolist() == [[False, True, False, True, False]]


# ---------------------------------------------------------------------------------- sao_policy_loss


def _sao_case():
    r = [1.0, 1.5, 0.5, 2.0, 0.9, 1.0]
    lp_new = t([[math.log(x) for x in r]]).requires_grad_(True)
    adv = t([[1.0, -2.0, 1.0, 3.0, -1.0, 5.0]])
    mask = t([[1, 1, 1, 1, 1, 0]])
    return lp_new, torch.zeros_like(lp_new), adv, mask


def test_sao_loss_hand_case():
    lp_new, lp_roll, adv, mask = _sao_case()
    loss, stats = sao_policy_loss(lp_new, lp_roll, adv, mask, eps_low=0.3, eps_high=0.8)
    # band (0.7, 1.8): tokens 0 (r 1), 1 (r 1.5), 4 (r 0.9) in; 2 (r 0.5), 3 (r 2.0) out; 5 off the mask
    # loss = −(1·1·log 1 + 1.5·(−2)·log 1.5 + 0.9·(−1)·log 0.9) / 5 (the 5 action tokens, not the 3 in band)
    assert float(loss) == pytest.approx(-(1.5 * -2 * math.log(1.5) + 0.9 * -1 * math.log(0.9)) / 5, abs=1e-12)
    assert float(loss) == pytest.approx(0.3738569534108165 * 3 / 5, abs=1e-12)
    loss.backward()
    # ∂/∂logp_t = −sg(r_t)·A_t / 5 in band, 0 elsewhere
    assert lp_new.grad[0].tolist() == pytest.approx([-1 / 5, 0.6, 0.0, 0.0, 0.18, 0.0], abs=1e-12)
    assert float(stats["masked_fraction"]) == pytest.approx(0.4)
    assert float(stats["low_fraction"]) == pytest.approx(0.2) and float(stats["high_fraction"]) == pytest.approx(0.2)
    assert float(stats["kept_tokens"]) == 3 and float(stats["action_tokens"]) == 5


def test_sao_loss_divides_by_action_tokens_when_half_are_out_of_band():
    # 4 action tokens, r = 1.0, 1.2 in the band (0.7, 1.8); r = 0.5, 2.5 out of it
    lp_new = t([[0.0, math.log(1.2), math.log(0.5), math.log(2.5)]]).requires_grad_(True)
    adv, mask = t([[2.0, -1.0, 3.0, 4.0]]), t([[1, 1, 1, 1]])
    loss, stats = sao_policy_loss(lp_new, torch.zeros_like(lp_new), adv, mask, eps_low=0.3, eps_high=0.8)
    # −(1·2·log 1 + 1.2·(−1)·log 1.2) / 4 = 1.2·log 1.2 / 4 ≈ 0.054696 (÷ 2 in-band tokens would be twice that)
    assert float(loss) == pytest.approx(1.2 * math.log(1.2) / 4, abs=1e-12)
    assert float(loss) == pytest.approx(0.054696467038, abs=1e-10)
    loss.backward()
    assert lp_new.grad[0].tolist() == pytest.approx([-2 / 4, 1.2 / 4, 0.0, 0.0], abs=1e-12)
    assert float(stats["kept_tokens"]) == 2 and float(stats["action_tokens"]) == 4
    assert float(stats["masked_fraction"]) == 0.5


def test_sao_gradient_zero_out_of_band_whatever_the_sign():
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        lp_new = (torch.randn(4, 9, generator=g, dtype=torch.float64) * 0.8).requires_grad_(True)
        lp_roll = torch.randn(4, 9, generator=g, dtype=torch.float64) * 0.8
        adv = torch.randn(4, 9, generator=g, dtype=torch.float64) * 3
        mask = (torch.rand(4, 9, generator=g) > 0.2).double()
        loss, _ = sao_policy_loss(lp_new, lp_roll, adv, mask, eps_low=0.3, eps_high=0.5)
        loss.backward()
        keep = dis_mask(lp_new, lp_roll, mask, eps_low=0.3, eps_high=0.5)
        assert (~keep).any() and keep.any()
        assert lp_new.grad[~keep].abs().max() == 0
        assert (lp_new.grad[keep] != 0).all()


def test_sao_loss_ignores_garbage_off_mask_and_empty_band():
    lp_new, lp_roll, adv, mask = _sao_case()
    lp2, adv2 = lp_new.detach().clone(), adv.clone()
    lp2[0, 5], adv2[0, 5] = NAN, NAN
    a, _ = sao_policy_loss(lp_new.detach(), lp_roll, adv, mask, eps_low=0.3, eps_high=0.8)
    b, _ = sao_policy_loss(lp2, lp_roll, adv2, mask, eps_low=0.3, eps_high=0.8)
    assert float(a) == float(b)
    x = t([[3.0, 3.0]]).requires_grad_(True)
    loss, stats = sao_policy_loss(x, torch.zeros_like(x), t([[1.0, 1.0]]), t([[1, 1]]), eps_low=0.3, eps_high=0.8)
    loss.backward()
    assert float(loss) == 0 and float(stats["masked_fraction"]) == 1.0 and x.grad.abs().max() == 0


# ------------------------------------------------------------------------------ skip_observation_gae


def test_gae_hand_case_skips_observations():
    # action tokens at 0, 1, 4; tokens 2, 3, 5 are observations (their values/rewards are ignored)
    rewards = t([[0.0, 0.0, 5.0, 5.0, 1.0, 5.0]])
    values = t([[0.5, 0.6, 9.0, 9.0, 0.8, 9.0]])
    mask = t([[1, 1, 0, 0, 1, 0]])
    adv, ret = skip_observation_gae(rewards, values, mask, gamma=0.9, lam=0.5)
    # δ4 = 1 + 0.9·0 − 0.8 = 0.2; δ1 = 0 + 0.9·0.8 − 0.6 = 0.12; δ0 = 0 + 0.9·0.6 − 0.5 = 0.04
    # A4 = 0.2; A1 = 0.12 + 0.45·0.2 = 0.21; A0 = 0.04 + 0.45·0.21 = 0.1345
    assert adv[0].tolist() == pytest.approx([0.1345, 0.21, 0.0, 0.0, 0.2, 0.0], abs=1e-12)
    assert ret[0].tolist() == pytest.approx([0.6345, 0.81, 0.0, 0.0, 1.0, 0.0], abs=1e-12)
    # γ = λ = 1 (the critic's λ): A_t = Σ future rewards − V_t
    adv1, ret1 = skip_observation_gae(rewards, values, mask)
    assert adv1[0].tolist() == pytest.approx([0.5, 0.4, 0.0, 0.0, 0.2, 0.0], abs=1e-12)
    assert ret1[0].tolist() == pytest.approx([1.0, 1.0, 0.0, 0.0, 1.0, 0.0], abs=1e-12)


def test_gae_per_row_lambda_and_observation_invariance():
    rewards = t([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    values = t([[0.5, 0.6, 0.8], [0.5, 0.6, 0.8]])
    mask = t([[1, 1, 1], [1, 1, 1]])
    adv, _ = skip_observation_gae(rewards, values, mask, gamma=0.9, lam=t([0.5, 0.0]))
    assert adv[0].tolist() == pytest.approx([0.1345, 0.21, 0.2], abs=1e-12)
    assert adv[1].tolist() == pytest.approx([0.04, 0.12, 0.2], abs=1e-12)  # λ = 0: A = δ
    # observations inserted anywhere (any values, any rewards) change nothing on the action tokens
    g = torch.Generator().manual_seed(3)
    r_obs = torch.randn(2, 7, generator=g, dtype=torch.float64)
    v_obs = torch.randn(2, 7, generator=g, dtype=torch.float64)
    m_obs = t([[0, 1, 0, 0, 1, 1, 0], [1, 0, 1, 0, 0, 0, 1]])
    for b in range(2):
        pos = m_obs[b].nonzero().flatten()
        r_obs[b, pos], v_obs[b, pos] = rewards[b], values[b]
    v_obs[0, 0] = NAN
    adv_obs, ret_obs = skip_observation_gae(r_obs, v_obs, m_obs, gamma=0.9, lam=t([0.5, 0.0]))
    for b in range(2):
        pos = m_obs[b].nonzero().flatten()
        assert torch.allclose(adv_obs[b, pos], adv[b], atol=1e-12)
        assert adv_obs[b][m_obs[b] == 0].abs().max() == 0 and ret_obs[b][m_obs[b] == 0].abs().max() == 0


def test_gae_empty_rows_and_bad_lambda():
    adv, ret = skip_observation_gae(torch.ones(2, 3), torch.ones(2, 3), torch.zeros(2, 3))
    assert adv.abs().max() == 0 and ret.abs().max() == 0
    with pytest.raises(ValueError, match="lam"):
        skip_observation_gae(torch.ones(2, 3), torch.ones(2, 3), torch.ones(2, 3), lam=torch.ones(3))


# ------------------------------------------------------------------------------------- policy_lambda


def test_policy_lambda():
    assert policy_lambda(1) == pytest.approx(1 - 1 / 1.5)
    assert policy_lambda(2) == pytest.approx(1 - 1 / 3)
    assert policy_lambda(100) == pytest.approx(1 - 1 / 150)
    assert policy_lambda(0) == 0.0
    assert policy_lambda(1, alpha=0.5) == 0.0  # 1 − 2 clipped
    out = policy_lambda(torch.tensor([0, 1, 4]))
    assert out.tolist() == pytest.approx([0.0, 1 - 1 / 1.5, 1 - 1 / 6])
