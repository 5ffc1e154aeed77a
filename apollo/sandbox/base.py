"""The :class:`Sandbox` interface, its configuration and what every backend shares.

One sandbox per episode: :meth:`Sandbox.start` when the episode's workspace exists,
:meth:`Sandbox.spawn` for each command (foreground or background session; output to a log file
the host reads), :meth:`Sandbox.run` for a command with a timeout, :meth:`Sandbox.file_op` for the
file tools, :meth:`Sandbox.close` at episode end (every process of the episode dies), and
:func:`copy_out` to take the declared outputs out of the workspace for grading.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

BACKENDS = ("bwrap", "none", "docker")

# environment variables every command gets (values fixed here, not read from the host)
BASE_ENV: dict[str, str] = {
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TMPDIR": "/tmp",
}


class SandboxError(RuntimeError):
    """A sandbox that cannot start or answer (the message says why and what to do)."""


@dataclass
class SandboxConfig:
    """``params.yaml: sandbox:`` — which backend isolates rollouts, and its limits.

    ``env`` adds fixed variables; ``env_passthrough`` names host variables copied in (an explicit
    allow-list; nothing else of the host environment reaches a command). Limits are per process
    (CPU seconds, address space, file size) and per sandbox (process count; ``bwrap``: counted in
    the sandbox's own user namespace). ``network: loopback`` gives a private network namespace
    with only ``lo`` (tasks start local servers); ``host`` shares the host's network (only for a
    task that needs it, e.g. a model hub behind a proxy).
    """

    backend: str = "bwrap"  # bwrap | none | docker
    cpu_time_s: int = 3600
    memory_mb: int = 8192
    max_processes: int = 512
    max_file_mb: int = 200
    network: str = "loopback"  # loopback | host
    env: dict[str, str] = field(default_factory=dict)
    env_passthrough: list[str] = field(default_factory=list)
    ro_binds: list[str] = field(default_factory=list)  # extra host paths mounted read-only (datasets, models)
    uid: int = 1000  # the user inside the sandbox (bwrap, docker): never 0
    start_timeout_s: float = 30.0
    # docker backend
    image: str = "python:3.11-slim"
    docker: str = "docker"  # the CLI (docker or podman)
    cpus: float = 2.0
    gpus: str = ""  # docker --gpus value, e.g. "all" or "device=0"
    python: str = "python3"  # the interpreter inside the image

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SandboxConfig:
        # the unknown-key check of apollo.config.from_section, here so that the sandbox stands on
        # nothing of the pipeline's (load_params configures it: config imports the sandbox)
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"params.yaml: sandbox: unknown key(s) {unknown} (known: {sorted(known)})")
        cfg = cls(**d)
        if cfg.backend not in BACKENDS:
            raise ValueError(f"params.yaml: sandbox.backend must be one of {BACKENDS}, got {cfg.backend!r}")
        if cfg.network not in ("loopback", "host"):
            raise ValueError(f"params.yaml: sandbox.network must be loopback or host, got {cfg.network!r}")
        if cfg.uid == 0:
            raise ValueError("params.yaml: sandbox.uid must not be 0 (root inside the sandbox)")
        return cfg

    def limits(self) -> dict[str, int]:
        return {"cpu_time_s": self.cpu_time_s, "memory_bytes": self.memory_mb << 20,
                "max_processes": self.max_processes, "max_file_bytes": self.max_file_mb << 20}

    def command_env(self, home: str, path: list[str]) -> dict[str, str]:
        """The explicit environment of every command: fixed values, ``env``, the passthrough list."""
        env = {**BASE_ENV, "HOME": home, "PATH": os.pathsep.join(dict.fromkeys(path))}
        env.update({str(k): str(v) for k, v in self.env.items()})
        for name in self.env_passthrough:
            if name in os.environ:
                env[name] = os.environ[name]
        return env


def python_paths() -> tuple[Path, Path, Path]:
    """(venv prefix as named, its real path, the base interpreter prefix) of this interpreter."""
    prefix = Path(sys.prefix)
    return prefix, prefix.resolve(), Path(sys.base_prefix).resolve()


class Process(ABC):
    """One command started by :meth:`Sandbox.spawn`."""

    @property
    @abstractmethod
    def returncode(self) -> int | None: ...

    @property
    def running(self) -> bool:
        return self.returncode is None

    @abstractmethod
    def wait(self, timeout: float | None = None) -> bool:
        """Block until the command ends (True) or the timeout passes (False)."""

    @abstractmethod
    def kill(self) -> None:
        """Stop the command and what it started in its process group."""


@dataclass
class CommandResult:
    exit_code: int | None
    output: str
    timed_out: bool


class Sandbox(ABC):
    """Where an episode's commands and file operations run.

    ``workspace`` is the host folder of the episode's workspace (the only writable place);
    ``scratch`` a host folder outside it for command logs. ``inner_workspace`` is the path of the
    workspace as the commands see it.
    """

    name = "abstract"

    def __init__(self, config: SandboxConfig, workspace: Path, scratch: Path) -> None:
        self.config = config
        self.workspace = Path(workspace).resolve()
        self.scratch = Path(scratch).resolve()
        self.log_dir = self.scratch / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.restarts = 0
        self.note = ""  # set when the sandbox had to be restarted; read once by take_note()

    def take_note(self) -> str:
        note, self.note = self.note, ""
        return note

    @property
    def inner_workspace(self) -> str:
        return str(self.workspace)

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def spawn(self, command: str, log_name: str) -> Process:
        """Start ``command`` (``bash -c``) in the workspace; its output goes to ``log_dir/log_name``."""

    @abstractmethod
    def file_op(self, name: str, **args: Any) -> Any:
        """Run a file operation of :mod:`apollo.sandbox.fileops`; raises ``FileOpError``."""

    @abstractmethod
    def close(self) -> None:
        """Kill every process of the episode (idempotent)."""

    def run(self, command: str, timeout_s: float, log_name: str | None = None) -> CommandResult:
        """Run a command to its end or kill it after ``timeout_s``."""
        log_name = log_name or f"run-{time.monotonic_ns()}.log"
        proc = self.spawn(command, log_name)
        done = proc.wait(timeout_s)
        if not done:
            proc.kill()
            proc.wait(5)
        text = (self.log_dir / log_name).read_bytes().decode("utf-8", errors="replace")
        return CommandResult(proc.returncode, text, not done)

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def copy_out(workspace: Path, dest: Path, paths: list[str] | None = None, max_bytes: int = 2 << 30) -> list[str]:
    """Copy regular files of ``workspace`` (all, or under the relative ``paths``) into ``dest``.

    Runs on the host, race-free against a sandbox that keeps changing the workspace: the walk
    uses directory file descriptors (``os.fwalk``) and opens every file with ``O_NOFOLLOW``
    relative to its folder, so no symlink (planted or swapped in) is ever followed; symlinks,
    devices, FIFOs and sockets are skipped. Returns the copied relative paths.
    """
    workspace, dest = Path(workspace), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    copied: list[str] = []
    budget = [max_bytes]
    wanted = None if paths is None else [os.path.normpath(p).strip("/") for p in paths]
    for top, dirs, files, dfd in os.fwalk(str(workspace), follow_symlinks=False):
        rel_dir = os.path.relpath(top, workspace)
        rel_dir = "" if rel_dir == "." else rel_dir
        if wanted is None or any(rel_dir == w or rel_dir.startswith(w + "/") for w in wanted):
            (dest / rel_dir).mkdir(parents=True, exist_ok=True)  # empty folders are outputs too
        for name in files:
            rel = os.path.join(rel_dir, name) if rel_dir else name
            if wanted is not None and not any(rel == w or rel.startswith(w + "/") for w in wanted):
                continue
            _copy_one(dfd, name, dest / rel, budget)
            if (dest / rel).exists():
                copied.append(rel)
        if wanted is not None:  # do not descend into folders no declared output lies in
            dirs[:] = [d for d in dirs if any(
                w == os.path.join(rel_dir, d) or w.startswith(os.path.join(rel_dir, d) + "/")
                or os.path.join(rel_dir, d).startswith(w + "/") for w in wanted)]
    return copied


def _copy_one(dfd: int, name: str, target: Path, budget: list[int]) -> None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    except OSError:
        return  # a symlink (ELOOP), vanished, or unreadable
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > budget[0]:
            return
        budget[0] -= st.st_size
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as out:
            while chunk := os.read(fd, 1 << 20):
                out.write(chunk)
    finally:
        os.close(fd)
