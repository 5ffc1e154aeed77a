"""Per-sandbox cgroups: a process-count and a memory limit for everything a sandbox starts.

``RLIMIT_NPROC`` does not hold for a worker running as root (the sandbox's user maps to host
root, whose process count the kernel does not cap), so where the machine lets us create cgroups
the bwrap backend also puts the sandbox in its own group below the worker's: ``pids.max`` =
``sandbox.max_processes`` and a memory limit of ``sandbox.memory_mb`` for the whole sandbox.
cgroup v1 (``/sys/fs/cgroup/{pids,memory}``) and v2 (a delegated unified hierarchy) are both
handled; where neither is writable, the limits fall back to the supervisor's rlimits and
:attr:`CgroupLimits.applied` says so (``[]``).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)
ROOT = Path("/sys/fs/cgroup")


def _own_paths() -> dict[str, str]:
    """controller (or "" for v2) → this process's cgroup path."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for ctrl in parts[1].split(",") if parts[1] else [""]:
            out[ctrl] = parts[2]
    return out


class CgroupLimits:
    def __init__(self, name: str, max_processes: int, memory_bytes: int) -> None:
        self.name, self.max_processes, self.memory_bytes = name, max_processes, memory_bytes
        self.dirs: list[Path] = []
        self.applied: list[str] = []

    def _make(self, parent: Path, settings: dict[str, str]) -> bool:
        d = parent / self.name
        try:
            d.mkdir()
        except OSError as e:
            log.debug("cgroup %s: %s", d, e)
            return False
        try:
            for key, value in settings.items():
                (d / key).write_text(value)
        except OSError as e:
            log.debug("cgroup %s: %s", d, e)
            self._rmdir(d)
            return False
        self.dirs.append(d)
        return True

    def create(self) -> list[str]:
        own = _own_paths()
        if "pids" in own and (ROOT / "pids").is_dir():
            if self._make(ROOT / "pids" / own["pids"].lstrip("/"), {"pids.max": str(self.max_processes)}):
                self.applied.append(f"pids.max={self.max_processes}")
        if "memory" in own and (ROOT / "memory").is_dir():
            if self._make(ROOT / "memory" / own["memory"].lstrip("/"),
                          {"memory.limit_in_bytes": str(self.memory_bytes)}):
                self.applied.append(f"memory.limit_in_bytes={self.memory_bytes}")
        if not self.applied and "" in own and (ROOT / "cgroup.controllers").is_file():
            parent = ROOT / own[""].lstrip("/")
            ctrls = (parent / "cgroup.subtree_control").read_text().split() if (
                parent / "cgroup.subtree_control").is_file() else []
            settings = {}
            if "pids" in ctrls:
                settings["pids.max"] = str(self.max_processes)
            if "memory" in ctrls:
                settings["memory.max"] = str(self.memory_bytes)
            if settings and self._make(parent, settings):
                self.applied += [f"{k}={v}" for k, v in settings.items()]
        return self.applied

    def join(self) -> None:
        """Move the calling process into the groups (a ``preexec_fn``: children inherit them)."""
        for d in self.dirs:
            with open(d / "cgroup.procs", "w") as fh:
                fh.write(str(os.getpid()))

    @staticmethod
    def _rmdir(d: Path) -> None:
        for _ in range(20):
            try:
                d.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)  # the last processes are still exiting
        log.warning("cgroup %s could not be removed", d)

    def remove(self) -> None:
        for d in self.dirs:
            self._rmdir(d)
        self.dirs = []
