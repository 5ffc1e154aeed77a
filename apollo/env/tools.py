"""ResearchGym-style tool specifications and the sandbox policy.

:data:`TOOL_SPECS` lists each tool's parameters (name → (type, default or :data:`REQUIRED`)) and a
one-line description; :func:`tool_schemas` renders them as OpenAI/Hermes function schemas for
prompts. :func:`check_command` and :func:`check_path` are ResearchGym's polite refusals: no
``kill``/``pkill``/``killall``/``sudo``, no path leaving the workspace (``..``, absolute paths
outside it). They are easy to get around (``os.kill``, quoting, ``${x}``, ``printf … | sh``,
scripts, symlinks) and are *not* the boundary: every command and file tool runs inside the
episode's sandbox (:mod:`apollo.sandbox`), which is.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REQUIRED: Any = object()


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    params: dict[str, tuple[type, Any]]

    def usage(self) -> str:
        parts = [p if d is REQUIRED else f"{p}={d!r}" for p, (_, d) in self.params.items()]
        return f"{self.name}({', '.join(parts)})"


def _spec(name: str, description: str, **params: tuple[type, Any]) -> ToolSpec:
    return ToolSpec(name, description, params)


TOOL_SPECS: dict[str, ToolSpec] = {
    s.name: s
    for s in (
        _spec("run_command", "Run a shell command in the workspace root. Blocks up to 10 s unless "
              "wait_for_completion is false; a longer command keeps running in its session.",
              command=(str, REQUIRED), session_id=(str, "default"), wait_for_completion=(bool, True)),
        _spec("create_session", "Create a named shell session.", session_id=(str, REQUIRED)),
        _spec("get_session_output", "Show the output of the latest command of a session.",
              session_id=(str, "default")),
        _spec("check_session_idle", "Tell whether a session's command has finished.", session_id=(str, "default")),
        _spec("kill_session_processes", "Stop the running command of a session.", session_id=(str, "default")),
        _spec("open_file", "Show a file with line numbers.", path=(str, REQUIRED), line_start=(int, 1),
              line_end=(int, None)),
        _spec("edit_file", "Replace lines start_line..end_line (inclusive) of a file with content.",
              path=(str, REQUIRED), start_line=(int, REQUIRED), end_line=(int, REQUIRED), content=(str, REQUIRED)),
        _spec("create_file", "Create or overwrite a file.", path=(str, REQUIRED), content=(str, REQUIRED)),
        _spec("list_files", "List files under a folder.", path=(str, ".")),
        _spec("search_dir", "Find lines containing a text in files under a folder.", query=(str, REQUIRED),
              path=(str, ".")),
        _spec("think", "Write down a thought; nothing runs.", thought=(str, REQUIRED)),
        _spec("sleep", "Wait some seconds (capped).", seconds=(float, REQUIRED)),
        _spec("view_hint", "Show the task hint (off in the main evaluation)."),
        _spec("eval", "Score the current workspace (at most 3 times)."),
        _spec("finish", "End the task; a final evaluation runs."),
    )
}

# view_hint answers only for tasks loaded with ``view_hint=True`` (params ``evaluate.view_hint``, the
# "with hint" table); InnovatorBench's main evaluation disables the hint tool, and so do we.
HINT_OFF = "Error: view_hint is disabled in this evaluation."

# How an observation's text says the tool call did not happen or failed: the workspace writes
# "Error: …" (bad arguments, unknown tool, a crashed tool) and "Refused: …" (the sandbox policy, the
# eval budget), the agent loop "Invalid action: …" (an unparsable call). The one reading of those
# texts: the annotator, the scripted checks and the supervision rules all call :func:`call_failed`.
FAILURE_PREFIXES = ("Error:", "Refused:", "Invalid action:")


def call_failed(observation: Any) -> bool:
    """Whether an observation text (leading whitespace ignored) reports a failed or refused tool
    call (:data:`FAILURE_PREFIXES`). A command that ran and exited non-zero is not one: its
    observation is the command's output."""
    return str(observation or "").lstrip().startswith(FAILURE_PREFIXES)

_TYPE_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def tool_schemas(names: list[str] | None = None) -> list[dict[str, Any]]:
    """Function-calling schemas (``{"type": "function", "function": {...}}``) for the tools."""
    out = []
    for spec in TOOL_SPECS.values():
        if names is not None and spec.name not in names:
            continue
        props = {p: {"type": _TYPE_NAMES[t]} for p, (t, _) in spec.params.items()}
        required = [p for p, (_, d) in spec.params.items() if d is REQUIRED]
        out.append({"type": "function", "function": {
            "name": spec.name, "description": spec.description,
            "parameters": {"type": "object", "properties": props, "required": required}}})
    return out


class ArgumentError(ValueError):
    """Bad tool arguments; the message is shown to the agent."""


def coerce_arguments(spec: ToolSpec, arguments: Any) -> dict[str, Any]:
    """Check and coerce arguments against a spec; raises :class:`ArgumentError` with a readable text."""
    if not isinstance(arguments, dict):
        raise ArgumentError(f"arguments of {spec.name} must be an object. Usage: {spec.usage()}")
    unknown = sorted(set(arguments) - set(spec.params))
    if unknown:
        raise ArgumentError(f"{spec.name} got unknown argument(s) {unknown}. Usage: {spec.usage()}")
    out: dict[str, Any] = {}
    for name, (typ, default) in spec.params.items():
        if name not in arguments or arguments[name] is None:
            if default is REQUIRED:
                raise ArgumentError(f"{spec.name} needs argument '{name}' ({_TYPE_NAMES[typ]}). Usage: {spec.usage()}")
            out[name] = default
            continue
        out[name] = _coerce(spec, name, typ, arguments[name])
    return out


def _coerce(spec: ToolSpec, name: str, typ: type, value: Any) -> Any:
    bad = ArgumentError(f"{spec.name}: argument '{name}' must be a {_TYPE_NAMES[typ]}, got {value!r}")
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise bad
    if typ is int:
        if isinstance(value, bool):
            raise bad
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        raise bad
    if typ is float:
        if isinstance(value, bool):
            raise bad
        try:
            return float(value)
        except (TypeError, ValueError):
            raise bad from None
    if typ is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise bad
    return value


# --- sandbox policy -------------------------------------------------------------------------------

# kill/pkill/killall are refused wherever they appear as a word (also inside a quoted script);
# the privileged commands only as shell words
_KILL_RE = re.compile(r"(?<![\w./-])(kill|pkill|killall)(?![\w.-])")
_PRIV_RE = re.compile(r"(?<![\w./-])(sudo|su|doas|shutdown|reboot)(?![\w.-])")
_DOTDOT_RE = re.compile(r"(?:^|[\s'\"=:/(<>|;&,\[])\.\.(?=$|[/\s'\")<>|;&,\]])")
_ABS_RE = re.compile(r"(?:^|[\s'\"=:(<>|;&,\[`])(/[^\s'\"()<>|;&,`\]]+)")
_ALLOWED_ABS = ("/dev/null", "/dev/stdout", "/dev/stderr")


def _in_workspace(path: Path, workspace: Path) -> bool:
    try:
        path.relative_to(workspace)
    except ValueError:
        return False
    return True


def check_command(command: str, workspace: Path) -> str | None:
    """Why ``command`` is refused, or ``None`` when it may run in ``workspace``."""
    if not command.strip():
        return "empty command"
    m = _KILL_RE.search(command)
    if m:
        return f"'{m.group(1)}' is not allowed; use kill_session_processes(session_id) to stop a command"
    for m in _PRIV_RE.finditer(command):
        if _is_command_word(command, m.group(1)):
            return f"'{m.group(1)}' is not allowed in the sandbox"
    if "~" in command and re.search(r"(?:^|\s)~[\w.-]+", command):
        return "paths under another user's home are outside the workspace"
    if _DOTDOT_RE.search(command):
        return "'..' leaves the workspace; use paths relative to the workspace root"
    ws = workspace.resolve()
    for m in _ABS_RE.finditer(command):
        p = m.group(1)
        if p.startswith("//") or p in _ALLOWED_ABS:
            continue
        if not _in_workspace(Path(os.path.normpath(p)), ws):
            return f"absolute path {p} is outside the workspace; use paths relative to the workspace root"
    return None


def _is_command_word(command: str, word: str) -> bool:
    """True when ``word`` appears as a shell word (not only inside a quoted Python string, say)."""
    try:
        lex = shlex.shlex(command, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        tokens = list(lex)
    except ValueError:
        return True  # unparsable: be conservative
    if word in tokens:
        return True
    # $(kill ...) or `kill ...` inside a token
    return bool(re.search(r"(\$\(|`)\s*" + re.escape(word) + r"\b", command))


def check_path(path: str, workspace: Path) -> None:
    """The polite refusal for a file tool's path, lexically (symlinks are resolved in the sandbox)."""
    if not isinstance(path, str) or not path.strip():
        raise ArgumentError("path must be a non-empty string")
    p = Path(path.strip())
    full = Path(os.path.normpath(p if p.is_absolute() else Path(workspace) / p))
    if not _in_workspace(full, Path(workspace)):
        if p.is_absolute():
            raise PermissionError(f"absolute path {path} is outside the workspace; use a relative path")
        raise PermissionError(f"path {path} leaves the workspace")
