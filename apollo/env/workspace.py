"""The agent's workspace and the ResearchGym-style tools that act on it, through a per-episode sandbox.

``Workspace(task)`` copies the task's ``workspace/`` into a fresh temporary folder and starts a
:class:`~apollo.sandbox.Sandbox` on it (``params.yaml: sandbox.backend``: ``bwrap`` by default —
see :mod:`apollo.sandbox`); ``ws.call(tool, arguments, step)`` runs one tool and returns a
:class:`ToolResult` (never raises for bad tools or arguments). Every command (foreground or a
background session) and every file tool runs inside the sandbox; command output goes to
per-command log files outside the workspace; every command is killed after
``command_timeout_s``; ``close()`` ends the sandbox and with it every process of the episode. The
``kill``/``rm``/path rules of :func:`~apollo.env.tools.check_command` stay as ResearchGym's polite
refusals; the boundary is the sandbox. ``eval`` grades outside the sandbox
(:mod:`apollo.env.grading`).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apollo.env.grading import EvaluationError, evaluate_workspace
from apollo.env.tasks import TaskSpec
from apollo.env.tools import HINT_OFF, TOOL_SPECS, ArgumentError, check_command, check_path, coerce_arguments
from apollo.sandbox import FileOpError, Process, Sandbox, SandboxConfig, SandboxError, make_sandbox
from apollo.schema import EvalRecord, Observation

__all__ = ["EvaluationError", "ToolResult", "Workspace", "evaluate_workspace"]


@dataclass
class ToolResult:
    """What one tool call produced: the observation, an eval record for ``eval``, ``done`` for ``finish``."""

    observation: Observation
    eval: EvalRecord | None = None
    done: bool = False


def _truncate(text: str, limit: int) -> tuple[str, bool]:
    """Keep the head and the tail of a long text."""
    if len(text) <= limit:
        return text, False
    head = limit // 3
    tail = limit - head
    return f"{text[:head]}\n...[{len(text) - limit} characters truncated]...\n{text[-tail:]}", True


# --- sessions -------------------------------------------------------------------------------------


@dataclass
class _Command:
    command: str
    proc: Process
    log: Path
    started: float
    timer: threading.Timer | None = None  # kills the command at the lifetime limit
    timed_out: bool = False
    note: str = ""  # e.g. the sandbox had to be restarted before this command

    @property
    def running(self) -> bool:
        return self.proc.running

    def output(self, limit: int = 100_000) -> str:
        """The command's output so far; for a huge log only its head and tail are read."""
        prefix = self.note + "\n" if self.note else ""
        try:
            size = self.log.stat().st_size
            with open(self.log, "rb") as fh:
                if size <= limit:
                    return prefix + fh.read().decode("utf-8", errors="replace")
                head = fh.read(limit // 3).decode("utf-8", errors="replace")
                fh.seek(size - (limit - limit // 3))
                tail = fh.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return prefix
        return f"{prefix}{head}\n...[{size - limit} bytes not shown]...\n{tail}"


@dataclass
class _Session:
    name: str
    commands: list[_Command] = field(default_factory=list)

    @property
    def current(self) -> _Command | None:
        return self.commands[-1] if self.commands else None

    @property
    def busy(self) -> bool:
        return self.current is not None and self.current.running


def _cleanup(base: Path, sandbox: Sandbox, sessions: dict[str, _Session]) -> None:
    for s in sessions.values():
        for c in s.commands:
            if c.timer is not None:
                c.timer.cancel()
    sandbox.close()  # every process of the episode ends here (the sandbox's PID namespace)
    shutil.rmtree(base, ignore_errors=True)


class Workspace:
    """A fresh copy of a task's workspace, its sandbox, and the tools an agent uses on it.

    ``command_timeout_s`` is the lifetime limit of every command (foreground or background);
    ``wait_s`` how long ``run_command(wait_for_completion=True)`` blocks; ``max_sleep_s`` caps
    ``sleep``; ``max_output_chars`` caps observation texts (``truncated=True``);
    ``eval_timeout_s`` limits an evaluation when the task declares no ``max_eval_time``;
    ``sandbox`` picks the backend (a :class:`~apollo.sandbox.SandboxConfig`, a dict like
    params.yaml's ``sandbox:``, a backend name, or None for the configured default).
    """

    def __init__(
        self,
        task: TaskSpec,
        root: Path | None = None,
        *,
        command_timeout_s: float = 20.0,
        max_output_chars: int = 2000,
        wait_s: float = 10.0,
        max_sleep_s: float = 30.0,
        eval_timeout_s: float | None = None,
        sandbox: SandboxConfig | dict[str, Any] | str | None = None,
    ) -> None:
        self.task = task
        self.command_timeout_s = command_timeout_s
        self.max_output_chars = max_output_chars
        self.wait_s = wait_s
        self.max_sleep_s = max_sleep_s
        self.eval_timeout_s = eval_timeout_s
        if root is not None:
            Path(root).mkdir(parents=True, exist_ok=True)
        self._base = Path(tempfile.mkdtemp(prefix=f"apollo-{task.task_id}-", dir=root)).resolve()
        self.path: Path = self._base / "workspace"
        shutil.copytree(task.workspace_template, self.path)
        (self.path / "output").mkdir(exist_ok=True)
        self.sandbox = make_sandbox(sandbox, self.path, self._base / "sandbox")
        self._logs = self.sandbox.log_dir
        self._sessions: dict[str, _Session] = {"default": _Session("default")}
        self._n_commands = 0
        self.evals_used = 0
        self.eval_records: list[EvalRecord] = []
        self.closed = False
        self._finalizer = weakref.finalize(self, _cleanup, self._base, self.sandbox, self._sessions)
        try:
            self.sandbox.start()
        except BaseException:
            self._finalizer()
            raise
        self._tools: dict[str, Callable[..., ToolResult]] = {
            name: getattr(self, f"_tool_{name}") for name in TOOL_SPECS
        }

    @property
    def inner_path(self) -> str:
        """The workspace's path as the agent's commands see it."""
        return self.sandbox.inner_workspace

    # -- lifecycle ----------------------------------------------------------------------------------

    def close(self) -> None:
        """End the sandbox (every process of the episode) and delete the workspace."""
        self.closed = True
        self._finalizer()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def max_evals(self) -> int:
        return self.task.max_evals

    def busy_sessions(self) -> list[str]:
        return [s.name for s in self._sessions.values() if s.busy]

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Block until no command runs (or the timeout); True when idle."""
        deadline = time.monotonic() + timeout_s
        while self.busy_sessions():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    # -- dispatch -----------------------------------------------------------------------------------

    def call(self, tool: str, arguments: dict[str, Any] | None, step: int) -> ToolResult:
        """Run one tool. Unknown tools, bad arguments and sandbox refusals become observations."""
        if self.closed:
            return self._obs("Error: the workspace is closed.", error=True)
        if not isinstance(tool, str) or tool not in self._tools:
            names = ", ".join(TOOL_SPECS)
            return self._obs(f"Error: unknown tool {tool!r}. Available tools: {names}.", error=True)
        spec = TOOL_SPECS[tool]
        try:
            args = coerce_arguments(spec, arguments if arguments is not None else {})
            return self._tools[tool](step=step, **args)
        except ArgumentError as e:
            return self._obs(f"Error: {e}", error=True)
        except PermissionError as e:
            return self._obs(f"Refused: {e}", refused=True)
        except FileOpError as e:
            if e.kind == "refused":
                return self._obs(f"Refused: {e.message}", refused=True)
            return self._obs(f"Error: {e.message}.", error=True)
        except SandboxError as e:
            return self._obs(f"Error: the sandbox failed: {e}", error=True)
        except EvaluationError:
            raise  # a grader bug, not the agent's: stop with the task and the result named
        except Exception as e:  # a tool bug must not kill the rollout
            return self._obs(f"Error: {tool} failed: {type(e).__name__}: {e}", error=True)

    def _obs(self, text: str, *, exit_code: int | None = None, error: bool = False,
             refused: bool = False, done: bool = False, ev: EvalRecord | None = None) -> ToolResult:
        text, truncated = _truncate(text, self.max_output_chars)
        return ToolResult(
            Observation(text=text, exit_code=exit_code, error=error, truncated=truncated, refused=refused),
            eval=ev, done=done,
        )

    # -- commands -----------------------------------------------------------------------------------

    def _session(self, session_id: str, create: bool = False) -> _Session:
        if session_id not in self._sessions:
            if not create:
                known = ", ".join(sorted(self._sessions))
                raise ArgumentError(f"no session {session_id!r}; known sessions: {known}")
            self._sessions[session_id] = _Session(session_id)
        return self._sessions[session_id]

    def _start(self, session: _Session, command: str) -> _Command:
        """Start ``command`` in the sandbox; its output goes to a log outside the workspace."""
        self._n_commands += 1
        name = f"{self._n_commands:04d}.log"
        proc = self.sandbox.spawn(command, name)
        cmd = _Command(command, proc, self._logs / name, time.monotonic(), note=self.sandbox.take_note())

        def on_timeout() -> None:
            cmd.timed_out = cmd.running
            proc.kill()  # also whatever it left running in its process group

        cmd.timer = threading.Timer(self.command_timeout_s, on_timeout)
        cmd.timer.daemon = True
        cmd.timer.start()
        session.commands.append(cmd)
        return cmd

    def _status(self, cmd: _Command) -> tuple[str, int | None]:
        if cmd.running:
            return "running", None
        code = cmd.proc.returncode
        if cmd.timed_out:
            return f"killed after the {self.command_timeout_s:.0f} s command time limit", code
        return f"finished, exit code {code}", code

    def _tool_run_command(self, step: int, command: str, session_id: str, wait_for_completion: bool) -> ToolResult:
        why = check_command(command, Path(self.inner_path))
        if why:
            return self._obs(f"Refused: {why}.", refused=True)
        session = self._session(session_id, create=True)
        if session.busy:
            return self._obs(
                f"Error: session '{session_id}' is busy with: {session.current.command}. "  # type: ignore[union-attr]
                "Wait (sleep, check_session_idle), use another session_id, or kill_session_processes.",
                error=True,
            )
        cmd = self._start(session, command)
        if not wait_for_completion:
            return self._obs(
                f"Started in background session '{session_id}': {command}\n"
                f"Use check_session_idle('{session_id}') or get_session_output('{session_id}') later."
            )
        if not cmd.proc.wait(timeout=min(self.wait_s, self.command_timeout_s + 1.0)):
            out = cmd.output()
            return self._obs(
                f"$ {command}\n{out}\n[still running in background session '{session_id}' after "
                f"{self.wait_s:.0f} s; use get_session_output('{session_id}') / check_session_idle('{session_id}')]"
            )
        status, code = self._status(cmd)
        out = cmd.output()
        return self._obs(f"$ {command}\n{out}\n[{status}]", exit_code=code, error=code not in (0, None))

    def _tool_create_session(self, step: int, session_id: str) -> ToolResult:
        if session_id in self._sessions:
            return self._obs(f"Session '{session_id}' already exists.")
        self._session(session_id, create=True)
        return self._obs(f"Created session '{session_id}'.")

    def _tool_get_session_output(self, step: int, session_id: str) -> ToolResult:
        session = self._session(session_id)
        cmd = session.current
        if cmd is None:
            return self._obs(f"Session '{session_id}' has run no command yet.")
        status, code = self._status(cmd)
        return self._obs(f"$ {cmd.command}\n{cmd.output()}\n[session '{session_id}': {status}]", exit_code=code)

    def _tool_check_session_idle(self, step: int, session_id: str) -> ToolResult:
        session = self._session(session_id)
        cmd = session.current
        if cmd is None:
            return self._obs(f"Session '{session_id}' is idle (no command run yet).")
        if cmd.running:
            secs = time.monotonic() - cmd.started
            return self._obs(f"Session '{session_id}' is busy: '{cmd.command}' has run for {secs:.0f} s.")
        status, code = self._status(cmd)
        return self._obs(f"Session '{session_id}' is idle (last command {status}).", exit_code=code)

    def _tool_kill_session_processes(self, step: int, session_id: str) -> ToolResult:
        session = self._session(session_id)
        cmd = session.current
        if cmd is None or not cmd.running:
            return self._obs(f"Session '{session_id}' has nothing running.")
        cmd.proc.kill()
        if cmd.timer is not None:
            cmd.timer.cancel()
        return self._obs(f"Stopped '{cmd.command}' in session '{session_id}'.")

    def _tool_sleep(self, step: int, seconds: float) -> ToolResult:
        if not seconds >= 0:
            raise ArgumentError("sleep: seconds must be >= 0")
        secs = min(seconds, self.max_sleep_s)
        time.sleep(secs)
        note = f" (capped at {self.max_sleep_s:.0f} s)" if seconds > self.max_sleep_s else ""
        return self._obs(f"Slept {secs:g} s{note}.")

    # -- files (each operation runs inside the sandbox) ------------------------------------------------

    def _file(self, name: str, path: str, **args: Any) -> Any:
        check_path(path, Path(self.inner_path))  # the polite refusal; the sandbox is the boundary
        return self.sandbox.file_op(name, path=path, **args)

    def _tool_open_file(self, step: int, path: str, line_start: int, line_end: int | None) -> ToolResult:
        r = self._file("read", path)
        lines = r["text"].splitlines()
        start = max(1, line_start)
        end = len(lines) if line_end is None else min(len(lines), line_end)
        body = "\n".join(f"{i}: {lines[i - 1]}" for i in range(start, end + 1))
        return self._obs(f"[{r['rel']}: lines {start}-{end} of {len(lines)}]\n{body}")

    def _tool_edit_file(self, step: int, path: str, start_line: int, end_line: int, content: str) -> ToolResult:
        if self._file("kind", path)["kind"] != "file":
            return self._obs(f"Error: {path} is not a file; use create_file.", error=True)
        lines = self._file("read", path)["text"].splitlines()
        n = len(lines)
        if not (1 <= start_line <= n + 1 and start_line - 1 <= end_line <= n):
            return self._obs(
                f"Error: bad line range {start_line}-{end_line} for {path} ({n} lines).", error=True
            )
        new = content.splitlines()
        lines[start_line - 1:end_line] = new
        r = self._file("write", path, content="".join(ln + "\n" for ln in lines), must_exist=True)
        lo, hi = max(1, start_line - 2), min(len(lines), start_line + len(new) + 1)
        snippet = "\n".join(f"{i}: {lines[i - 1]}" for i in range(lo, hi + 1))
        return self._obs(f"Edited {r['rel']} lines {start_line}-{end_line}. Now:\n{snippet}")

    def _tool_create_file(self, step: int, path: str, content: str) -> ToolResult:
        r = self._file("write", path, content=content)
        return self._obs(f"{'Overwrote' if r['existed'] else 'Created'} {r['rel']} ({len(content)} characters).")

    def _tool_list_files(self, step: int, path: str) -> ToolResult:
        r = self._file("tree", path)
        return self._obs(f"[{r['rel']}]\n" + r["tree"])

    def _tool_search_dir(self, step: int, query: str, path: str) -> ToolResult:
        hits = self._file("search", path, query=query)["hits"]
        return self._obs("\n".join(hits) if hits else f"No matches for {query!r}.")

    # -- misc ---------------------------------------------------------------------------------------

    def _tool_think(self, step: int, thought: str) -> ToolResult:
        return self._obs("Thought recorded.")

    def _tool_view_hint(self, step: int) -> ToolResult:
        if not getattr(self.task, "view_hint", False):
            return self._obs(HINT_OFF, error=True)
        hint = self.task.hint.strip()
        return self._obs(hint or "No hint for this task.")

    def _tool_finish(self, step: int) -> ToolResult:
        return self._obs("Finished. A final evaluation runs now.", done=True)

    def _tool_eval(self, step: int) -> ToolResult:
        if self.evals_used >= self.max_evals:
            return self._obs(
                f"Refused: eval budget exhausted ({self.evals_used}/{self.max_evals} used). "
                "Call finish; a final evaluation runs automatically.",
                refused=True,
            )
        self.evals_used += 1
        rec = self._evaluate(step, forced=False)
        return self._obs(self._eval_text(rec), ev=rec)

    def _evaluate(self, step: int, forced: bool) -> EvalRecord:
        """Grade a snapshot of the outputs outside the sandbox (:func:`apollo.env.grading.evaluate_workspace`)."""
        score, metrics, message = evaluate_workspace(self.task, self.path, self.eval_timeout_s)
        rec = EvalRecord(step=step, score=score, metrics=metrics, forced=forced, message=message)
        self.eval_records.append(rec)
        return rec

    def _eval_text(self, rec: EvalRecord) -> str:
        details = " ".join(f"{k}={v}" for k, v in rec.metrics.items() if k != "score")
        return (
            f"Evaluation {self.evals_used}/{self.max_evals}: overall_score={rec.score:g}\n"
            f"{details}\n{rec.message}".rstrip()
        )

    def final_eval(self, step: int) -> EvalRecord:
        """The forced final evaluation (at finish or time-out); does not count against the budget."""
        return self._evaluate(step, forced=True)
