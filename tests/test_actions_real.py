"""Tool-call near-misses a real small model emits: which are recovered, which are rejected, and
what the agent is told (the parse error becomes its observation ``Invalid action: …``)."""

from __future__ import annotations

import pytest

from apollo.agent.actions import (
    EXPECTED,
    JSON_ERRORS,
    format_action,
    is_json_error,
    parse_action,
    parse_tool_call,
)
from apollo.schema import Observation, Step
from apollo.supervision.symbolic import RuleSet

LS = {"path": "."}
CALL = '{"name": "list_files", "arguments": {"path": "."}}'

# (id, text, tool, arguments, recovered)
ACCEPTED = [
    ("clean", f"I will list the files.\n<tool_call>\n{CALL}\n</tool_call>", "list_files", LS, ()),
    ("no_space", f"<tool_call>{CALL}</tool_call>", "list_files", LS, ()),
    ("missing_close", f"I will list the files.\n<tool_call>\n{CALL}\n", "list_files", LS,
     ("missing </tool_call>",)),
    ("missing_close_eos", f"<tool_call>\n{CALL}<|im_end|>", "list_files", LS, ("missing </tool_call>",)),
    ("close_tag_cut_off", f"I will list the files.\n<tool_call>\n{CALL}\n</tool_call", "list_files", LS,
     ("</tool_call> cut off",)),
    ("close_tag_cut_early", f"<tool_call>\n{CALL}\n</", "list_files", LS, ("</tool_call> cut off",)),
    ("text_after", f"<tool_call>\n{CALL}\n</tool_call>\n<tool_response>\n.\n</tool_response>\nDone.",
     "list_files", LS, ("text after the call",)),
    ("parameters", '<tool_call>\n{"name": "list_files", "parameters": {"path": "."}}\n</tool_call>',
     "list_files", LS, ("'parameters' for 'arguments'",)),
    ("string_arguments", '<tool_call>\n{"name": "run_command", "arguments": "{\\"command\\": \\"ls\\"}"}\n</tool_call>',
     "run_command", {"command": "ls"}, ("'arguments' as a JSON string",)),
    ("json_fence", f"I will list the files.\n```json\n{CALL}\n```", "list_files", LS,
     ("fenced block instead of <tool_call> tags",)),
    ("plain_fence", f"```\n{CALL}\n```\n", "list_files", LS, ("fenced block instead of <tool_call> tags",)),
    ("bare_object", f"I will list the files.\n{CALL}", "list_files", LS, ("bare JSON call without <tool_call> tags",)),
    ("bare_parameters", '{"name": "list_files", "parameters": {"path": "."}}', "list_files", LS,
     ("bare JSON call without <tool_call> tags", "'parameters' for 'arguments'")),
    ("no_arguments", '<tool_call>\n{"name": "finish"}\n</tool_call>', "finish", {}, ()),
    ("close_tag_inside_a_string",
     ('<tool_call>{"name": "create_file", "arguments": {"path": "p.md", "content": "<tool_call>x</tool_call>"}}'
     "</tool_call>"), "create_file", {"path": "p.md", "content": "<tool_call>x</tool_call>"}, ()),
    ("extra_key", '<tool_call>{"name": "eval", "arguments": {}, "id": "call_0"}</tool_call>', "eval", {}, ()),
]

# (id, text, category of the masks' rule, words the error must name)
REJECTED = [
    ("no_call", "I will look at the file.", "invalid_action", ["no <tool_call> block"]),
    ("prose_json", 'The config is {"lr": 0.1}.', "invalid_action", ["no <tool_call> block"]),
    ("missing_close_then_text", f"<tool_call>\n{CALL}\nNow I wait for the output.", "invalid_action",
     ["unterminated <tool_call> block", "Now I wait", "</tool_call>"]),
    ("cut_off", '<tool_call>\n{"name": "list_files", "arguments": {"pa', "invalid_action",
     ["unterminated <tool_call> block", "incomplete"]),
    ("close_tag_then_text", f"<tool_call>\n{CALL}\n</tool_cal and more", "invalid_action",
     ["unterminated <tool_call> block", "</tool_call>"]),
    ("close_without_open", f"{CALL}\n</tool_call>", "invalid_action", ["</tool_call> without an opening <tool_call>"]),
    ("two_calls", (f"<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n{{\"name\": \"eval\", \"arguments\": {{}}}}\n"
     "</tool_call>"), "invalid_action", ["2 tool calls in one turn", "exactly one"]),
    ("two_calls_first_unclosed", f"<tool_call>\n{CALL}\n<tool_call>\n{CALL}\n</tool_call>", "invalid_action",
     ["2 tool calls in one turn", "without </tool_call>"]),
    ("two_fences", f"```json\n{CALL}\n```\nthen\n```json\n{CALL}\n```", "invalid_action", ["2 tool calls"]),
    ("bare_then_text", f"{CALL}\nLet me know.", "invalid_action", ["no <tool_call> block", "bare JSON call"]),
    ("bad_fence", "```json\n{'name': 'list_files', 'arguments': {'path': '.'}}\n```", "invalid_action",
     ["no <tool_call> block", "double quotes"]),
    ("single_quotes", "<tool_call>\n{'name': 'list_files', 'arguments': {'path': '.'}}\n</tool_call>",
     "malformed_json", ["single-quoted string", "double quotes"]),
    ("trailing_comma", '<tool_call>\n{"name": "list_files", "arguments": {"path": ".",}}\n</tool_call>',
     "malformed_json", ["trailing comma before '}'"]),
    ("python_true", ('<tool_call>\n{"name": "run_command", "arguments": {"command": "ls", "wait_for_completion": True}}'
     "\n</tool_call>"), "malformed_json", ["Python True", "true"]),
    ("raw_newline", '<tool_call>\n{"name": "create_file", "arguments": {"path": "a", "content": "x\ny"}}\n</tool_call>',
     "malformed_json", ["raw newline", "\\n"]),
    ("missing_colon", '<tool_call>\n{"name": "open_file", "arguments": {"path" "x"}}\n</tool_call>', "malformed_json",
     ["Expecting ':' delimiter", "line 1 column"]),
    ("two_objects_one_block", f"<tool_call>\n{CALL}\n{CALL}\n</tool_call>", "malformed_json",
     ["more than one JSON value"]),
    ("empty_block", "<tool_call></tool_call>", "malformed_json", ["empty"]),
    ("string_arguments_not_json", '<tool_call>\n{"name": "run_command", "arguments": "ls -la"}\n</tool_call>',
     "malformed_json", ["'ls -la'", "must be a JSON object"]),
    ("both_arguments_and_parameters",
     '<tool_call>\n{"name": "list_files", "arguments": {}, "parameters": {"path": "."}}\n</tool_call>',
     "invalid_action", ["both 'arguments' and 'parameters'"]),
    ("list_of_calls", f"<tool_call>[{CALL}]</tool_call>", "invalid_action", ["not a list", "one action per turn"]),
    ("no_name", '<tool_call>{"tool": "eval", "arguments": {}}</tool_call>', "invalid_action",
     ["needs a string 'name'", "'tool'"]),
    ("arguments_a_list", '<tool_call>{"name": "eval", "arguments": [1]}</tool_call>', "invalid_action",
     ["'arguments' must be an object, not list"]),
]


@pytest.mark.parametrize(("text", "tool", "arguments", "recovered"), [c[1:] for c in ACCEPTED],
                         ids=[c[0] for c in ACCEPTED])
def test_near_misses_that_are_recovered(text: str, tool: str, arguments: dict, recovered: tuple) -> None:
    r = parse_tool_call(text)
    assert r.action.valid, r.action.parse_error
    assert (r.action.tool, r.action.arguments, r.recovered) == (tool, arguments, recovered)
    assert parse_action(text) == r.action


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.load()


@pytest.mark.parametrize(("text", "category", "words"), [c[1:] for c in REJECTED], ids=[c[0] for c in REJECTED])
def test_near_misses_that_are_rejected_say_what_was_wrong_and_the_format(
        rules: RuleSet, text: str, category: str, words: list[str]) -> None:
    r = parse_tool_call(text)
    err = r.action.parse_error
    assert not r.action.valid and err and r.recovered == ()
    for w in words:
        assert w in err, (w, err)
    # the expected format (or a filled-in example of it) is part of every message
    assert EXPECTED in err or '<tool_call>{"name": "run_command", "arguments": {"command": "ls"}}</tool_call>' in err
    # the masks: every miss is an invalid action (issue 33's taxonomy); JSON that does not parse by its own rule
    assert is_json_error(err) == (category == "malformed_json")
    step = Step(index=0, assistant_text=text, action=r.action, observation=Observation(text=f"Invalid action: {err}."))
    rule, _ = rules.first_match(step)
    assert rule.category == "invalid_action", (rule.id, err)
    assert rule.id == ("malformed_tool_call" if category == "malformed_json" else "invalid_action")


def test_stored_bare_prefixes_of_older_records_stay_json_errors() -> None:
    assert all(is_json_error(e) for e in JSON_ERRORS)
    assert not is_json_error("no <tool_call> block in the response") and not is_json_error(None)


@pytest.mark.parametrize("arguments", [
    {"path": "."}, {}, {"command": "echo '<tool_call>' && ls", "session_id": "s"},
    {"content": "line 1\nline 2\t\"quoted\"\n</tool_call>\n```json\n{}\n```", "path": "x.md"},
    {"path": "ünï 中文", "start_line": 1, "end_line": None},
])
def test_format_action_round_trips(arguments: dict) -> None:
    for thought in ("", "Look first.", "I will call {\"name\": \"x\"} soon"):
        r = parse_tool_call(format_action(thought, "edit_file", arguments))
        assert (r.action.tool, r.action.arguments, r.action.parse_error, r.recovered) == (
            "edit_file", arguments, None, ())


def test_never_raises_on_junk() -> None:
    for text in ["", "<tool_call>", "</tool_call>", "<tool_call>{", "{" * 200, "```json\n{\n```", "{}" * 100,
                 "<tool_call>" * 3, "<tool_call>null</tool_call>", '<tool_call>"x"</tool_call>', None]:
        a = parse_action(text)  # type: ignore[arg-type]
        assert not a.valid and a.parse_error
