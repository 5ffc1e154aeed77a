"""The embedded tiny LM: a byte-level BPE tokenizer, a Qwen2.5-style chat template, a Qwen2 config.

The tiny model stands in for a pretrained LLM (any HF model path replaces it). It shares the chat
format of Qwen2.5, so prompts, tool calls and loss masks are built by the same code for both:

``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message; a ``tool`` message renders inside a
*user* turn as ``<tool_response>\\n{content}\\n</tool_response>``, and consecutive tool messages share
one user turn (exactly like Qwen2.5's template, so our renders and Qwen's agree). Unlike Qwen's
template there is no default system prompt and no ``tools=`` JSON block: the agent writes the tool
list into its own system message.

Assistant turns are wrapped in ``{% generation %}`` markers, so
``tokenizer.apply_chat_template(..., return_assistant_tokens_mask=True)`` works; our own loss-mask
code (:mod:`apollo.data.tokenize`) does not rely on them and works with any chat template.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

# Qwen2's pre-tokenization regex (digits one by one), as in transformers' Qwen2Tokenizer
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, IM_START, IM_END)
"""Special tokens (ids 0, 1, 2): skipped by ``decode(skip_special_tokens=True)``."""

ADDED_TOKENS: tuple[str, ...] = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<real_user>",
    "</real_user>",
)
"""Atomic, *non-special* tokens: always one id, but kept in decoded text (tool parsers need them)."""

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}"
    "{{- '<|im_start|>user' }}"
    "{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- generation %}"
    "{{- message['content'] + '<|im_end|>' }}"
    "{%- endgeneration %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)
"""Qwen2.5-style chat template (see the module docstring for the exact rendering)."""

PRESETS: dict[str, dict[str, int]] = {
    # ~1.3 M parameters (vocab 4096): behaviour cloning of ~300 trajectories in < 3 min on 2 cores.
    "tiny": dict(
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    # for tests: a few hundred thousand parameters, seconds to train.
    "micro": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    ),
}
"""Model presets. head_dim = hidden/heads = 32 for both: vLLM's CPU attention needs a head size in
{32, 64, 80, 96, 112, 128, ...}."""


def _strip_markup(texts: Iterable[str]) -> Iterator[str]:
    """Remove special/added token strings so BPE does not waste merges on them."""
    markers = SPECIAL_TOKENS + ADDED_TOKENS
    for text in texts:
        for m in markers:
            if m in text:
                text = text.replace(m, " ")
        yield text


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 4096, min_frequency: int = 2
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer (GPT-2/Qwen pre-tokenization) on ``texts``.

    ``vocab_size`` counts the 256 byte symbols, the learned merges and the 3 special tokens; the 6
    added tokens come on top (so ``len(tokenizer) == vocab_size + 6`` when the corpus is big enough
    to learn every merge). Every byte sequence is encodable (no unknown token).
    """
    tok = Tokenizer(models.BPE())
    # exactly Qwen2's pipeline: transformers rebuilds a saved qwen2-architecture tokenizer as
    # Qwen2Tokenizer with these components, so training and reloading tokenize identically
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_strip_markup(texts), trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        model_max_length=4096,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def make_config(tokenizer: PreTrainedTokenizerFast, preset: str = "tiny", **overrides) -> Qwen2Config:
    """A Qwen2 config sized by ``preset`` ("tiny" or "micro"); ``overrides`` win over the preset.

    The embedding table is rounded up to a multiple of 64 rows (unused rows are never produced by
    the tokenizer and are trained towards zero probability); input/output embeddings are tied.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    n = len(tokenizer)
    kwargs = dict(
        PRESETS[preset],
        vocab_size=(n + 63) // 64 * 64,
        max_position_embeddings=4096,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        hidden_act="silu",
        initializer_range=0.02,
        tie_word_embeddings=True,
        use_sliding_window=False,
        bos_token_id=tokenizer.convert_tokens_to_ids(PAD_TOKEN),  # as in Qwen2.5: never prepended
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.convert_tokens_to_ids(PAD_TOKEN),
        attention_dropout=0.0,
        use_cache=True,
    )
    kwargs.update(overrides)
    cfg = Qwen2Config(**kwargs)
    cfg.dtype = torch.float32
    return cfg


def make_model(config: Qwen2Config, seed: int = 0, attn_implementation: str = "sdpa") -> Qwen2ForCausalLM:
    """A freshly initialised :class:`Qwen2ForCausalLM` (deterministic for a given ``seed``)."""
    torch.manual_seed(seed)
    config._attn_implementation = attn_implementation
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.generation_config.bos_token_id = config.bos_token_id
    return model


def count_parameters(model: torch.nn.Module, trainable_only: bool = False) -> int:
    """Number of distinct parameters (tied embeddings counted once); ``trainable_only``: those that require grad."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()
                                   if p.requires_grad or not trainable_only}.values())
