"""DVC as the executor of record: every stage runs through DVC's own ``dvc repro --single-item``.

DVC reads the params when the stage starts, restores outputs from its run cache when it has seen
the same deps and params before, and writes ``dvc.lock`` itself. A params overlay (a UI trigger
with other params) runs as ``dvc exp run --temp -S key=value …``: an experiment in a temporary
copy of the workspace, listed by ``dvc exp show``; the workspace and its ``dvc.lock`` stay as they
were.

Every DVC call of one workspace goes through one cross-process file lock
(``.dvc/tmp/apollo-dvc.lock``): DVC releases its own repo lock while a stage command runs, so two
``dvc repro`` processes could otherwise interleave in one workspace.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("apollo.pipeline")

# what DVC prints for each way a stage can end (dvc/stage/__init__.py, run.py, cache.py)
_RAN = re.compile(r"Running stage '([^']+)'")
_CACHED = re.compile(r"Stage '([^']+)' is cached - skipping run")
_SKIPPED = re.compile(r"Stage '([^']+)' didn't change, skipping")
_ENV_DROP = ("APOLLO_ROOT",)  # a stage finds its project from its working directory (DVC sets it)


class StageNameError(ValueError):
    """A stage name that ``dvc.yaml`` does not define."""


class WorkspaceBusyError(RuntimeError):
    """Another pipeline run holds this workspace."""


@dataclass
class StageResult:
    stage: str
    status: str  # ran | restored (DVC run cache) | skipped (up to date)
    seconds: float
    tail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "status": self.status, "seconds": round(self.seconds, 1)}


def lock_path(root: Path, name: str = "apollo-dvc.lock") -> Path:
    p = Path(root) / ".dvc" / "tmp" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


@contextmanager
def dvc_lock(root: Path, timeout_s: float = -1) -> Iterator[None]:
    """Serialize DVC calls of one workspace across threads and processes."""
    from filelock import FileLock

    with FileLock(str(lock_path(root)), timeout=timeout_s):
        yield


@contextmanager
def workspace_lock(root: Path, wait_s: float = 0.0) -> Iterator[None]:
    """One pipeline run per workspace: a second run waits ``wait_s`` seconds, then is refused."""
    from filelock import FileLock, Timeout

    path = lock_path(root, "apollo-pipeline.lock")
    lock = FileLock(str(path), timeout=wait_s)
    try:
        lock.acquire()
    except Timeout:
        holder = path.with_suffix(".owner")
        who = holder.read_text().strip() if holder.exists() else "another process"
        raise WorkspaceBusyError(f"{root}: another pipeline run ({who}) is running in this workspace; "
                                 f"wait for it to finish (or pass a longer wait) and run again") from None
    try:
        path.with_suffix(".owner").write_text(f"pid {os.getpid()}, since {time.strftime('%H:%M:%S')}\n")
        yield
    finally:
        path.with_suffix(".owner").unlink(missing_ok=True)
        lock.release()


def _repo(root: Path):
    from dvc.repo import Repo

    return Repo(str(root))


def stage_order(root: Path) -> list[str]:
    """Stage addresses (foreach/matrix expanded, e.g. ``evaluate@base``) in a topological order
    stable w.r.t. the order of ``dvc.yaml``."""
    import networkx as nx

    with dvc_lock(root):
        repo = _repo(root)
        try:
            graph = repo.index.graph  # edges: stage -> the stages it depends on
            index = {s.addressing: i for i, s in enumerate(repo.index.stages)}
            order = nx.lexicographical_topological_sort(graph.reverse(), key=lambda s: index[s.addressing])
            return [s.addressing for s in order]
        finally:
            repo.close()


def stage_closure(root: Path, targets: list[str]) -> set[str]:
    """The ``targets`` and every stage they depend on, transitively (what running them needs)."""
    import networkx as nx

    with dvc_lock(root):
        repo = _repo(root)
        try:
            stages = {s.addressing: s for s in repo.index.stages}
            unknown = [t for t in targets if t not in stages]
            if unknown:
                raise StageNameError(f"no stage {unknown} in dvc.yaml")
            out = set(targets)
            for t in targets:
                out |= {s.addressing for s in nx.descendants(repo.index.graph, stages[t])}
            return out
        finally:
            repo.close()


def stage_is_stale(root: Path, stage: str) -> bool:
    """Whether ``dvc status`` reports ``stage`` (alone, not its upstream) as changed: a stage that
    ``dvc repro`` would run or restore from the run cache."""
    with dvc_lock(root):
        repo = _repo(root)
        try:
            return bool(repo.status(targets=[stage]))
        finally:
            repo.close()


def resolve_force(names: list[str] | None, stages: list[str]) -> list[str]:
    """Stage addresses for ``force``: a stage address, or a foreach/matrix group (``evaluate`` means
    every ``evaluate@…``). An unknown name fails and lists the known ones."""
    out: list[str] = []
    for name in names or []:
        match = [s for s in stages if s == name or s.split("@", 1)[0] == name]
        if not match:
            raise StageNameError(f"force: no stage '{name}' in dvc.yaml (stages: {', '.join(stages)})")
        out.extend(m for m in match if m not in out)
    return out


def subprocess_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a DVC call: this interpreter's bin first on PATH (so a stage's ``python``
    is this one, also under a Prefect worker), no APOLLO_ROOT (the stage's cwd is its root)."""
    env = {k: v for k, v in os.environ.items() if k not in _ENV_DROP}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.update(extra or {})
    return env


PROGRESS_EVERY_S = 15.0  # a progress bar's redraws (\r) reach the flow's log at most this often
_EOL = re.compile(rb"\r\n|\r|\n")


def _split_output(chunks: Iterable[bytes]) -> Iterator[tuple[str, bool]]:
    """Non-empty output lines from a byte stream, each with ``True`` when it was ended by ``\\r``
    (a progress bar redrawing itself: tqdm ends a line with ``\\n`` only when the bar closes)."""
    buf = b""
    for chunk in chunks:
        buf += chunk
        while True:
            m = _EOL.search(buf)
            if m is None:
                break
            text = buf[:m.start()].decode("utf-8", "replace").rstrip()
            redraw = m.group() == b"\r"
            buf = buf[m.end():]
            if text:
                yield text, redraw
    text = buf.decode("utf-8", "replace").rstrip()
    if text:
        yield text, False


def _stream(cmd: list[str], root: Path, env: dict[str, str], on_line: Callable[[str], None],
            timeout_s: float | None) -> tuple[int, list[str]]:
    """Run ``cmd``, hand every output line to ``on_line`` (a progress bar's redraws at most every
    ``PROGRESS_EVERY_S``; they are not kept in the returned lines); kill it (and its stage command) after ``timeout_s``."""
    import signal
    import threading

    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    timed_out = threading.Event()

    def _kill() -> None:
        timed_out.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # dvc and the stage command it started
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout_s, _kill) if timeout_s else None
    if timer:
        timer.daemon = True
        timer.start()
    last_redraw = float("-inf")
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        for text, is_redraw in _split_output(iter(lambda: proc.stdout.read1(65536), b"")):
            if is_redraw:  # a progress bar's redraw: forwarded at most every PROGRESS_EVERY_S
                now = time.monotonic()
                if now - last_redraw < PROGRESS_EVERY_S:
                    continue
                last_redraw = now
            else:
                lines.append(text)
            on_line(text)
        proc.wait()
    finally:
        if timer:
            timer.cancel()
        if proc.poll() is None:
            _kill()
            proc.wait()
    if timed_out.is_set():
        raise TimeoutError(f"{' '.join(cmd[2:])}: not done after {timeout_s:.0f}s; killed")
    return proc.returncode, lines


def _status_of(stage: str, lines: list[str]) -> str:
    for pattern, status in ((_RAN, "ran"), (_CACHED, "restored"), (_SKIPPED, "skipped")):
        if any((m := pattern.search(ln)) and m.group(1) == stage for ln in lines):
            return status
    return "ran"


def repro_stage(root: Path, stage: str, *, force: bool = False, env: dict[str, str] | None = None,
                on_line: Callable[[str], None] = log.info, timeout_s: float | None = None) -> StageResult:
    """``dvc repro --single-item [--force] STAGE`` in ``root``: DVC decides whether it is stale,
    restores it from the run cache or runs it, and writes ``dvc.lock``."""
    cmd = [sys.executable, "-m", "dvc", "repro", "--single-item", *(["--force"] if force else []), stage]
    t0 = time.perf_counter()
    with dvc_lock(root):
        rc, lines = _stream(cmd, root, subprocess_env(env), on_line, timeout_s)
    if rc != 0:
        errors = [ln for ln in lines if "ERROR" in ln or "Error" in ln][-3:] or lines[-3:]
        raise RuntimeError(f"stage {stage} failed (dvc repro exit {rc}): " + " | ".join(errors)[-1500:])
    return StageResult(stage, _status_of(stage, lines), time.perf_counter() - t0, "\n".join(lines[-20:]))


def experiment_name(overlay: dict[str, Any]) -> str:
    digest = hashlib.sha1(repr(sorted(overlay.items())).encode()).hexdigest()[:6]
    return f"ui-{time.strftime('%Y%m%d-%H%M%S')}-{digest}"


def overlay_args(overlay: dict[str, Any]) -> list[str]:
    """``-S key=value`` arguments (values as YAML, so lists and numbers keep their types)."""
    import yaml

    args = []
    for key, value in overlay.items():
        if not re.fullmatch(r"[A-Za-z_][\w.\-]*", str(key)):
            raise ValueError(f"params overlay: '{key}' is not a dotted params.yaml key")
        text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
        text = text.removesuffix("...").strip()
        args += ["-S", f"{key}={text}"]
    return args


def check_overlay_keys(root: Path, overlay: dict[str, Any]) -> None:
    """Every overlay key names an existing params.yaml entry (a typo would silently add a new one)."""
    from apollo.config import load_params

    params = load_params(Path(root) / "params.yaml")
    for key in overlay:
        node: Any = params
        for part in str(key).split("."):
            if not isinstance(node, dict) or part not in node:
                raise ValueError(f"params overlay: params.yaml has no key '{key}'")
            node = node[part]


def exp_run(root: Path, overlay: dict[str, Any], name: str, *, env: dict[str, str] | None = None,
            on_line: Callable[[str], None] = log.info, timeout_s: float | None = None,
            targets: list[str] | None = None) -> StageResult:
    """``dvc exp run --temp -n NAME -S k=v … [TARGETS]``: the pipeline (or the stages ``targets``
    need) with the overlay as a DVC experiment."""
    check_overlay_keys(root, overlay)
    cmd = [sys.executable, "-m", "dvc", "exp", "run", "--temp", "-n", name, *overlay_args(overlay), *(targets or [])]
    t0 = time.perf_counter()
    with dvc_lock(root):
        rc, lines = _stream(cmd, root, subprocess_env(env), on_line, timeout_s)
    if rc != 0:
        errors = [ln for ln in lines if "ERROR" in ln][-3:] or lines[-3:]
        raise RuntimeError(f"experiment {name} failed (dvc exp run exit {rc}): " + " | ".join(errors)[-1500:])
    return StageResult(f"exp:{name}", "ran", time.perf_counter() - t0, "\n".join(lines[-20:]))


def exp_metrics(root: Path, name: str) -> dict[str, Any]:
    """The metrics DVC recorded for experiment ``name`` (as ``dvc exp show`` reads them)."""
    import json

    with dvc_lock(root):
        p = subprocess.run([sys.executable, "-m", "dvc", "exp", "show", "--json"], cwd=root,
                           env=subprocess_env(), capture_output=True, text=True, check=True)
    for baseline in json.loads(p.stdout or "[]"):
        for exp in baseline.get("experiments") or []:
            for rev in exp.get("revs") or []:
                if rev.get("name") == name:
                    return (rev.get("data") or {}).get("metrics") or {}
    raise KeyError(f"dvc exp show: no experiment '{name}'")
