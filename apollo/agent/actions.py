"""The action format shared by the tiny model and real models: Hermes/Qwen tool calls.

An assistant turn is free text (the thought) followed by one
``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` block, the format vLLM's
``hermes`` tool parser understands.

:func:`parse_action` is strict about the JSON (it is the agent's "code") and tolerant about a few
format near-misses whose intent is unambiguous; each error message says what was wrong and what the
expected format is, because it becomes the observation the agent sees (``Invalid action: …``).

=========================================================  ========  ==================================
near-miss                                                   outcome   parse error / recovery
=========================================================  ========  ==================================
call, then more text after ``</tool_call>``                 accepted  ``text after the call``
``<tool_call>{…}`` with no ``</tool_call>``, nothing after  accepted  ``missing </tool_call>``
  (a generation that stopped at EOS; end markers such as
  ``<|im_end|>`` may follow)
``<tool_call>{…}\n</tool_call`` (the text ends inside the  accepted  ``</tool_call> cut off``
  closing tag: the token limit came after the whole call)
``"parameters"`` instead of ``"arguments"``                 accepted  ``'parameters' for 'arguments'``
``"arguments"`` as a string holding a JSON object           accepted  ``'arguments' as a JSON string``
one ```` ```json ```` fenced call object, no tags           accepted  ``fenced block instead of tags``
a bare ``{"name": …, "arguments": …}`` ending the turn      accepted  ``bare JSON call without tags``
``<tool_call>{…}`` then text but no ``</tool_call>``        rejected  ``unterminated <tool_call> block``
``<tool_call>`` whose JSON is cut off, no closing tag       rejected  ``unterminated <tool_call> block``
``</tool_call>`` without ``<tool_call>``                    rejected  ``</tool_call> without …``
two or more calls (tags, fences or bare objects)            rejected  ``2 tool calls in one turn``
single quotes, trailing commas, ``True``/``None``,          rejected  ``tool call is not valid JSON``
  raw newlines in strings, two objects in one block                   (a compile error: JSON_ERRORS)
``"arguments": "ls -la"`` (a string that is not JSON)       rejected  ``'arguments' is a string that
                                                                      is not JSON`` (JSON_ERRORS)
both ``"arguments"`` and ``"parameters"``                   rejected  ambiguous
a list of calls, a non-object, no string ``"name"``         rejected  ``tool call must be …``
=========================================================  ========  ==================================

A recovered near-miss yields a valid :class:`~apollo.schema.Action` like a well-formed call (the
schema has no field for it and forbids extra ones); :func:`parse_tool_call` returns the same action
together with the names of the near-misses it recovered from, for callers that want to log or
count them.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from apollo.schema import Action

TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
OPEN, CLOSE = "<tool_call>", "</tool_call>"
EXPECTED = '<tool_call>{"name": ..., "arguments": {...}}</tool_call>'
_EXAMPLE = '<tool_call>{"name": "run_command", "arguments": {"command": "ls"}}</tool_call>'


def format_action(thought: str, tool: str, arguments: dict[str, Any]) -> str:
    call = json.dumps({"name": tool, "arguments": arguments}, ensure_ascii=False)
    thought = thought.strip()
    return (f"{thought}\n" if thought else "") + f"<tool_call>\n{call}\n</tool_call>"


# parse errors of a call whose JSON does not parse: a compile error of the agent's "code" (its JSON),
# not a wrong choice of tool or arguments (the masks' ``malformed_tool_call`` rule matches these).
# They are prefixes: the messages go on with details, and stored records carry the bare prefixes.
JSON_ERRORS = ("tool call is not valid JSON", "'arguments' is a string that is not JSON")


def is_json_error(parse_error: str | None) -> bool:
    return bool(parse_error) and parse_error.startswith(JSON_ERRORS)


class ParseResult(NamedTuple):
    action: Action
    recovered: tuple[str, ...] = ()  # the near-misses accepted on the way (empty for a clean call)


_DECODER = json.JSONDecoder()
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z_]*)[ \t]*\n?(.*?)```", re.DOTALL)
_END_MARKERS_RE = re.compile(r"(?:\s|<\|[^|<>\s]{1,40}\|>|</s>)*\Z")  # whitespace, <|im_end|>, </s> …
_CALL_KEYS = {"name", "arguments", "parameters"}


def _snippet(s: str, pos: int, width: int = 24) -> str:
    return repr(s[max(0, pos - width) : pos + width])


def _msg(e: json.JSONDecodeError) -> str:
    return e.msg.removesuffix(" at")  # "Unterminated string starting at", "Invalid control character at"


def _json_hint(body: str, e: json.JSONDecodeError) -> str:
    """What a JSON error usually means in a tool call."""
    pos = e.pos
    prev = body[:pos].rstrip()[-1:]
    here = body[pos : pos + 1]
    if e.msg.startswith("Invalid control character"):
        return "a raw newline or tab inside a string: write it as \\n or \\t"
    if e.msg.startswith("Extra data"):
        return "more than one JSON value in the block: one block holds one call object"
    if prev == "," and here in "}]":
        return f"a trailing comma before '{here}'"
    if here == "'":
        return "a single-quoted string: JSON keys and strings need double quotes"
    for lit, fix in (("True", "true"), ("False", "false"), ("None", "null")):
        if body.startswith(lit, pos):
            return f"Python {lit}: JSON writes {fix}"
    if e.msg.startswith("Expecting property name") and here.isalpha():
        return "an unquoted key: JSON keys need double quotes"
    return ""


def _json_error(body: str, e: json.JSONDecodeError) -> str:
    if not body.strip():
        return f"{JSON_ERRORS[0]}: the {OPEN} block is empty; put one call object in it, e.g. {_EXAMPLE}"
    hint = _json_hint(body, e)
    return (f"{JSON_ERRORS[0]}: {_msg(e)} at line {e.lineno} column {e.colno} near {_snippet(body, e.pos)}"
            + (f" ({hint})" if hint else "")
            + f"; write one JSON object with double-quoted keys and strings, e.g. {_EXAMPLE}")


def _is_call_shape(obj: Any) -> bool:
    return (isinstance(obj, dict) and isinstance(obj.get("name"), str) and set(obj) <= _CALL_KEYS
            and ("arguments" in obj or "parameters" in obj))


def _objects(text: str, limit: int = 64) -> list[tuple[int, int, Any]]:
    """Top-level JSON objects in free text as ``(start, end, value)``, left to right, not nested."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    tries = 0
    while tries < limit:
        i = text.find("{", pos)
        if i < 0:
            break
        tries += 1
        try:
            obj, end = _DECODER.raw_decode(text, i)
        except json.JSONDecodeError:
            pos = i + 1
            continue
        out.append((i, end, obj))
        pos = end
    return out


def _from_object(obj: Any, recovered: list[str]) -> Action:
    """The action of a parsed call object (the JSON itself parsed)."""
    if isinstance(obj, list):
        return Action(parse_error=f"tool call must be one JSON object, not a list of {len(obj)}: "
                                  f"one action per turn, answer with {EXPECTED}")
    if not isinstance(obj, dict):
        return Action(parse_error=f"tool call must be a JSON object, not {type(obj).__name__}: answer with {EXPECTED}")
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        keys = ", ".join(map(repr, obj)) or "none"
        return Action(parse_error=f"tool call needs a string 'name' (the tool to call; keys found: {keys}): "
                                  f"answer with {EXPECTED}")
    if "arguments" in obj and "parameters" in obj:
        return Action(tool=name, parse_error="tool call has both 'arguments' and 'parameters': "
                                             f"put the tool's arguments in 'arguments' only, as in {EXPECTED}")
    if "parameters" in obj:
        recovered.append("'parameters' for 'arguments'")
        args = obj["parameters"]
    else:
        args = obj.get("arguments", {})
    if isinstance(args, str):  # some models emit arguments as a JSON string (OpenAI style)
        try:
            args = json.loads(args)
        except json.JSONDecodeError as e:
            return Action(tool=name, parse_error=(
                f"{JSON_ERRORS[1]} ({_msg(e)} in {_snippet(args, e.pos)}): 'arguments' must be a JSON object "
                f"of the tool's arguments, e.g. {_EXAMPLE}"))
        recovered.append("'arguments' as a JSON string")
    if not isinstance(args, dict):
        return Action(tool=name, parse_error=(
            f"'arguments' must be an object, not {type(args).__name__}: a JSON object of the tool's "
            f"arguments, e.g. {_EXAMPLE}"))
    return Action(tool=name, arguments=args)


def _untagged(text: str, recovered: list[str]) -> Action:
    """A turn without ``<tool_call>``: a fenced or bare call object, or an error."""
    if CLOSE in text:
        return Action(parse_error=f"{CLOSE} without an opening {OPEN}: answer with {EXPECTED}")
    fenced = []
    bad_fence = None
    for m in _FENCE_RE.finditer(text):
        body = m.group(2).strip()
        if not body.startswith(("{", "[")):
            continue
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as e:
            if '"name"' in body or "'name'" in body:
                bad_fence = _json_hint(body, e) or f"{_msg(e)} at line {e.lineno} column {e.colno}"
            continue
        if _is_call_shape(obj):
            fenced.append(obj)
    unfenced = _FENCE_RE.sub(lambda m: " " * len(m.group(0)), text)  # same positions, fences blanked
    bare = [(a, b, o) for a, b, o in _objects(unfenced) if _is_call_shape(o)]
    n = len(fenced) + len(bare)
    if n > 1:
        return Action(parse_error=f"{n} tool calls in one turn and no {OPEN} block: one action per turn, "
                                  f"answer with exactly one {EXPECTED}")
    if fenced:
        recovered.append("fenced block instead of <tool_call> tags")
        return _from_object(fenced[0], recovered)
    if bare:
        _, b, obj = bare[0]
        if text[b:].strip():
            return Action(parse_error=f"no {OPEN} block (a bare JSON call followed by more text): "
                                      f"answer with {EXPECTED}")
        recovered.append("bare JSON call without <tool_call> tags")
        return _from_object(obj, recovered)
    if bad_fence:
        return Action(parse_error=f"no {OPEN} block (a fenced block looks like a call but is not valid JSON: "
                                  f"{bad_fence}): answer with {EXPECTED}")
    return Action(parse_error=f"no {OPEN} block: answer with a short thought, then {EXPECTED}")


def parse_tool_call(text: str) -> ParseResult:
    """Parse the tool call of an assistant turn, with the near-misses recovered; never raises."""
    recovered: list[str] = []
    if not isinstance(text, str):
        return ParseResult(Action(parse_error=f"no {OPEN} block: answer with {EXPECTED}"))
    start = text.find(OPEN)
    if start < 0:
        action = _untagged(text, recovered)
        return ParseResult(action, tuple(recovered) if action.valid else ())
    body_start = start + len(OPEN)
    i = body_start
    while i < len(text) and text[i].isspace():
        i += 1
    close = text.find(CLOSE, body_start)
    try:
        obj, end = _DECODER.raw_decode(text, i)
    except json.JSONDecodeError as e:
        if close < 0:
            return ParseResult(Action(parse_error=(
                f"unterminated {OPEN} block: no {CLOSE}, and the JSON after {OPEN} is incomplete or invalid "
                f"({_msg(e)} near {_snippet(text, e.pos)}); write the whole call as {EXPECTED}")))
        body = text[i:close].rstrip()
        try:  # raw_decode failed at i, so this fails too, with positions relative to the block
            json.loads(body)
        except json.JSONDecodeError as e2:
            e = e2
        return ParseResult(Action(parse_error=_json_error(body, e)))
    rest = text[end:]
    stripped = rest.lstrip()
    if stripped.startswith(CLOSE):
        after = stripped[len(CLOSE) :]
        if OPEN in after:
            n = 1 + after.count(OPEN)
            return ParseResult(Action(parse_error=(
                f"{n} tool calls in one turn: one action per turn, answer with exactly one {EXPECTED} "
                "(none of them was run)")))
        if after.strip():
            recovered.append("text after the call")
    elif _END_MARKERS_RE.match(rest):
        recovered.append("missing </tool_call>")
    elif len(stripped) < len(CLOSE) and CLOSE.startswith(stripped.rstrip()):
        recovered.append("</tool_call> cut off")  # the generation ended inside the closing tag (its token limit)
    elif close >= 0 and OPEN in text[end:close]:
        return ParseResult(Action(parse_error=(
            f"{1 + text.count(OPEN, end)} tool calls in one turn, the first without {CLOSE}: one action per "
            f"turn, answer with exactly one {EXPECTED}")))
    elif close >= 0:
        body = text[body_start:close].strip()
        try:
            json.loads(body)
        except json.JSONDecodeError as e:
            return ParseResult(Action(parse_error=_json_error(body, e)))
        return ParseResult(Action(parse_error=_json_error(body, json.JSONDecodeError("Extra data", body, len(body)))))
    else:
        if OPEN in rest:
            return ParseResult(Action(parse_error=(
                f"{1 + rest.count(OPEN)} tool calls in one turn, the first without {CLOSE}: one action per "
                f"turn, answer with exactly one {EXPECTED}")))
        return ParseResult(Action(parse_error=(
            f"unterminated {OPEN} block: text follows the call's JSON instead of {CLOSE} "
            f"({_snippet(rest.strip(), 0)}); close the call, as in {EXPECTED}")))
    action = _from_object(obj, recovered)
    return ParseResult(action, tuple(recovered) if action.valid else ())


def parse_action(text: str) -> Action:
    """Parse the tool call of an assistant turn (see the module's near-miss table); never raises."""
    return parse_tool_call(text).action
