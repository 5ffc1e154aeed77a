"""The action format shared by the tiny model and real models: Hermes/Qwen tool calls.

An assistant turn is free text (the thought) followed by one
``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` block, the format vLLM's
``hermes`` tool parser understands.
"""

from __future__ import annotations

import json
import re
from typing import Any

from apollo.schema import Action

TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def format_action(thought: str, tool: str, arguments: dict[str, Any]) -> str:
    call = json.dumps({"name": tool, "arguments": arguments}, ensure_ascii=False)
    thought = thought.strip()
    return (f"{thought}\n" if thought else "") + f"<tool_call>\n{call}\n</tool_call>"


# parse errors of a call whose JSON does not parse: a compile error of the agent's "code" (its JSON),
# not a wrong choice of tool or arguments (the masks' ``malformed_tool_call`` rule matches these)
JSON_ERRORS = ("tool call is not valid JSON", "'arguments' is a string that is not JSON")


def is_json_error(parse_error: str | None) -> bool:
    return bool(parse_error) and parse_error.startswith(JSON_ERRORS)


def parse_action(text: str) -> Action:
    """Parse the first tool call of an assistant turn; never raises."""
    m = TOOL_CALL_RE.search(text)
    if m is None:
        if "<tool_call>" in text:
            return Action(parse_error="unterminated <tool_call> block")
        return Action(parse_error="no <tool_call> block in the response")
    try:
        obj = json.loads(m.group(1))
    except json.JSONDecodeError as e:
        return Action(parse_error=f"tool call is not valid JSON: {e.msg}")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return Action(parse_error="tool call needs a string 'name'")
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models emit arguments as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return Action(tool=obj["name"], parse_error=JSON_ERRORS[1])
    if not isinstance(args, dict):
        return Action(tool=obj["name"], parse_error="'arguments' must be an object")
    return Action(tool=obj["name"], arguments=args)

