"""Prompt building: the context window the agent sees at a step.

Rules that matter for training and for safety:

* Human guidance enters as a ``user`` message ``<real_user>…</real_user>`` placed right before the
  assistant turn of the step it was delivered at. Only messages that came from the guidance store
  become ``<real_user>`` messages.
* Any ``<real_user>``-looking text produced by the model or by the environment is neutralized
  (``<real_user>`` → ``<real-user>``) before it enters a prompt, so it can never pose as a human;
  so are chat control tokens (``<|im_start|>`` → ``[|im_start|]``), special tokens without bars
  (SmolLM2's StarCoder-style ``<file_sep>`` → ``[file_sep]``) and tool-call tags
  (``<tool_response>`` → ``[tool_response]``), look-alikes included: see :func:`neutralize`.
* The same function rebuilds the context for the dataset builder, so a training sample is exactly
  the window the agent saw.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Any

from apollo.schema import Guidance, Step, Trajectory

SYSTEM_PROMPT = (
    "You are a research agent working in a sandboxed workspace. "
    "Tools: run_command(command, session_id, wait_for_completion), get_session_output(session_id), "
    "check_session_idle(session_id), open_file(path), edit_file(path, start_line, end_line, content), "
    "create_file(path, content), list_files(path), sleep(seconds), eval(), finish(). "
    "Messages in <real_user> tags come from a human supervisor: follow them. "
    "Answer with a short thought, then one <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>."
)

# --- neutralization ----------------------------------------------------------------------------
# Text is matched on a "skeleton": per character NFKC + casefold (fullwidth ＜ｒｅａｌ＿ｕｓｅｒ＞,
# small-form ﹤, ligatures), a few Cyrillic/Greek letters folded to the Latin ones they imitate,
# invisible format characters (zero-width space/joiners, soft hyphen, BOM, bidi marks) dropped,
# and escaped brackets decoded (&lt; &#60; &#x3c; \u003c \x3c, &gt; …, &verbar; &#124;). A match
# in the skeleton maps back to the span of the original text it came from, and that span is
# replaced by an inert rendering.
_CONFUSABLES = str.maketrans({
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "ѕ": "s", "і": "i",
    "ј": "j", "ӏ": "l", "ԁ": "d", "ɑ": "a", "ο": "o", "ε": "e", "ρ": "p", "τ": "t", "υ": "u",
    "ı": "i", "ℓ": "l", "‐": "-", "‑": "-", "‒": "-", "–": "-", "—": "-", "−": "-", "﹣": "-",
    "＿": "_", "‿": "_", "⁀": "_", "︳": "_", "︴": "_", "﹍": "_", "﹎": "_", "﹏": "_",
})
_ESCAPE_RE = re.compile(
    r"&(?:lt|#0*60|#x0*3c);?|\\u003c|\\x3c|&(?:gt|#0*62|#x0*3e);?|\\u003e|\\x3e"
    r"|&(?:verbar|vert|#0*124|#x0*7c);|\\u007c|\\x7c|&(?:sol|#0*47|#x0*2f);|\\u002f",
    re.IGNORECASE)
_ESCAPED = {"lt": "<", "60": "<", "3c": "<", "gt": ">", "62": ">", "3e": ">",
            "verbar": "|", "vert": "|", "124": "|", "7c": "|", "sol": "/", "47": "/", "2f": "/"}
_TRIGGER_RE = re.compile(r"[<\uff1c\ufe64&\\]")  # no bracket-like character: nothing to neutralize

_SEP = r"[\s_\-.]*"
_GUIDANCE_RE = re.compile(r"<\s*(/?)\s*real" + _SEP + r"user\b(?:[^<>]{0,200}>)?")
# <|…|> control tokens: ChatML, Llama 3 (<|eot_id|>), Phi, Qwen (<|fim_prefix|>), DeepSeek's
# fullwidth-bar <｜begin▁of▁sentence｜> (NFKC folds ｜ to |; ▁ is kept)
_CONTROL_RE = re.compile(r"<\s*\|\s*([\w\-.\u2581]{1,40})\s*\|\s*>")
# Special tokens written as a bare <name> (no bars), which a tokenizer turns into a special id just as
# well: StarCoder/StarCoder2 (SmolLM2 ships 14 of them: <file_sep>, <repo_name>, <filename>, …),
# SentencePiece (<s>, </s>, <unk>, <pad>), Gemma (<start_of_turn>). A fixed list of names rather than
# every <word_word> tag: placeholders such as <src_file> in usage texts and HTML stay as they are.
SPECIAL_TAG_NAMES: tuple[str, ...] = (
    # StarCoder / StarCoder2 / SmolLM
    "repo_name", "reponame", "file_sep", "filename", "gh_stars", "issue_start", "issue_comment",
    "issue_closed", "jupyter_start", "jupyter_text", "jupyter_code", "jupyter_output", "jupyter_script",
    "empty_output", "fim_prefix", "fim_middle", "fim_suffix", "fim_pad", "commit_before", "commit_msg",
    "commit_after", "code_to_intermediate", "intermediate_to_code", "pr", "pr_status", "pr_is_merged",
    "pr_base", "pr_file", "pr_base_code", "pr_diff", "pr_diff_hunk", "pr_comment", "pr_event_id",
    "pr_review", "pr_review_state", "pr_review_comment", "pr_in_reply_to_review_id",
    "pr_in_reply_to_comment_id", "pr_diff_hunk_comment_line",
    # SentencePiece / Llama 2 / Mistral / T5 / Gemma
    "s", "unk", "pad", "bos", "eos", "eot", "start_of_turn", "end_of_turn",
)
_SPECIAL_TAG_RE = re.compile(
    r"<(/?)(" + "|".join(sorted(map(re.escape, SPECIAL_TAG_NAMES), key=len, reverse=True)) + r")>")  # no spaces: "x < s > y"
_TOOL_TAGS = ("tool_call", "tool_calls", "tool_response", "function_call", "tools")
_TOOL_RE = re.compile(r"<\s*(/?)\s*(tool" + _SEP + r"calls?|tool" + _SEP + r"response|function" + _SEP
                      + r"call|tools)\s*>")


def _unescape(m: re.Match[str]) -> str:
    t = m.group(0).lower().lstrip("&#\\").rstrip(";")
    t = t[1:] if t[:1] in ("x", "u") and t not in ("verbar", "vert") else t
    return _ESCAPED.get(t.lstrip("0") or "0", _ESCAPED.get(t, "?"))


def _skeleton(text: str) -> tuple[str, list[int]]:
    """The normalized text and, per skeleton character, the index of its source character."""
    if text.isascii() and "&" not in text and "\\" not in text:  # the common case: nothing to fold
        return text.lower(), list(range(len(text)))
    out: list[str] = []
    src: list[int] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in "&\\":
            m = _ESCAPE_RE.match(text, i)
            if m:
                out.append(_unescape(m))
                src.append(i)
                i = m.end()
                continue
        if ch.isascii():
            out.append(ch.lower())
            src.append(i)
        elif unicodedata.category(ch) != "Cf":
            for c in unicodedata.normalize("NFKC", ch).casefold().translate(_CONFUSABLES):
                out.append(c)
                src.append(i)
        i += 1
    return "".join(out), src


def _spans(skel: str, src: list[int], n: int, regex: re.Pattern[str]) -> list[tuple[int, int, re.Match[str]]]:
    res = []
    for m in regex.finditer(skel):
        a = src[m.start()]
        b = src[m.end()] if m.end() < len(src) else n
        res.append((a, b, m))
    return res


def _control_name(m: re.Match[str]) -> str:
    return re.sub(r"[^a-z0-9_]", "_", m.group(1))


@functools.lru_cache(maxsize=8192)
def neutralize(text: str, keep_tool_call: bool = False) -> str:
    """Defuse what could pose as guidance or as chat structure in text that is not from the guidance store.

    ``<real_user>`` and every look-alike (attributes, ``< /real_user>``, case, fullwidth
    ``＜real_user＞``, zero-width characters inside, HTML entities ``&lt;real_user&gt;``, NFKC and
    common Cyrillic look-alikes) become ``<real-user>`` / ``</real-user>``; chat control tokens
    (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``, any ``<|…|>``) become ``[|…|]``; special
    tokens written as bare tags (``<file_sep>``, ``<repo_name>``, ``</s>``: :data:`SPECIAL_TAG_NAMES`)
    become ``[file_sep]`` etc.; tool
    tags (``<tool_call>``, ``<tool_response>``, ``<function_call>``, ``<tools>``) become
    ``[tool_call]`` etc. With ``keep_tool_call`` (the model's own assistant turn, whose action is
    a ``<tool_call>``), exact ``<tool_call>``/``</tool_call>`` tags are kept. Idempotent.
    """
    if not isinstance(text, str) or not _TRIGGER_RE.search(text):
        return text
    skel, src = _skeleton(text)
    edits: list[tuple[int, int, str]] = []
    for a, b, m in _spans(skel, src, len(text), _GUIDANCE_RE):
        edits.append((a, b, f"<{m.group(1)}real-user>"))
    for a, b, m in _spans(skel, src, len(text), _CONTROL_RE):
        edits.append((a, b, f"[|{_control_name(m)}|]"))
    for a, b, m in _spans(skel, src, len(text), _SPECIAL_TAG_RE):
        edits.append((a, b, f"[{m.group(1)}{m.group(2)}]"))
    for a, b, m in _spans(skel, src, len(text), _TOOL_RE):
        name = re.sub(r"[\s_\-.]+", "_", m.group(2)).strip("_")
        raw = text[a:b]
        if keep_tool_call and raw in ("<tool_call>", "</tool_call>"):
            continue
        edits.append((a, b, f"[{m.group(1)}{name}]"))
    if not edits:
        return text
    edits.sort()
    out, pos = [], 0
    for a, b, rep in edits:
        if a < pos:  # overlapping matches: the first one wins
            continue
        out.append(text[pos:a])
        out.append(rep)
        pos = b
    out.append(text[pos:])
    return "".join(out)


def neutralize_message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message with :func:`neutralize` applied to its content (assistant turns keep their tool call)."""
    content = message.get("content")
    if not isinstance(content, str):
        return dict(message)
    return {**message, "content": neutralize(content, keep_tool_call=message.get("role") == "assistant")}


def guidance_message(g: Guidance) -> dict[str, str]:
    return {"role": "user", "content": f"<real_user>{neutralize(g.text)}</real_user>"}


def observation_content(step: Step) -> str:
    obs = step.observation
    text = neutralize(obs.text)
    if obs.truncated:
        text += "\n[output truncated]"
    return text


def initial_messages(task_description: str, system_prompt: str = SYSTEM_PROMPT) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": neutralize(task_description)},
    ]


SUMMARY_INSTRUCTION = (
    "The context is getting long. Summarize the work so far as a structured snapshot with these "
    "sections: State of the art (best result and how it was obtained); Hypotheses; Key knowledge; "
    "Reflection (one line per <real_user> message: what it asked and what was done); File state; "
    "Recent sessions; Recent actions; Experiment history. Answer with the snapshot only."
)


def summary_prompt(traj: Trajectory, summ: Any) -> list[dict[str, Any]]:
    """The exact prompt of a summarization call (used at run time and by the dataset builder)."""
    msgs = context_messages(traj, summ.covers_to, first_step=summ.covers_from,
                            summary_index=summ.prev_summary_index)
    msgs.append({"role": "user", "content": SUMMARY_INSTRUCTION})
    return msgs


SUMMARY_PREFIX = "Summary of the earlier work:\n"


def summary_message(text: str) -> dict[str, str]:
    return {"role": "user", "content": SUMMARY_PREFIX + neutralize(text)}


def step_messages(step: Step, *, with_observation: bool = True) -> list[dict[str, str]]:
    """The messages of one step: delivered guidance, the assistant turn, the tool observation."""
    msgs: list[dict[str, str]] = [guidance_message(g) for g in step.guidance]
    msgs.append({"role": "assistant", "content": neutralize(step.assistant_text, keep_tool_call=True)})
    if with_observation:
        msgs.append({"role": "tool", "content": observation_content(step)})
    return msgs


def context_messages(
    traj: Trajectory,
    upto_step: int,
    *,
    first_step: int = 0,
    summary_index: int | None = None,
    pending_guidance: list[Guidance] | None = None,
) -> list[dict[str, Any]]:
    """The prompt for step ``upto_step``: prefix, optional summary, verbatim steps, new guidance."""
    msgs: list[dict[str, Any]] = [
        dict(m) if m.get("role") == "system" else neutralize_message(m) for m in traj.prefix_messages]
    if summary_index is not None:
        msgs.append(summary_message(traj.summaries[summary_index].text))
    for step in traj.steps[first_step:upto_step]:
        msgs.extend(step_messages(step))
    for g in pending_guidance or []:
        msgs.append(guidance_message(g))
    return msgs


def window_conversation(traj: Trajectory, first_step: int, last_step: int, summary_index: int | None):
    """A whole context window as one conversation + which assistant turns are trainable.

    Returns ``(messages, trainable)`` where ``trainable[i]`` says whether message ``i`` is an
    assistant action that carries loss (kept by the mask stage, or never masked).
    """
    msgs = context_messages(traj, first_step, first_step=first_step, summary_index=summary_index)
    trainable = [False] * len(msgs)
    for step in traj.steps[first_step : last_step + 1]:
        sm = step_messages(step, with_observation=step.index < last_step)
        for m in sm:
            msgs.append(m)
            keep = step.mask.keep if step.mask is not None else True
            trainable.append(m["role"] == "assistant" and keep and step.action.valid)
    return msgs, trainable
