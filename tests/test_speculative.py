"""Speculative decoding in the hf engine's batcher: prompt-lookup drafts verified in one forward.

The sampling rule must keep the policy's distribution exactly (RL reads the logprobs of what was
sampled), greedy decoding must give the tokens of plain decoding, and a forward that feeds drafts
must return the logits the model computes at every drafted position."""

import pytest
import torch

from apollo.engines.hf import HFEngine
from apollo.engines.hf_batch import NgramDrafter, SlotKV, sample_token, speculative_accept, target_logprobs
from tests.test_hf_batch import _concurrently


def test_ngram_drafter_proposes_what_followed_the_latest_longest_match():
    d = NgramDrafter([5, 6, 7, 8, 1, 2, 6, 7, 9, 4, 6, 7])
    # the last 2-gram (6, 7) occurred twice before; the latest one was followed by 9, 4, …
    assert d.propose(3) == [9, 4, 6]
    d.extend([9])  # (6, 7, 9) occurred before: followed by 4
    assert d.propose(2) == [4, 6]
    d.extend([3])  # 3 never occurred: nothing to propose
    assert d.propose(4) == []
    d.extend([8])  # a 1-gram match only (8 was followed by 1)
    assert d.propose(2) == [1, 2]
    assert NgramDrafter([]).propose(3) == [] and NgramDrafter([1]).propose(3) == []
    # a draft stops at the sequence's end: a repeated run proposes its own continuation
    assert NgramDrafter([3, 3, 3]).propose(5) == [3]


def _freq(samples: list[int], v: int) -> torch.Tensor:
    return torch.bincount(torch.tensor(samples), minlength=v).double() / len(samples)


@pytest.mark.parametrize("draft_tok", [0, 3])  # a likely draft and an unlikely one
def test_speculative_sampling_keeps_the_target_distribution(draft_tok):
    """Each emitted token follows the tempered target distribution, whatever was drafted: the first
    token's frequencies match p0, and after an accepted draft the next token's match p1."""
    torch.manual_seed(0)
    logits = torch.tensor([[2.0, 1.0, 0.5, -0.5, 0.0], [0.0, 1.5, -1.0, 0.3, 0.7], [1.0, 0.0, 0.0, 0.0, 2.0]])
    temperature, n = 0.8, 20_000
    p = [target_logprobs(row, temperature).exp().double() for row in logits]
    rng = torch.Generator().manual_seed(1)
    first, second, lens = [], [], []
    for _ in range(n):
        out = speculative_accept(logits, [draft_tok, 1], rng, temperature)
        lens.append(len(out))
        first.append(out[0][0])
        if out[0][0] == draft_tok and len(out) > 1:
            second.append(out[1][0])
        for (tok, lp, ent), row in zip(out, p, strict=False):  # the policy's logprob and entropy
            assert lp == pytest.approx(float(row[tok].log()), abs=1e-5)
            assert ent == pytest.approx(float(-(row * row.log()).sum()), abs=1e-5)
    se = (p[0] * (1 - p[0]) / n).sqrt()
    assert ((_freq(first, 5) - p[0]).abs() <= 4 * se + 1e-3).all(), (_freq(first, 5), p[0])
    se1 = (p[1] * (1 - p[1]) / len(second)).sqrt()
    assert ((_freq(second, 5) - p[1]).abs() <= 4 * se1 + 1e-3).all(), (_freq(second, 5), p[1])
    assert max(lens) == 3 and min(lens) == 1  # all accepted (+ one sampled after them), and rejected at once


def test_speculative_greedy_accepts_exactly_the_argmax_prefix():
    logits = torch.tensor([[0.0, 3.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    rng = torch.Generator().manual_seed(0)
    assert [t for t, _, _ in speculative_accept(logits, [1, 0], rng, 0.0)] == [1, 0, 2]
    assert [t for t, _, _ in speculative_accept(logits, [1, 2], rng, 0.0)] == [1, 0]
    assert [t for t, _, _ in speculative_accept(logits, [2, 0], rng, 0.0)] == [1]
    assert speculative_accept(logits[:1], [], rng, 0.0)[0] == sample_token(logits[0], rng, 0.0)
    with pytest.raises(ValueError, match="2 draft tokens need 3 rows"):
        speculative_accept(logits[:2], [1, 0], rng, 0.0)


def test_slot_forward_returns_the_logits_of_every_drafted_position(micro_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(micro_model_dir).eval()
    g = torch.Generator().manual_seed(0)
    a, b = torch.randint(3, 200, (1, 60), generator=g), torch.randint(3, 200, (1, 90), generator=g)
    kv = SlotKV(model, 3, "cpu", max_len=512)
    with torch.no_grad():
        kv.take(), kv.take(), kv.take()
        kv.forward([(0, 0, a[0, :50].tolist()), (1, 0, b[0, :89].tolist())])
        # row 0 feeds 10 tokens (its last one and 9 drafts) with all their logits, row 1 decodes one,
        # row 2 prefills a short prompt in the same forward (all three attend in one batched matmul)
        c = a[:, 7:12]
        got = kv.forward([(0, 50, a[0, 50:].tolist()), (1, 89, [int(b[0, 89])]), (2, 0, c[0].tolist())],
                         outputs=[10, 1, 1])
        assert got.shape[0] == 12
        assert torch.allclose(got[:10], model(a).logits[0, 50:], atol=1e-4)
        assert torch.allclose(got[10], model(b).logits[0, -1], atol=1e-4)
        assert torch.allclose(got[11], model(c).logits[0, -1], atol=1e-4)
        with pytest.raises(ValueError, match="outputs"):
            kv.forward([(1, 90, [5])], outputs=[2])


def test_speculative_greedy_decoding_gives_the_tokens_of_plain_decoding(micro_model_dir):
    """Repetitive prompts (an agent's context repeats its tool calls): drafts are proposed and kept,
    fewer forwards run, and the tokens and logprobs are those of plain batched decoding."""
    prompts = [[{"role": "system", "content": "You are an agent."},
                {"role": "user", "content": ("run_command train eval finish open_file path " * (3 + i)).strip()}]
               for i in range(4)]
    plain = HFEngine(micro_model_dir, temperature=0.0, max_new_tokens=40, max_batch=4)
    spec = HFEngine(micro_model_dir, temperature=0.0, max_new_tokens=40, max_batch=4, speculate=6,
                    model=plain.model, tokenizer=plain.tokenizer)
    seeds = [100 + i for i in range(len(prompts))]
    ref, got = _concurrently(plain, prompts, seeds), _concurrently(spec, prompts, seeds)
    b = spec.batcher
    assert b.drafted > 0 and b.accepted > 0, "no draft was proposed or kept"
    assert b.forwards < plain.batcher.forwards
    for r, s in zip(ref, got, strict=True):
        assert s.token_ids == r.token_ids
        assert s.logprobs == pytest.approx(r.logprobs, abs=1e-4)
        assert s.entropies == pytest.approx(r.entropies, abs=1e-4)
        assert s.finish_reason == r.finish_reason
