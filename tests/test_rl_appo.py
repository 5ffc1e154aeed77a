"""APPO pure functions: hand-computed cases (numbers worked out by hand / with numpy, written out
here), and properties (masks, padding, gradients, shapes)."""

from __future__ import annotations

import math

import pytest
import torch

from apollo.rl.appo import branch_credit, branch_scores, dual_group_advantages, future_aware_advantages
from apollo.rl.functional import discounted_future_sum

NAN = float("nan")


def t(x, dtype=torch.float64):
    return torch.tensor(x, dtype=dtype)


# ----------------------------------------------------------------------------------- branch_scores


def test_branch_scores_hand_case():
    # log-ratios 0.1, −0.05, 0 on three valid tokens; the 4th token is padding (nan everywhere)
    lp_pol = t([[0.1, -0.05, 0.0, NAN]])
    lp_roll = t([[0.0, 0.0, 0.0, NAN]])
    ent = t([[1.0, 2.0, 3.0, NAN]])
    mask = t([[1, 1, 1, 0]])
    scores, zh, zf = branch_scores(ent, lp_pol, lp_roll, mask)
    # future sums (γ=1): 0.05, −0.05, 0 → FV = e^0.05, e^−0.05, 1 (inside [0.8, 1.2])
    # Z(H): mean 2, population std sqrt(2/3)
    assert zh[0].tolist() == pytest.approx([-1.2247433713934262, 0.0, 1.2247433713934262, 0.0], abs=1e-9)
    assert zf[0].tolist() == pytest.approx([1.2347901557247676, -1.2143846169294432, -0.020405538795324273, 0.0],
                                           abs=1e-6)
    assert scores[0].tolist() == pytest.approx([-1.5123010582857654, 0.0, -0.0249915483792848, 0.0], abs=1e-6)


def test_branch_scores_discount_and_clip():
    # γ = 0.5: future sums 0.1 + 0.5·(0.2 + 0.5·(−0.4)) = 0.1, 0.2 + 0.5·(−0.4) = 0, −0.4
    # FV = e^0.1 = 1.10517, 1, e^−0.4 = 0.670 → clipped to 0.8
    lp = t([[0.1, 0.2, -0.4]])
    _, _, zf = branch_scores(t([[1.0, 2.0, 0.5]]), lp, torch.zeros_like(lp), t([[1, 1, 1]]), gamma=0.5)
    assert zf[0].tolist() == pytest.approx([1.0806236729388978, 0.24972971747568654, -1.330353390414582], abs=1e-6)


def test_branch_scores_clamps_summed_log_ratio_at_20():
    # log-ratios 10, 15, 0 → future sums 25, 15, 0 → clamped 20, 15, 0 → FV e^20, e^15, 1 (no clip)
    lp = t([[10.0, 15.0, 0.0]])
    _, _, zf = branch_scores(t([[1.0, 2.0, 3.0]]), lp, torch.zeros_like(lp), t([[1, 1, 1]]), fv_clip=0.0)
    # (without the clamp e^25 would dominate: ≈ [1.414, −0.707, −0.707])
    assert zf[0].tolist() == pytest.approx([1.4141893230096991, -0.6999239562387572, -0.7142653667709419], abs=1e-5)


def test_branch_scores_single_and_empty_rows_are_zero():
    ent, lp = t([[3.0, 1.0], [2.0, 5.0]]), t([[0.3, 0.1], [0.2, 0.4]])
    scores, zh, zf = branch_scores(ent, lp, torch.zeros_like(lp), t([[1, 0], [0, 0]]))
    assert scores.abs().max() == 0 and zh.abs().max() == 0 and zf.abs().max() == 0


def test_branch_scores_padding_invariance_and_rows_independent():
    g = torch.Generator().manual_seed(0)
    ent, lp, lr = (torch.rand(3, 7, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(3, 7)
    mask[1, 5:] = 0
    base = branch_scores(ent, lp, lr, mask, gamma=0.9)
    # pad with garbage columns off the mask
    pad = lambda x, v: torch.cat([x, torch.full((3, 4), v, dtype=x.dtype)], dim=1)  # noqa: E731
    padded = branch_scores(pad(ent, NAN), pad(lp, 1e9), pad(lr, NAN), pad(mask, 0), gamma=0.9)
    for a, b in zip(base, padded):
        assert torch.equal(b[:, 7:], torch.zeros(3, 4, dtype=b.dtype))
        assert torch.allclose(a, b[:, :7], atol=1e-12)
    # changing row 1's masked-out tail or another row changes nothing in row 1
    ent2 = ent.clone()
    ent2[1, 6] = 100.0
    ent2[0] = 7.0
    assert torch.allclose(branch_scores(ent2, lp, lr, mask, gamma=0.9)[0][1], base[0][1])


def test_branch_scores_shape_errors():
    with pytest.raises(ValueError, match="logp_policy"):
        branch_scores(torch.zeros(2, 3), torch.zeros(2, 4), torch.zeros(2, 3), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        branch_scores(torch.zeros(3), torch.zeros(3), torch.zeros(3), torch.ones(3))


# --------------------------------------------------------------------------- dual_group_advantages


def test_dual_group_advantages_hand_case():
    rewards = t([1.0, 0.0, 0.5, 1.0, 0.0, 0.3])
    prompts = [0, 0, 0, 0, 0, 1]
    kinds = ["init", "init", "init", "branch", "branch", "init"]
    adv = dual_group_advantages(rewards, prompts, kinds)
    # (0, init): mean 0.5, population std sqrt(1/6) = 0.408248; (0, branch): mean 0.5, std 0.5; (1, init): alone
    s = math.sqrt(1 / 6) + 1e-6
    assert adv.tolist() == pytest.approx([0.5 / s, -0.5 / s, 0.0, 0.5 / 0.500001, -0.5 / 0.500001, 0.0], abs=1e-12)
    centred = dual_group_advantages(rewards, torch.tensor(prompts), kinds, norm_by_std=False)
    assert centred.tolist() == pytest.approx([0.5, -0.5, 0.0, 0.5, -0.5, 0.0], abs=1e-12)


def test_dual_group_advantages_groups_are_separate():
    # same rewards, but the branch rows must not shift the initial rows' baseline
    a = dual_group_advantages(t([1.0, 0.0]), ["p", "p"], ["init", "init"])
    b = dual_group_advantages(t([1.0, 0.0, 5.0, 7.0]), ["p", "p", "p", "p"], ["init", "init", "branch", "branch"])
    assert torch.allclose(a, b[:2])
    with pytest.raises(ValueError, match="kinds"):
        dual_group_advantages(t([1.0, 0.0]), [0, 0], ["init", "tree"])
    with pytest.raises(ValueError, match="prompt_ids"):
        dual_group_advantages(t([1.0, 0.0]), [0], ["init", "init"])


# ----------------------------------------------------------------------------------- branch_credit


def test_branch_credit_hand_case():
    init_adv = t([1.0, -0.5])
    branch_adv = t([0.4, -0.2, 2.0])
    parent = torch.tensor([0, 0, 1])
    split = torch.tensor([1, 3, 0])
    mask = t([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
    out = branch_credit(init_adv, branch_adv, parent, split, mask)
    # row 0: t≤1 covered by b0, b1 → mean(0.4, −0.2) = 0.1; t = 2, 3 by b1 only → −0.2; t4 off the mask
    # row 1: t0 covered by b2 → +2.0; later tokens keep A = −0.5
    assert torch.allclose(out, t([[1.1, 1.1, 0.8, 0.8, 0.0], [1.5, -0.5, -0.5, 0.0, 0.0]]), atol=1e-12, rtol=0)


def test_branch_credit_without_branches_is_broadcast():
    mask = t([[1, 1, 0], [0, 1, 1]])
    out = branch_credit(t([2.0, -1.0]), t([]), torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long),
                        mask)
    assert out.tolist() == [[2.0, 2.0, 0.0], [0.0, -1.0, -1.0]]
    with pytest.raises(ValueError, match="branch_parent"):
        branch_credit(t([2.0, -1.0]), t([1.0]), torch.tensor([2]), torch.tensor([0]), mask)


# ------------------------------------------------------------------------- future_aware_advantages


def _fa_case():
    delta = t([[0.1, 0.2, 1.5, -0.3]])  # token 2: Δ > log 3, left out of FutureKL
    return t([[1.0, -1.0, -1.0, 2.0]]), delta, torch.zeros_like(delta), t([[1, 1, 1, 1]])


def test_future_aware_hand_case():
    adv, lp_new, lp_old, mask = _fa_case()
    # γ = 2^(−1/1) = 0.5; FutureKL: t3 −0.3; t2 0 + 0.5·(−0.3) = −0.15; t1 0.2 + 0.5·(−0.15) = 0.125;
    # t0 0.1 + 0.5·0.125 = 0.1625 → exp = 1.17645, 1.13315, 0.86071, 0.74082
    out = future_aware_advantages(adv, lp_new, lp_old, mask, decay_rate=1.0)
    # clip_high_only: f = 1.17645, 1.13315, 1, 1 (exp(Δ) ≤ 6 everywhere: no safety clip)
    assert out[0].tolist() == pytest.approx([2.1764483184486905, -2.1331484530668263, -2.0, 4.0], abs=1e-9)
    two_sided = future_aware_advantages(adv, lp_new, lp_old, mask, decay_rate=1.0, clip_high_only=False)
    # f = 1.17645, 1.13315, 0.86071, 0.8
    assert two_sided[0].tolist() == pytest.approx([2.1764483184486905, -2.1331484530668263, -1.8607079764250578, 3.6],
                                                  abs=1e-9)
    # safety: A < 0 and exp(Δ) > 1.2 (tokens 1 and 2, r = 1.2214, 4.4817) → f clipped into [0.8, 1]
    safe = future_aware_advantages(adv, lp_new, lp_old, mask, decay_rate=1.0, safety_thresh=1.2)
    assert safe[0].tolist() == pytest.approx([2.1764483184486905, -2.0, -2.0, 4.0], abs=1e-9)
    half = future_aware_advantages(adv, lp_new, lp_old, mask, decay_rate=1.0, weight=0.5)
    assert half[0].tolist() == pytest.approx([1 + 0.5 * 1.1764483184486905, -(1 + 0.5 * 1.1331484530668263),
                                              -1.5, 3.0], abs=1e-9)
    assert torch.equal(future_aware_advantages(adv, lp_new, lp_old, mask, weight=0.0), adv)


def test_future_aware_default_decay_and_no_clip():
    # decay_rate 64: γ = 2^(−1/64) = 0.989228; FutureKL_0 = 0.1 + γ·0.1 = 0.198923, FutureKL_1 = 0.1
    adv, mask = t([[1.0, 1.0]]), t([[1, 1]])
    lp = t([[0.1, 0.1]])
    out = future_aware_advantages(adv, lp, torch.zeros_like(lp), mask, eps=0.0)
    g = 2 ** (-1 / 64)
    assert out[0].tolist() == pytest.approx([1 + math.exp(0.1 + g * 0.1), 1 + math.exp(0.1)], abs=1e-9)


def test_future_aware_masks_padding_and_detaches_weights():
    g = torch.Generator().manual_seed(1)
    adv = torch.randn(2, 6, generator=g, dtype=torch.float64, requires_grad=True)
    lp_new = (torch.randn(2, 6, generator=g, dtype=torch.float64) * 0.3).requires_grad_(True)
    lp_old = torch.randn(2, 6, generator=g, dtype=torch.float64) * 0.3
    mask = t([[1, 1, 1, 1, 0, 0], [1, 0, 1, 1, 1, 1]])
    out = future_aware_advantages(adv, lp_new, lp_old, mask)
    assert torch.equal(out[mask == 0], torch.zeros(3, dtype=out.dtype))
    out.sum().backward()
    assert lp_new.grad is None or lp_new.grad.abs().max() == 0  # f is detached
    assert adv.grad[mask == 0].abs().max() == 0 and (adv.grad[mask == 1] >= 1.0).all()  # 1 + f ≥ 1.8
    # garbage off the mask changes nothing
    lp2 = lp_new.detach().clone()
    lp2[0, 4:] = NAN
    assert torch.allclose(future_aware_advantages(adv.detach(), lp2, lp_old, mask), out.detach())


def test_discounted_future_sum_matches_loop_across_chunks():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 700, generator=g, dtype=torch.float64)
    gam = torch.tensor([1.0, 0.99, 0.5], dtype=torch.float64)
    ref = torch.zeros_like(x)
    acc = torch.zeros(3, dtype=torch.float64)
    for k in reversed(range(700)):
        acc = x[:, k] + gam * acc
        ref[:, k] = acc
    assert torch.allclose(discounted_future_sum(x, gam, chunk=64), ref, atol=1e-9)
