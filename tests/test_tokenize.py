"""Loss-masked tokenization: only trainable assistant tokens carry labels."""

from __future__ import annotations

import pytest

from apollo.agent.actions import format_action
from apollo.data.tokenize import (
    IGNORE_INDEX,
    TokenizationMismatch,
    render,
    template_ids,
    tokenize_conversation,
    tokenize_prompt,
)
from apollo.models.bootstrap import synthetic_conversations
from apollo.models.tiny import train_tokenizer

A1 = format_action("Open the filter script first.", "open_file", {"path": "scripts/filter.py"})
A2 = format_action("Run it.", "run_command", {"session_name": "main", "command": "python scripts/filter.py"})
A3 = format_action("Done.", "finish", {})
CONV = [
    {"role": "system", "content": "You are an agent. Tools: open_file, run_command, finish."},
    {"role": "user", "content": "Filter the data in data/raw."},
    {"role": "assistant", "content": A1},
    {"role": "tool", "content": "1: import json\n2: def keep(x):\n3:     return True"},
    {"role": "user", "content": "<real_user>Check the threshold first.</real_user>"},
    {"role": "assistant", "content": A2},
    {"role": "tool", "content": "kept 10 of 12"},
    {"role": "assistant", "content": A3},
]


@pytest.fixture(scope="module")
def tok():
    probe = train_tokenizer(["a b"], vocab_size=300)
    texts = [render(probe, c) for c in synthetic_conversations(10, seed=1)] + ["a\n\nb\n\n\nc"] * 50
    return train_tokenizer(texts, vocab_size=800)


def trained_text(tok, ex) -> str:
    return tok.decode([t for t, lab in zip(ex["input_ids"], ex["labels"]) if lab != IGNORE_INDEX])


def test_labels_cover_only_trainable_assistant_tokens(tok):
    ex = tokenize_conversation(tok, CONV)
    assert ex["method"] == "incremental" and ex["mismatch"] is None
    assert ex["input_ids"] == template_ids(tok, CONV)  # incremental == full rendering
    assert trained_text(tok, ex) == f"{A1}<|im_end|>{A2}<|im_end|>{A3}<|im_end|>"
    # labels equal the input ids where trained
    assert all(lab in (IGNORE_INDEX, t) for t, lab in zip(ex["input_ids"], ex["labels"]))
    # headers, system, task, tool observations and guidance are not trained
    header = tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    ids = ex["input_ids"]
    for k in range(len(ids) - len(header) + 1):
        if ids[k : k + len(header)] == header:
            assert all(lab == IGNORE_INDEX for lab in ex["labels"][k : k + len(header)])
    assert ex["n_trained"] == sum(lab != IGNORE_INDEX for lab in ex["labels"])


def test_non_trainable_assistant_turns_are_masked(tok):
    flags = [m["role"] == "assistant" for m in CONV]
    flags[5] = False  # the action after the guidance is dropped by supervision
    ex = tokenize_conversation(tok, CONV, trainable=flags)
    assert trained_text(tok, ex) == f"{A1}<|im_end|>{A3}<|im_end|>"
    assert ex["input_ids"] == template_ids(tok, CONV)  # still in context
    flags_all_true = [True] * len(CONV)  # flags of non-assistant messages are ignored
    assert tokenize_conversation(tok, CONV, trainable=flags_all_true)["labels"] == tokenize_conversation(tok, CONV)["labels"]


def test_zero_trained_tokens_raise(tok):
    with pytest.raises(ValueError, match="zero trained tokens"):
        tokenize_conversation(tok, CONV, trainable=[False] * len(CONV))
    with pytest.raises(ValueError, match="zero trained tokens"):
        tokenize_conversation(tok, CONV[:2])
    with pytest.raises(ValueError, match="zero trained tokens"):
        tokenize_conversation(tok, CONV, max_length=10)
    with pytest.raises(ValueError):
        tokenize_conversation(tok, CONV, trainable=[True])


def test_truncation_keeps_head(tok):
    full = tokenize_conversation(tok, CONV)
    n = len(full["input_ids"]) - 5
    ex = tokenize_conversation(tok, CONV, max_length=n)
    assert ex["truncated"] and ex["input_ids"] == full["input_ids"][:n] and ex["labels"] == full["labels"][:n]


def test_prompt_for_generation(tok):
    ids = tokenize_prompt(tok, CONV[:5])
    assert ids == template_ids(tok, CONV[:5], add_generation_prompt=True)
    assert tok.decode(ids).endswith("<|im_start|>assistant\n")
    # the prompt is a prefix of the training sequence: what the policy saw is what is trained
    assert tokenize_conversation(tok, CONV[:6])["input_ids"][: len(ids)] == ids


LLAMA_LIKE = (
    "{{- '<|begin|>' }}{%- for m in messages %}"
    "{{- '<|hdr|>' + m['role'] + '<|/hdr|>\\n\\n' + m['content'] | trim + '<|eot|>' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|hdr|>assistant<|/hdr|>\\n\\n' }}{%- endif %}"
)


def test_other_chat_template(tok):
    """Works with a different template family (no newline after the end-of-turn, content trimmed)."""
    import copy

    other = copy.deepcopy(tok)
    other.add_special_tokens({"additional_special_tokens": ["<|begin|>", "<|hdr|>", "<|/hdr|>", "<|eot|>"]})
    other.chat_template = LLAMA_LIKE
    other.eos_token = "<|eot|>"
    ex = tokenize_conversation(other, CONV)
    assert ex["input_ids"] == template_ids(other, CONV)
    assert trained_text(other, ex) == f"{A1}<|eot|>{A2}<|eot|>{A3}<|eot|>"


def test_merge_across_boundary_falls_back_to_offsets(tok):
    """Content starting with a newline right after the header's newline: BPE may merge "\\n\\n"."""
    conv = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "\n\nanswer"}]
    ex = tokenize_conversation(tok, conv)
    assert ex["input_ids"] == template_ids(tok, conv)  # canonical tokens either way
    assert "answer<|im_end|>" in trained_text(tok, ex)
    if ex["method"] == "offsets":
        assert "BPE merge" in ex["mismatch"]
        with pytest.raises(TokenizationMismatch):
            tokenize_conversation(tok, conv, strict=True)


# Qwen2.5-Instruct's chat template without its ``tools=`` branch (the agent lists tools in its own
# system prompt): a default system prompt, assistant tool_calls, tool turns merged into one user turn.
QWEN25_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or "
    "(message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}"
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def test_qwen25_template_compatible(tok):
    """Our template renders like Qwen2.5's when a system message is present; Qwen's default system
    prompt (a prefix that appears only without a system message) does not break the masks."""
    import copy

    qwen = copy.deepcopy(tok)
    qwen.chat_template = QWEN25_TEMPLATE
    conv = CONV[:3] + [CONV[3], {"role": "tool", "content": "second observation"}] + CONV[4:]
    assert render(qwen, conv) == render(tok, conv)
    assert render(qwen, conv, add_generation_prompt=True) == render(tok, conv, add_generation_prompt=True)
    no_system = CONV[1:]
    ex = tokenize_conversation(qwen, no_system)
    assert ex["method"] == "incremental" and ex["input_ids"] == template_ids(qwen, no_system)
    assert tok.decode(ex["input_ids"]).startswith("<|im_start|>system\nYou are Qwen")
    assert trained_text(qwen, ex) == f"{A1}<|im_end|>{A2}<|im_end|>{A3}<|im_end|>"
