"""What the annotator UI shows besides the steps, derived from the steps themselves (pure functions).

Every step an agent posts (tool, arguments, observation text) yields at most one *record*:

* ``terminal``: shell output (``run_command``, ``get_session_output``, ``check_session_idle``,
  ``kill_session_processes``) with its session id;
* ``file``: a file modification (``create_file``, ``edit_file``) as a unified diff against the last
  content the service knows for that path (from an earlier ``create_file``, a whole-file
  ``open_file`` or an earlier edit it could replay); when the earlier content was never seen, the
  diff shows the replaced line range and the new lines only;
* ``search``: searches and listings (``search_dir``, ``list_files``) with their results;
* ``view``: a file read (``open_file``); not shown as a modification, it only teaches the service
  the file's content so that later edits get full diffs.

An agent can also post records itself (``kind`` terminal/file/search) when it knows more, e.g. live
output of a long command. The score shown in the rollout list comes from ``eval`` observations.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from apollo.env.tools import call_failed

MAX_CONTENT = 200_000  # file contents kept for diffing are capped (characters)
TERMINAL_TOOLS = {"run_command", "get_session_output", "check_session_idle", "kill_session_processes"}
SEARCH_TOOLS = {"search_dir", "list_files"}
RECORD_KINDS = ("terminal", "file", "search", "view")

_SCORE_RE = re.compile(r"overall_score=([0-9]+(?:\.[0-9]+)?)")
_OPEN_RE = re.compile(r"^\[(?P<path>[^\]]+): lines (?P<a>\d+)-(?P<b>\d+) of (?P<n>\d+)\]\n?", re.MULTILINE)
_LINE_RE = re.compile(r"^(\d+): ?(.*)$")


def norm_path(path: Any) -> str:
    p = str(path or "").strip()
    while p.startswith("./"):
        p = p[2:]
    return p


def score_of(tool: str | None, observation: str) -> float | None:
    """The overall score an ``eval`` observation reports, if any."""
    if tool != "eval":
        return None
    m = _SCORE_RE.search(observation or "")
    return float(m.group(1)) if m else None


def unified_diff(before: str | None, after: str, path: str) -> str:
    a = (before or "").splitlines(keepends=True)
    b = after.splitlines(keepends=True)
    diff = difflib.unified_diff(a, b, fromfile=f"a/{path}" if before is not None else "/dev/null",
                                tofile=f"b/{path}", n=2)
    return "".join(d if d.endswith("\n") else d + "\n\\ No newline at end of file\n" for d in diff)


def _apply_edit(before: str, start: int, end: int, content: str) -> str:
    lines = before.splitlines()
    lines[start - 1:end] = content.splitlines()
    return "".join(ln + "\n" for ln in lines)


def _as_int(v: Any, default: int) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def derive_record(tool: str | None, arguments: dict[str, Any], observation: str,
                  known: str | None = None) -> dict[str, Any] | None:
    """The record of one step, or None. ``known``: the service's last content of the file touched.

    Returns ``{"kind", "ref", "data"}``; for files ``data["content_after"]`` is the content after the
    step when the service can know it (None otherwise).
    """
    args = arguments if isinstance(arguments, dict) else {}
    obs = observation or ""
    if tool in TERMINAL_TOOLS:
        sid = str(args.get("session_id") or "default")
        return {"kind": "terminal", "ref": sid,
                "data": {"tool": tool, "session_id": sid, "command": args.get("command"), "output": obs}}
    if tool in SEARCH_TOOLS:
        return {"kind": "search", "ref": norm_path(args.get("path") or "."),
                "data": {"tool": tool, "query": args.get("query"), "path": args.get("path") or ".",
                         "results": obs}}
    if tool in ("create_file", "edit_file", "open_file"):
        path = norm_path(args.get("path"))
        if not path or call_failed(obs):
            return None
        if tool == "open_file":
            m = _OPEN_RE.match(obs)
            if not m or int(m.group("a")) != 1 or m.group("b") != m.group("n") or len(obs) > MAX_CONTENT:
                return None  # a partial view teaches nothing certain about the whole file
            lines = [(_LINE_RE.match(ln) or [None, None, ln])[2] for ln in obs[m.end():].splitlines()]
            content = "".join(f"{ln}\n" for ln in lines) if int(m.group("n")) else ""
            return {"kind": "view", "ref": path, "data": {"path": path, "content_after": content}}
        if tool == "create_file":
            content = str(args.get("content") or "")
            data = {"path": path, "op": "create" if known is None else "overwrite",
                    "diff": unified_diff(known, content, path), "exact": True,
                    "content_after": content if len(content) <= MAX_CONTENT else None}
            return {"kind": "file", "ref": path, "data": data}
        start = _as_int(args.get("start_line"), 1)
        end = _as_int(args.get("end_line"), start - 1)
        content = str(args.get("content") or "")
        if known is not None:
            after = _apply_edit(known, start, end, content)
            data = {"path": path, "op": "edit", "lines": [start, end], "exact": True,
                    "diff": unified_diff(known, after, path),
                    "content_after": after if len(after) <= MAX_CONTENT else None}
        else:
            new = content.splitlines()
            head = f"--- a/{path}\n+++ b/{path}\n@@ -{start},{max(0, end - start + 1)} +{start},{len(new)} @@ " \
                   f"(earlier content of lines {start}-{end} not seen by the service)\n"
            data = {"path": path, "op": "edit", "lines": [start, end], "exact": False,
                    "diff": head + "".join(f"+{ln}\n" for ln in new), "content_after": None}
        return {"kind": "file", "ref": path, "data": data}
    return None
