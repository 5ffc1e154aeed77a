"""The embedded tiny LM: tokenizer, chat template, config presets, saved model (transformers + vLLM)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from apollo.agent.actions import format_action, parse_action
from apollo.data.tokenize import render, template_ids, tokenize_prompt
from apollo.models.bootstrap import bc_defaults, bootstrap_model, synthetic_conversations
from apollo.models.tiny import (
    ADDED_TOKENS,
    CHAT_TEMPLATE,
    IM_END,
    SPECIAL_TOKENS,
    count_parameters,
    make_config,
    make_model,
    train_tokenizer,
)

CONVS = synthetic_conversations(12, seed=0)


@pytest.fixture(scope="module")
def tok():
    probe = train_tokenizer(["a b"], vocab_size=300)
    return train_tokenizer([render(probe, c) for c in CONVS], vocab_size=1024)


@pytest.fixture(scope="module")
def demos():
    """Scripted demonstrations: what behaviour cloning trains on (through the dataset builder)."""
    from apollo.agent.react import AgentConfig, run_episode
    from apollo.engines.scripted import ScriptedEngine
    from apollo.env.tasks import list_tasks

    tasks = [t for t in list_tasks(split="train") if t.family in ("data_filtering", "data_construction")][:2]
    return [run_episode(t, ScriptedEngine(t, noise=0.2, seed=k), config=AgentConfig(max_steps=8), seed=k)
            for k, t in enumerate(tasks)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory, demos) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("models") / "base"
    stats = bootstrap_model(
        out, demos, corpus_texts=["extra corpus text"], preset="micro",
        sft=replace(bc_defaults(), max_steps=30, progress=False), vocab_size=1024,
    )
    return out, stats


def test_roundtrip_and_atomic_tokens(tok):
    for text in ["hello world", "scripts/filter.py --x 3\n\n  indented\ttab", "ünïcödé ✓ 漢字", ""]:
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    for t in SPECIAL_TOKENS + ADDED_TOKENS:
        ids = tok(f"x{t}y", add_special_tokens=False)["input_ids"]
        assert tok.convert_tokens_to_ids(t) in ids and len(tok(t, add_special_tokens=False)["input_ids"]) == 1
    assert tok.eos_token == IM_END and tok.pad_token == "<|endoftext|>"
    action = format_action("Open it.", "open_file", {"path": "scripts/filter.py"})
    text = f"<|im_start|>assistant\n{action}<|im_end|>"
    decoded = tok.decode(tok(text, add_special_tokens=False)["input_ids"], skip_special_tokens=True)
    assert decoded == f"assistant\n{action}"  # added tokens survive, special ones are skipped
    assert parse_action(decoded).tool == "open_file"


def test_chat_template_renders_roles(tok):
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": "A"},
        {"role": "tool", "content": "T1"},
        {"role": "tool", "content": "T2"},
        {"role": "user", "content": "<real_user>G</real_user>"},
    ]
    assert tok.chat_template == CHAT_TEMPLATE
    assert render(tok, msgs) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
        "<|im_start|>assistant\nA<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nT1\n</tool_response>\n<tool_response>\nT2\n</tool_response><|im_end|>\n"
        "<|im_start|>user\n<real_user>G</real_user><|im_end|>\n"
    )
    assert render(tok, msgs, add_generation_prompt=True).endswith("<|im_end|>\n<|im_start|>assistant\n")
    ids = tokenize_prompt(tok, msgs)
    assert ids[-3:] == tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"][-3:]
    # {% generation %} markers: HF's own assistant mask covers "A<|im_end|>"
    enc = tok.apply_chat_template(msgs, return_assistant_tokens_mask=True, return_dict=True)
    masked = [i for i, m in zip(enc["input_ids"], enc["assistant_masks"]) if m]
    assert tok.decode(masked) == "A<|im_end|>"


def test_tokenizer_save_load(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again.chat_template == CHAT_TEMPLATE
    assert template_ids(again, CONVS[0]) == template_ids(tok, CONVS[0])
    assert again.eos_token_id == tok.eos_token_id and again.pad_token_id == tok.pad_token_id


def test_config_presets(tok):
    for preset in ("tiny", "micro"):
        cfg = make_config(tok, preset)
        assert cfg.hidden_size // cfg.num_attention_heads == 32  # vLLM CPU attention head sizes
        assert cfg.vocab_size >= len(tok) and cfg.vocab_size % 64 == 0
        assert cfg.eos_token_id == tok.convert_tokens_to_ids(IM_END) and cfg.tie_word_embeddings
    with pytest.raises(ValueError):
        make_config(tok, "huge")
    a, b = make_model(make_config(tok, "micro"), seed=3), make_model(make_config(tok, "micro"), seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert 1.0e5 < count_parameters(a) < 3.0e5
    assert 0.8e6 < count_parameters(make_model(make_config(tok, "tiny"))) < 1.0e6  # 1.3 M at vocab 4096


def test_saved_model_loads_and_generates(saved, demos):
    out, stats = saved
    assert stats["final_loss"] < stats["first_loss"] and stats["params"] > 0
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp dirs left
    names = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "chat_template.jinja"} <= names
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == tok.convert_tokens_to_ids(IM_END)
    ids = torch.tensor([tokenize_prompt(tok, CONVS[0][:2])])
    gen = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert gen.shape[1] > ids.shape[1]
    # a second bootstrap into the same directory replaces it atomically
    bootstrap_model(out, demos[:1], preset="micro", sft=replace(bc_defaults(), max_steps=1, progress=False), vocab_size=512)
    assert len(AutoTokenizer.from_pretrained(out)) < len(tok)


_VLLM_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    if __name__ == "__main__":
        t0 = time.time()
        from vllm import LLM, SamplingParams
        llm = LLM(model=sys.argv[1], dtype=sys.argv[2], max_model_len=2048, enforce_eager=True, seed=0)
        t1 = time.time()
        prompt = json.loads(sys.argv[3])
        out = llm.generate([{"prompt_token_ids": prompt}], SamplingParams(max_tokens=6, temperature=0.0))
        chat = llm.chat([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=2, temperature=0.0))
        print("RESULT " + json.dumps({"ids": list(out[0].outputs[0].token_ids),
                                      "chat_prompt": list(chat[0].prompt_token_ids), "load_s": t1 - t0}))
    """
)


def test_saved_model_loads_in_vllm(saved, tmp_path):
    out, _ = saved
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    prompt = tokenize_prompt(tok, CONVS[1][:2])
    hf = model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False)[0, len(prompt):].tolist()
    script = tmp_path / "vllm_smoke.py"
    script.write_text(_VLLM_SCRIPT)
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(
        [sys.executable, str(script), str(out), "float32", json.dumps(prompt)],
        capture_output=True, text=True, timeout=400, env=env,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    res = json.loads(lines[-1][len("RESULT "):])
    assert len(res["ids"]) >= 1
    assert res["ids"][0] == hf[0]  # same greedy first token as transformers (float32)
    assert res["chat_prompt"] == tokenize_prompt(tok, [{"role": "user", "content": "hi"}])


def test_saved_tokenizer_tokenizes_like_the_trained_one(tmp_path):
    """transformers reloads a qwen2-architecture tokenizer as Qwen2Tokenizer: it must agree with
    the tokenizer the model was trained with (digits, whitespace runs, tags, unicode)."""
    from transformers import AutoTokenizer

    from apollo.models.tiny import make_config, make_model, train_tokenizer

    texts = ["run 30000 epochs with lr=0.003\n\n  indented  text", "<tool_call>\n{\"name\": \"eval\"}\n</tool_call>",
             "Café naïve — ünïcode 12.5%", "<real_user>use huber</real_user> ok"] * 30
    tok = train_tokenizer(texts, vocab_size=500)
    make_model(make_config(tok, "micro"), seed=0).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    back = AutoTokenizer.from_pretrained(tmp_path)
    for t in texts[:4] + ["x 123456 y", "\t\tz\r\n"]:
        assert back.encode(t, add_special_tokens=False) == tok.encode(t, add_special_tokens=False), t
    msgs = [{"role": "user", "content": "hi 42"}, {"role": "assistant", "content": "<tool_call>\n{}\n</tool_call>"}]
    assert back.apply_chat_template(msgs, tokenize=False) == tok.apply_chat_template(msgs, tokenize=False)
