"""Loss-masked tokenization of chat conversations, for any HF tokenizer with a chat template.

Token provenance decides the loss: only the tokens of *trainable assistant messages* are trained,
i.e. the assistant content and the end-of-turn marker that closes it (``<|im_end|>`` for Qwen-style
templates) — never the ``<|im_start|>assistant\\n`` header, the newline after ``<|im_end|>``, system
or task text, tool observations, ``<real_user>`` guidance, or non-trainable (masked) assistant turns.

How the mask is found without template-specific code: for an assistant message ``i`` the rendered
text of ``messages[:i]`` *with* the generation prompt is a prefix of the full rendering; the text
between that prefix and the end of ``messages[:i+1]`` (trailing whitespace excluded) is the trained
span. When a template breaks that prefix property (e.g. it rewrites earlier turns), the span is found
by locating the message content in the rendering and extending it over a following EOS token.

The rendered text is then cut at the span boundaries and each piece is tokenized on its own, so the
trained tokens are exactly the tokens of the assistant's own text, as a policy would have generated
them after the generation prompt. The concatenation is checked against
``tokenizer.apply_chat_template(messages, tokenize=True)``. If the two differ (a BPE merge across a
boundary, e.g. content that starts with whitespace right after a header ending in whitespace), the
canonical full tokenization is used instead and labels are assigned from character offsets; the
result records why (``mismatch``), or :class:`TokenizationMismatch` is raised with ``strict=True``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

IGNORE_INDEX = -100

Message = Mapping[str, Any]


class TruncatedAway(ValueError):
    """Every trained token of a sample lies beyond ``max_length`` (the head is kept): nothing to train."""


class TokenizationMismatch(ValueError):
    """Incremental (piece-wise) tokenization differs from the full chat-template tokenization."""


def render(tokenizer: Any, messages: Sequence[Message], add_generation_prompt: bool = False) -> str:
    """The chat-template rendering of ``messages`` as text."""
    return tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=add_generation_prompt
    )


def template_ids(tokenizer: Any, messages: Sequence[Message], add_generation_prompt: bool = False) -> list[int]:
    """``tokenizer.apply_chat_template(messages, tokenize=True)`` as a plain list of ids."""
    out = tokenizer.apply_chat_template(
        list(messages), tokenize=True, add_generation_prompt=add_generation_prompt, return_dict=False
    )
    if isinstance(out, Mapping):  # some versions return a BatchEncoding whatever return_dict says
        out = out["input_ids"]
    if hasattr(out, "tolist"):
        out = out.tolist()
    if out and isinstance(out[0], list):
        out = out[0]
    return [int(i) for i in out]


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def tokenize_prompt(tokenizer: Any, messages: Sequence[Message]) -> list[int]:
    """Token ids of ``messages`` followed by the generation prompt (``<|im_start|>assistant\\n``)."""
    return template_ids(tokenizer, messages, add_generation_prompt=True)


def _trained_span(tokenizer: Any, messages: Sequence[Message], i: int, full: str, cursor: int) -> tuple[int, int]:
    """Character span ``[start, end)`` in ``full`` of assistant message ``i``'s trained text."""
    try:
        pre = render(tokenizer, messages[:i], add_generation_prompt=True)
        upto = render(tokenizer, messages[: i + 1])
    except Exception:  # e.g. a template that cannot render an empty list
        pre, upto = "", ""
    if pre and upto.startswith(pre) and full.startswith(upto) and len(pre) >= cursor:
        body = upto[len(pre) :]
        return len(pre), len(pre) + len(body.rstrip())
    # Fallback: find the content itself after the previous span.
    content = str(messages[i].get("content") or "")
    for candidate in (content, content.strip()):
        if not candidate:
            continue
        start = full.find(candidate, cursor)
        if start >= 0:
            end = start + len(candidate)
            eos = getattr(tokenizer, "eos_token", None)
            if eos and full.startswith(eos, end):
                end += len(eos)
            return start, end
    raise ValueError(
        f"cannot locate assistant message {i} in the chat-template rendering "
        "(the template neither keeps earlier turns as a prefix nor renders the content verbatim)"
    )


def tokenize_conversation(
    tokenizer: Any,
    messages: Sequence[Message],
    trainable: Sequence[bool] | None = None,
    max_length: int | None = None,
    *,
    check: bool = True,
    strict: bool = False,
) -> dict[str, Any]:
    """Tokenize a conversation with a loss mask on its trainable assistant messages.

    Args:
        tokenizer: any HF tokenizer with a chat template (fast, for the offset fallback).
        messages: ``{"role", "content"}`` dicts (system / user / assistant / tool).
        trainable: one flag per message; only assistant messages whose flag is True are trained
            (flags of other roles are ignored). Default: every assistant message is trained.
        max_length: truncate (keep the head) to this many tokens.
        check: compare with ``apply_chat_template(messages, tokenize=True)``.
        strict: raise :class:`TokenizationMismatch` instead of falling back to offsets.

    Returns:
        ``input_ids``, ``labels`` (``-100`` where not trained), ``n_tokens``, ``n_trained``,
        ``method`` (``"incremental"`` or ``"offsets"``), ``mismatch`` (None or the explanation),
        ``truncated`` (bool).

    Raises:
        ValueError: no trained token: none trainable, or (:class:`TruncatedAway`) all cut by ``max_length``.
    """
    messages = list(messages)
    if trainable is None:
        trainable = [m.get("role") == "assistant" for m in messages]
    if len(trainable) != len(messages):
        raise ValueError(f"trainable has {len(trainable)} flags for {len(messages)} messages")
    train_idx = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and trainable[i]]
    if not train_idx:
        raise ValueError("conversation has no trainable assistant message: zero trained tokens")

    full = render(tokenizer, messages)
    spans: list[tuple[int, int]] = []
    cursor = 0
    for i in train_idx:
        start, end = _trained_span(tokenizer, messages, i, full, cursor)
        spans.append((start, end))
        cursor = end

    # Cut the text at span boundaries, tokenize each piece on its own.
    input_ids: list[int] = []
    labels: list[int] = []
    pos = 0
    for start, end in spans:
        ids = _encode(tokenizer, full[pos:start])
        input_ids += ids
        labels += [IGNORE_INDEX] * len(ids)
        ids = _encode(tokenizer, full[start:end])
        input_ids += ids
        labels += ids
        pos = end
    ids = _encode(tokenizer, full[pos:])
    input_ids += ids
    labels += [IGNORE_INDEX] * len(ids)

    method, mismatch = "incremental", None
    if check:
        reference = template_ids(tokenizer, messages)
        if reference != input_ids:
            k = next((j for j, (a, b) in enumerate(zip(reference, input_ids)) if a != b), None)
            k = min(len(reference), len(input_ids)) if k is None else k
            mismatch = (
                f"piece-wise tokenization differs from apply_chat_template at token {k} "
                f"({len(input_ids)} vs {len(reference)} tokens): a BPE merge crosses a "
                "trained-span boundary"
            )
            if strict:
                raise TokenizationMismatch(mismatch)
            method = "offsets"
            input_ids, labels = _label_by_offsets(tokenizer, full, spans)
            if input_ids != reference:
                raise TokenizationMismatch(
                    "apply_chat_template(tokenize=True) differs from tokenizing its own rendered text"
                )

    n_tokens = len(input_ids)
    truncated = max_length is not None and n_tokens > max_length
    if truncated:
        input_ids, labels = input_ids[:max_length], labels[:max_length]
    n_trained = sum(1 for x in labels if x != IGNORE_INDEX)
    if n_trained == 0:
        raise TruncatedAway(
            f"zero trained tokens after truncation to max_length={max_length} "
            f"({n_tokens} tokens; first trained span starts at character {spans[0][0]})"
        )
    return {
        "input_ids": input_ids,
        "labels": labels,
        "n_tokens": len(input_ids),
        "n_trained": n_trained,
        "method": method,
        "mismatch": mismatch,
        "truncated": truncated,
    }


def _label_by_offsets(tokenizer: Any, text: str, spans: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """Tokenize ``text`` in one go; a token is trained when its characters overlap a span."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(enc["input_ids"])
    labels = [IGNORE_INDEX] * len(ids)
    j = 0
    for t, (s, e) in enumerate(enc["offset_mapping"]):
        while j < len(spans) and spans[j][1] <= s:
            j += 1
        if j < len(spans) and s < spans[j][1] and e > spans[j][0]:
            labels[t] = ids[t]
    return ids, labels
