"""LoRA in the one trainer (``lora`` in a train config, :mod:`apollo.train.lora`): the spec is checked
field by field, the adapters train in place and merge into the weights (a plain checkpoint, the
function kept, only the adapted projections moved, tied embeddings still tied), and the torch loop and
a DeepSpeed rank train the same adapters (tests/test_deepspeed_sft.py::test_lora_deepspeed_rank)."""

from __future__ import annotations

import pytest
import torch

from apollo.data.tokenize import render, tokenize_conversation
from apollo.models.bootstrap import synthetic_conversations
from apollo.models.tiny import make_config, make_model, train_tokenizer
from apollo.train.config import overlay_defaults, resolve_config, train_config
from apollo.train.loop import train
from apollo.train.lora import add_adapters, has_adapters, lora_spec, merge_adapters
from tests.presets import TINY_TRAIN

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}


@pytest.fixture(scope="module")
def data():
    convs = synthetic_conversations(8, seed=5, steps=(3, 5))
    probe = train_tokenizer(["a b"], vocab_size=300)
    tok = train_tokenizer([render(probe, c) for c in convs], vocab_size=600)
    return tok, [tokenize_conversation(tok, c) for c in convs]


def test_lora_spec_names_the_bad_field():
    assert lora_spec(None, "x") is None
    s = lora_spec(LORA, "x")
    assert (s.r, s.alpha, s.target_modules) == (4, 8.0, ("q_proj", "v_proj"))
    with pytest.raises(ValueError, match=r"x\.lora: unknown field\(s\) \['rank'\]"):
        lora_spec({**LORA, "rank": 4}, "x")
    with pytest.raises(ValueError, match=r"missing field\(s\) \['alpha'\]"):
        lora_spec({k: v for k, v in LORA.items() if k != "alpha"}, "x")
    with pytest.raises(ValueError, match=r"x\.lora\.r must be an integer"):
        lora_spec({**LORA, "r": 0}, "x")
    with pytest.raises(ValueError, match="target_modules"):
        lora_spec({**LORA, "target_modules": "q_proj"}, "x")
    with pytest.raises(ValueError, match=r"params\.yaml: train\.lora"):  # through the trainer's config
        resolve_config(overlay_defaults({"lora": {"r": 4}}))
    with pytest.raises(ValueError, match="zero_stage 3"):
        resolve_config(overlay_defaults({"lora": LORA, "zero_stage": 3}))
    cfg, _ = resolve_config(overlay_defaults({"lora": LORA}))
    assert cfg.lora == s


def test_merge_keeps_what_the_adapted_model_computes(data):
    tok, _ = data
    model = make_model(make_config(tok, "micro"), seed=0).eval()
    ids = torch.randint(5, 500, (2, 24), generator=torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match="no linear module of this model has that name"):
        add_adapters(model, lora_spec({**LORA, "target_modules": ["query"]}, "x"))
    handle = add_adapters(model, lora_spec(LORA, "x"))
    for n, p in model.named_parameters():
        if "lora_B" in n:  # B starts at 0 (the adapted model equals the base): give it a value
            p.data.normal_(0, 0.05)
    with torch.no_grad():
        adapted = model(ids).logits
    merged = merge_adapters(handle)
    assert merged is model and not has_adapters(model)
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, adapted, atol=1e-5)
    assert all(p.requires_grad for p in model.parameters())


def test_lora_trains_only_the_adapted_projections_in_place(data):
    tok, rows = data
    model = make_model(make_config(tok, "micro"), seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg, _ = train_config(**{**TINY_TRAIN, "lr": 1e-2, "min_lr": 1e-2, "warmup_steps": 0, "grad_accum": 1,
                             "max_steps": 12, "progress": False, "log_every": 1, "lora": LORA})
    stats = train(model, rows, cfg)
    assert not has_adapters(model)
    after = model.state_dict()
    assert list(after) == list(before)  # a plain checkpoint: the same keys, no adapter left
    moved = {k for k in after if not torch.equal(after[k], before[k])}
    assert moved and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in moved), sorted(moved)
    assert stats["final_loss"] < stats["first_loss"]
    if model.config.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    # full fine-tuning of the same run moves every kind of weight
    full = make_model(make_config(tok, "micro"), seed=0)
    train(full, rows, train_config(**{**TINY_TRAIN, "grad_accum": 1, "max_steps": 2, "progress": False})[0])
    assert any(not torch.equal(v, before[k]) for k, v in full.state_dict().items() if "mlp" in k)


def test_an_engine_without_adapters_is_refused(data):
    from apollo.train.engine import TorchEngine

    tok, rows = data
    model = make_model(make_config(tok, "micro"), seed=0)
    cfg, _ = train_config(**{**TINY_TRAIN, "max_steps": 2, "progress": False, "lora": LORA})
    with pytest.raises(ValueError, match="without adapters"):
        train(model, rows, cfg, engine=TorchEngine(model, cfg, 2))
