"""The agent's sandboxed workspace and the ResearchGym-style tools that act on it.

``Workspace(task)`` copies the task's ``workspace/`` into a fresh temporary folder; ``ws.call(tool,
arguments, step)`` runs one tool and returns a :class:`ToolResult` (never raises for bad tools or
arguments). Commands run through ``bash -c`` in their own process group with a minimal environment
(no host secrets), output goes to per-command log files outside the workspace, and every command
is killed after ``command_timeout_s``. Evaluation runs the task's hidden ``evaluation.py`` in a
subprocess (see :func:`evaluate_workspace`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apollo.env.tasks import TaskSpec
from apollo.env.tools import HINT_OFF, TOOL_SPECS, ArgumentError, check_command, coerce_arguments, resolve_path
from apollo.schema import EvalRecord, Observation

_SHELL = "/bin/bash" if Path("/bin/bash").exists() else "/bin/sh"
_EVAL_MARK = "@@APOLLO_EVAL_RESULT@@"
_MAX_FILE_KB = 200_000  # no file (log included) written by a command may exceed ~200 MB
_EVAL_RUNNER = f"""
import importlib.util, json, sys
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
eval_dir, workspace = sys.argv[1], sys.argv[2]
cfg = load("task_eval_config", eval_dir + "/task/config.py")
ev = load("task_evaluation", eval_dir + "/task/evaluation.py")
results = ev.TaskBenchmark(cfg.TaskConfig(eval_workspace=eval_dir, workspace=workspace)).validate()
print("{_EVAL_MARK}" + json.dumps(results, default=str))
"""


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


def minimal_env(home: Path, bin_dir: Path | None = None) -> dict[str, str]:
    """Environment for agent commands: no host variables beyond PATH, HOME and LANG."""
    path = [str(bin_dir)] if bin_dir else []
    path += [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
    return {
        "PATH": os.pathsep.join(dict.fromkeys(path)),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


# --- evaluation -----------------------------------------------------------------------------------


def _run_evaluation(task: TaskSpec, workspace_path: Path, timeout_s: float) -> tuple[list[dict[str, Any]] | None, str]:
    """Run the hidden evaluation in a subprocess; (results, error message)."""
    if task.eval_protocol == "innovatorbench":
        from apollo.env.innovatorbench import run_evaluation

        return run_evaluation(task, Path(workspace_path), timeout_s)
    if task.eval_protocol != "mini":
        return None, f"task {task.task_id}: unknown evaluation protocol {task.eval_protocol!r}"
    eval_dir = task.eval_dir.resolve()
    if not (eval_dir / "task" / "evaluation.py").is_file():
        return None, f"task {task.task_id} has no evaluation"
    env = minimal_env(Path(workspace_path))
    try:
        proc = subprocess.run(
            [sys.executable, "-B", "-c", _EVAL_RUNNER, str(eval_dir), str(Path(workspace_path).resolve())],
            cwd=str(eval_dir), env=env, capture_output=True, text=True, timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return None, f"evaluation timed out after {timeout_s:.0f} s"
    return parse_eval_output(proc.stdout, proc.stderr, _EVAL_MARK)


def parse_eval_output(stdout: str, stderr: str, mark: str) -> tuple[list[dict[str, Any]] | None, str]:
    """The result list an evaluation subprocess printed after ``mark``, or None and why not."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(mark):
            try:
                results = json.loads(line[len(mark):])
            except json.JSONDecodeError:
                break
            if isinstance(results, list) and all(isinstance(r, dict) for r in results):
                return results, ""
            break
    err = (stderr.strip().splitlines() or ["no result"])[-1]
    return None, f"evaluation failed: {err[:300]}"


def _score(results: list[dict[str, Any]]) -> float:
    total = 0.0
    for r in results:
        try:
            s = float(r.get("score", 0.0))
        except (TypeError, ValueError):
            s = 0.0
        if s == s:  # not NaN
            total += s
    return min(100.0, max(0.0, total))


def _metrics(results: list[dict[str, Any]]) -> dict[str, Any]:
    if len(results) == 1:
        return {k: v for k, v in results[0].items() if k != "message"}
    return {f"{i}.{k}": v for i, r in enumerate(results) for k, v in r.items() if k != "message"}


def evaluate_workspace(
    task: TaskSpec, workspace_path: Path | str, timeout_s: float = 60.0
) -> tuple[float, dict[str, Any], str]:
    """Score a workspace with the task's hidden evaluation: ``(score 0-100, metrics, message)``.

    A broken or slow evaluation yields score 0 and a message (it runs in a subprocess).
    """
    results, err = _run_evaluation(task, Path(workspace_path), timeout_s)
    if results is None:
        return 0.0, {}, err
    message = "; ".join(str(r.get("message", "")) for r in results if r.get("message"))
    return round(_score(results), 4), _metrics(results), message


# --- sessions -------------------------------------------------------------------------------------


@dataclass
class _Command:
    command: str
    proc: subprocess.Popen[bytes]
    log: Path
    started: float
    timer: threading.Timer | None = None  # kills the command at the lifetime limit
    timed_out: bool = False

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def output(self, limit: int = 100_000) -> str:
        """The command's output so far; for a huge log only its head and tail are read."""
        try:
            size = self.log.stat().st_size
            with open(self.log, "rb") as fh:
                if size <= limit:
                    return fh.read().decode("utf-8", errors="replace")
                head = fh.read(limit // 3).decode("utf-8", errors="replace")
                fh.seek(size - (limit - limit // 3))
                tail = fh.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return f"{head}\n...[{size - limit} bytes not shown]...\n{tail}"


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


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the command's process group (its shell and anything it started, even in background)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _cleanup(base: Path, sessions: dict[str, _Session]) -> None:
    for s in sessions.values():
        for c in s.commands:
            if c.timer is not None:
                c.timer.cancel()
            _kill_group(c.proc)
    shutil.rmtree(base, ignore_errors=True)


class Workspace:
    """A fresh copy of a task's workspace plus the tools an agent uses on it.

    ``command_timeout_s`` is the lifetime limit of every command (foreground or background);
    ``wait_s`` how long ``run_command(wait_for_completion=True)`` blocks; ``max_sleep_s`` caps
    ``sleep``; ``max_output_chars`` caps observation texts (``truncated=True``).
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
        eval_timeout_s: float = 60.0,
    ) -> None:
        self.task = task
        self.command_timeout_s = command_timeout_s
        self.max_output_chars = max_output_chars
        self.wait_s = wait_s
        self.max_sleep_s = max_sleep_s
        self.eval_timeout_s = eval_timeout_s
        if root is not None:
            Path(root).mkdir(parents=True, exist_ok=True)
        self._base = Path(tempfile.mkdtemp(prefix=f"apollo-{task.task_id}-", dir=root))
        self.path: Path = self._base / "workspace"
        shutil.copytree(task.workspace_template, self.path)
        (self.path / "output").mkdir(exist_ok=True)
        self._logs = self._base / "logs"
        self._logs.mkdir()
        self._bin = self._base / "bin"
        self._bin.mkdir()
        for name in ("python", "python3"):
            (self._bin / name).symlink_to(sys.executable)
        self._env = minimal_env(self.path, self._bin)
        self._sessions: dict[str, _Session] = {"default": _Session("default")}
        self._n_commands = 0
        self.evals_used = 0
        self.eval_records: list[EvalRecord] = []
        self.closed = False
        self._finalizer = weakref.finalize(self, _cleanup, self._base, self._sessions)
        self._tools: dict[str, Callable[..., ToolResult]] = {
            name: getattr(self, f"_tool_{name}") for name in TOOL_SPECS
        }

    # -- lifecycle ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Kill every command still running and delete the workspace."""
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
        """Start ``command`` in its own process group; output goes to a log outside the workspace."""
        self._n_commands += 1
        log = self._logs / f"{self._n_commands:04d}.log"
        script = f"ulimit -f {_MAX_FILE_KB} 2>/dev/null\n{command}"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                [_SHELL, "-c", script], cwd=str(self.path), env=self._env, stdin=subprocess.DEVNULL,
                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
            )
        cmd = _Command(command, proc, log, time.monotonic())

        def on_timeout() -> None:
            cmd.timed_out = cmd.running
            _kill_group(proc)  # also whatever it left running in the background

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
        why = check_command(command, self.path)
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
        try:
            cmd.proc.wait(timeout=min(self.wait_s, self.command_timeout_s + 1.0))
        except subprocess.TimeoutExpired:
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
        _kill_group(cmd.proc)
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

    # -- files --------------------------------------------------------------------------------------

    def _rel(self, p: Path) -> str:
        rel = p.relative_to(self.path.resolve()).as_posix()
        return rel or "."

    def _tool_open_file(self, step: int, path: str, line_start: int, line_end: int | None) -> ToolResult:
        p = resolve_path(path, self.path)
        if not p.is_file():
            return self._obs(f"Error: {path} is not a file.", error=True)
        lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
        start = max(1, line_start)
        end = len(lines) if line_end is None else min(len(lines), line_end)
        body = "\n".join(f"{i}: {lines[i - 1]}" for i in range(start, end + 1))
        return self._obs(f"[{self._rel(p)}: lines {start}-{end} of {len(lines)}]\n{body}")

    def _tool_edit_file(self, step: int, path: str, start_line: int, end_line: int, content: str) -> ToolResult:
        p = resolve_path(path, self.path)
        if not p.is_file():
            return self._obs(f"Error: {path} is not a file; use create_file.", error=True)
        lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
        n = len(lines)
        if not (1 <= start_line <= n + 1 and start_line - 1 <= end_line <= n):
            return self._obs(
                f"Error: bad line range {start_line}-{end_line} for {path} ({n} lines).", error=True
            )
        new = content.splitlines()
        lines[start_line - 1:end_line] = new
        p.write_text("".join(ln + "\n" for ln in lines), encoding="utf-8")
        lo, hi = max(1, start_line - 2), min(len(lines), start_line + len(new) + 1)
        snippet = "\n".join(f"{i}: {lines[i - 1]}" for i in range(lo, hi + 1))
        return self._obs(f"Edited {self._rel(p)} lines {start_line}-{end_line}. Now:\n{snippet}")

    def _tool_create_file(self, step: int, path: str, content: str) -> ToolResult:
        p = resolve_path(path, self.path)
        if p.is_dir():
            return self._obs(f"Error: {path} is a folder.", error=True)
        existed = p.exists()
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content, encoding="utf-8")
        return self._obs(f"{'Overwrote' if existed else 'Created'} {self._rel(p)} ({len(content)} characters).")

    def _tool_list_files(self, step: int, path: str) -> ToolResult:
        root = resolve_path(path, self.path)
        if not root.is_dir():
            return self._obs(f"Error: {path} is not a folder.", error=True)
        return self._obs(f"[{self._rel(root)}]\n" + self._tree(root))

    def _tree(self, root: Path, depth: int = 0, budget: list[int] | None = None) -> str:
        budget = budget if budget is not None else [200]
        out: list[str] = []
        for p in sorted(root.iterdir(), key=lambda q: (q.is_file(), q.name)):
            if p.name.startswith(".") or p.name == "__pycache__":
                continue
            if budget[0] <= 0:
                out.append("  " * depth + "...")
                break
            budget[0] -= 1
            if p.is_dir() and not p.is_symlink():
                out.append("  " * depth + p.name + "/")
                if depth < 3:
                    sub = self._tree(p, depth + 1, budget)
                    if sub:
                        out.append(sub)
            else:
                out.append("  " * depth + f"{p.name} ({p.stat().st_size if p.exists() else 0} B)")
        return "\n".join(out)

    def _tool_search_dir(self, step: int, query: str, path: str) -> ToolResult:
        root = resolve_path(path, self.path)
        hits: list[str] = []
        for f in sorted(root.rglob("*")):
            if not f.is_file() or f.stat().st_size > 1_000_000 or any(x.startswith(".") for x in f.parts[-2:]):
                continue
            for i, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
                if query in line:
                    hits.append(f"{self._rel(f)}:{i}: {line.strip()[:160]}")
                    if len(hits) >= 50:
                        break
            if len(hits) >= 50:
                break
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
