"""``sandbox.backend: none`` — commands run as host processes (the pre-sandbox behaviour).

No isolation: a command sees the host's file system, processes and network as the worker's user.
Only the explicit environment, the process group per command, the kill at episode end of each
command's process group and the tools' polite refusals remain. For debugging and for machines
without user namespaces; never for RL on a real policy.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from apollo.sandbox import fileops
from apollo.sandbox.base import Process, Sandbox, SandboxConfig

_SHELL = "/bin/bash" if Path("/bin/bash").exists() else "/bin/sh"


class LocalProcess(Process):
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> bool:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.wait(5)


class LocalSandbox(Sandbox):
    name = "none"

    def __init__(self, config: SandboxConfig, workspace: Path, scratch: Path) -> None:
        super().__init__(config, workspace, scratch)
        self._bin = self.scratch / "bin"
        self._procs: list[LocalProcess] = []
        self._limits = config.limits()

    def start(self) -> None:
        self._bin.mkdir(exist_ok=True)
        for name in ("python", "python3"):
            if not (self._bin / name).exists():
                (self._bin / name).symlink_to(sys.executable)
        self.env = self.config.command_env(
            str(self.workspace), [str(self._bin), str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])

    def spawn(self, command: str, log_name: str) -> LocalProcess:
        # the file-size limit through the shell (a preexec_fn would force a slow fork of the worker)
        script = f"ulimit -f {self._limits['max_file_bytes'] // 1024} 2>/dev/null\n{command}"
        with open(self.log_dir / log_name, "wb") as fh:
            proc = subprocess.Popen(
                [_SHELL, "-c", script], cwd=str(self.workspace), env=self.env, stdin=subprocess.DEVNULL,
                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
            )
        p = LocalProcess(proc)
        self._procs.append(p)
        return p

    def file_op(self, name: str, **args: Any) -> Any:
        return fileops.dispatch(str(self.workspace), name, args)

    def close(self) -> None:
        for p in self._procs:
            if p.running:
                p.kill()
        self._procs.clear()
