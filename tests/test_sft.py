"""The trainer's loop with the SFT objective (torch backend): loss goes down, packing is clean, runs are
deterministic. Configs are params.yaml's ``train`` section with a few fields overridden."""

from __future__ import annotations

import pytest
import torch

from apollo.data.tokenize import render, tokenize_conversation
from apollo.models.bootstrap import synthetic_conversations
from apollo.models.tiny import make_config, make_model, train_tokenizer
from apollo.train.batching import IGNORE_INDEX, collate, make_rows
from apollo.train.config import train_config
from apollo.train.engine import cosine_lr
from apollo.train.loop import train as train_sft
from apollo.train.objectives import token_losses
from tests.presets import TINY_TRAIN

CONVS = synthetic_conversations(8, seed=2, steps=(3, 5))


def SFTConfig(**overrides):  # noqa: N802 - params.yaml's train section, a few fields overridden
    return train_config(**{**TINY_TRAIN, **overrides})[0]


@pytest.fixture(scope="module")
def tok():
    probe = train_tokenizer(["a b"], vocab_size=300)
    return train_tokenizer([render(probe, c) for c in CONVS], vocab_size=800)


@pytest.fixture(scope="module")
def examples(tok):
    return [tokenize_conversation(tok, c) for c in CONVS]


def micro(tok, seed=0):
    return make_model(make_config(tok, "micro"), seed=seed)


def test_loss_goes_down_and_logs(tok, examples):
    logs = []
    cfg = SFTConfig(max_steps=24, lr=3e-3, warmup_steps=3, grad_accum=1, log_every=6, progress=False)
    stats = train_sft(micro(tok), examples, cfg, on_log=logs.append)
    assert stats["steps"] == 24 and len(logs) == 4
    assert logs[-1]["loss"] < logs[0]["loss"] - 1.0
    assert stats["trained_tokens"] > 0 and stats["tokens"] > stats["trained_tokens"]
    for key in ("loss", "lr", "tokens_per_s", "trained_tokens", "grad_norm"):
        assert key in logs[0]
    assert all(torch.isfinite(torch.tensor(log["loss"])) for log in logs)


def test_deterministic(tok, examples):
    cfg = SFTConfig(max_steps=4, micro_batch_size=2, grad_accum=2, progress=False, seed=5)
    a, b = micro(tok, 1), micro(tok, 1)
    sa, sb = train_sft(a, examples, cfg), train_sft(b, examples, cfg)
    assert sa["final_loss"] == sb["final_loss"]
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packing_has_no_cross_contamination(tok, examples, attn):
    model = make_model(make_config(tok, "micro"), seed=0, attn_implementation=attn).eval()
    a, b = examples[0], examples[1]
    seg = lambda e: (e["input_ids"][:300], e["labels"][:300])  # noqa: E731
    packed = collate([[seg(a), seg(b)]])
    alone_b = collate([[seg(b)]])
    assert packed["attention_mask"] is not None and alone_b["attention_mask"] is None
    assert packed["position_ids"][0, 300].item() == 0  # positions restart for the second sample
    with torch.no_grad():
        lp = model(**{k: v for k, v in packed.items() if k != "labels"}).logits
        lb = model(**{k: v for k, v in alone_b.items() if k != "labels"}).logits
        la = model(**{k: v for k, v in collate([[seg(a)]]).items() if k != "labels"}).logits
    assert torch.allclose(lp[0, 300:], lb[0], atol=1e-4)
    assert torch.allclose(lp[0, :300], la[0], atol=1e-4)
    # the summed loss of the packed row is the sum of the two samples' losses
    with torch.no_grad():
        (lp_sum, n_p), (la_sum, n_a), (lb_sum, n_b) = (
            token_losses(model, packed), token_losses(model, collate([[seg(a)]])), token_losses(model, alone_b)
        )
    assert n_p == n_a + n_b and abs(float(lp_sum) - float(la_sum + lb_sum)) < 1e-3


def test_padding_in_micro_batch_matches_single(tok, examples):
    model = micro(tok).eval()
    a, b = examples[0], examples[1]
    batch = collate([[(a["input_ids"], a["labels"])], [(b["input_ids"][:100], b["labels"][:100])]])
    assert batch["labels"][1, 100:].eq(IGNORE_INDEX).all()
    with torch.no_grad():
        lb = model(**{k: v for k, v in batch.items() if k != "labels"}).logits[1, :100]
        ref = model(input_ids=torch.tensor([b["input_ids"][:100]])).logits[0]
    assert torch.allclose(lb, ref, atol=1e-4)


def test_packed_training_runs(tok, examples):
    rows = make_rows(examples, max_length=4096, packing=True)
    assert len(rows) < len(examples) and sorted(i for r in rows for i in r) == list(range(len(examples)))
    stats = train_sft(micro(tok), examples, SFTConfig(max_steps=3, packing=True, grad_accum=1, progress=False))
    assert stats["rows"] == len(rows) and stats["final_loss"] > 0


def test_cosine_schedule():
    kw = dict(lr=1e-3, min_lr=1e-4, warmup_steps=10, total_steps=110)
    assert cosine_lr(0, **kw) == pytest.approx(1e-4)
    assert cosine_lr(9, **kw) == pytest.approx(1e-3)
    assert cosine_lr(60, **kw) == pytest.approx(5.5e-4)
    assert cosine_lr(110, **kw) == pytest.approx(1e-4)


def test_example_without_trained_tokens_raises(tok, examples):
    bad = {"input_ids": examples[0]["input_ids"], "labels": [IGNORE_INDEX] * len(examples[0]["input_ids"])}
    with pytest.raises(ValueError, match="no trained token"):
        train_sft(micro(tok), [examples[1], bad], SFTConfig(max_steps=1, progress=False))
