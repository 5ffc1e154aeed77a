"""Grading outside the sandbox: a snapshot of the declared outputs, the hidden evaluation in its own process.

:func:`evaluate_workspace` never lets the evaluation read the live workspace: it copies the task's
declared outputs (``task.extra["outputs"]``: relative files or folders; all regular files of the
workspace when a task declares none) into a fresh folder with :func:`apollo.sandbox.copy_out`
(no symlink followed, race-free against processes still running in the sandbox), then runs the
task's ``TaskBenchmark(TaskConfig(eval_workspace=…, workspace=<snapshot>)).validate()`` in a
separate Python process whose evaluation folder is the task's own (``task.eval_dir``), never a copy
from the workspace — a patched ``evaluations/`` or grader inside the workspace changes nothing.

Protocols: ``mini`` (the generated suite: ``evaluation.py`` loaded from its file) and
``innovatorbench`` (imported as the package ``evaluations.<task>.task.evaluation``;
:func:`apollo.env.innovatorbench.evaluation_command` builds the command). The time limit is the
task's ``max_eval_time`` (``task.extra``; InnovatorBench's yaml: 5000 s) or the caller's default.
A result without a ``score`` key is an :class:`EvaluationError` naming the task and the result
(ResearchGym asserts it), never a silent 0; a crashed or timed-out evaluation scores 0 with a message.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from apollo.env.innovatorbench import evaluation_command
from apollo.env.tasks import TaskSpec
from apollo.sandbox import copy_out

DEFAULT_EVAL_TIMEOUT_S = 600.0
_MARK = "@@APOLLO_EVAL_RESULT@@"
_RUNNER = f"""
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
print("{_MARK}" + json.dumps(results, default=str))
"""


class EvaluationError(RuntimeError):
    """The task's evaluation broke its contract (e.g. a result without ``score``): a grader bug."""


def eval_env(home: Path) -> dict[str, str]:
    """The evaluation process's environment: nothing of the worker's beyond PATH, HOME and LANG."""
    path = [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
    return {"PATH": ":".join(dict.fromkeys(path)), "HOME": str(home), "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1"}


def declared_outputs(task: TaskSpec) -> list[str] | None:
    outs = task.extra.get("outputs")
    return [str(o) for o in outs] if outs else None


def eval_timeout(task: TaskSpec, default: float | None = None) -> float:
    value = task.extra.get("max_eval_time")
    if value:
        return float(value)
    return float(default) if default is not None else DEFAULT_EVAL_TIMEOUT_S


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


def _command(task: TaskSpec, snapshot: Path) -> tuple[list[str], str, dict[str, str], str] | str:
    """(argv, cwd, extra env, result mark) of the evaluation process, or why there is none."""
    if task.eval_protocol == "innovatorbench":
        return evaluation_command(task, snapshot)
    if task.eval_protocol != "mini":
        return f"task {task.task_id}: unknown evaluation protocol {task.eval_protocol!r}"
    eval_dir = task.eval_dir.resolve()
    if not (eval_dir / "task" / "evaluation.py").is_file():
        return f"task {task.task_id} has no evaluation"
    return [sys.executable, "-B", "-c", _RUNNER, str(eval_dir), str(snapshot)], str(eval_dir), {}, _MARK


def run_evaluation(task: TaskSpec, snapshot: Path, timeout_s: float) -> tuple[list[dict[str, Any]] | None, str]:
    """Run the hidden evaluation on a snapshot folder in a subprocess; ``(results, error message)``."""
    cmd = _command(task, Path(snapshot).resolve())
    if isinstance(cmd, str):
        return None, cmd
    argv, cwd, extra_env, mark = cmd
    env = {**eval_env(Path(snapshot)), **extra_env}
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"evaluation timed out after {timeout_s:.0f} s"
    except OSError as e:
        return None, f"evaluation could not start: {e}"
    return parse_eval_output(proc.stdout, proc.stderr, mark)


def check_results(task: TaskSpec, results: list[dict[str, Any]]) -> None:
    for i, r in enumerate(results):
        if "score" not in r:
            raise EvaluationError(f"task {task.task_id}: evaluation result {i} has no 'score' key: "
                                  f"{json.dumps(r, default=str)[:300]}")


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
    task: TaskSpec, workspace_path: Path | str, timeout_s: float | None = None
) -> tuple[float, dict[str, Any], str]:
    """Score a workspace with the task's hidden evaluation: ``(score 0-100, metrics, message)``.

    The evaluation sees a snapshot of the declared outputs, not the workspace; ``timeout_s``
    applies when the task declares no ``max_eval_time``. Raises :class:`EvaluationError` for a
    result without ``score``.
    """
    limit = eval_timeout(task, timeout_s)
    with tempfile.TemporaryDirectory(prefix=f"apollo-grade-{task.task_id}-") as tmp:
        snapshot = Path(tmp) / "workspace"
        copy_out(Path(workspace_path), snapshot, declared_outputs(task))
        results, err = run_evaluation(task, snapshot, limit)
    if results is None:
        return 0.0, {}, err
    check_results(task, results)
    message = "; ".join(str(r.get("message", "")) for r in results if r.get("message"))
    return round(_score(results), 4), _metrics(results), message
