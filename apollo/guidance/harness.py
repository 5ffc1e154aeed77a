"""Run ``apollo serve`` as a real subprocess (for the restart tests and the load test).

:class:`ServiceProcess` starts the service on a fixed loopback port, waits for ``/healthz``, and can
be killed (SIGKILL: a crash) or stopped (SIGTERM: a graceful restart) and started again on the same
port and database. Its output goes to a log file that tests read (e.g. to check no token is logged).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceProcess:
    def __init__(self, db: str | Path, log_path: str | Path, *, tokens: dict[str, str] | None = None,
                 port: int | None = None, token_file: str | Path | None = None, access_log: bool = True,
                 cwd: str | Path | None = None):
        self.db, self.log_path = str(db), Path(log_path)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("APOLLO_") or k == "APOLLO_ROOT"}
        for role, tok in (tokens or {}).items():
            self.env[f"APOLLO_{role.upper()}_TOKEN"] = tok
        self.env["PYTHONUNBUFFERED"] = "1"
        if token_file is None:  # a token file beside a SQLite store, else in the log's folder
            base = Path(self.db).parent if "://" not in self.db else self.log_path.parent
            token_file = base / "tokens.json"
        self.token_file = str(token_file)
        self.access_log, self.cwd = access_log, cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout_s: float = 30.0) -> ServiceProcess:
        cmd = [sys.executable, "-m", "apollo", "serve", "--db", self.db, "--port", str(self.port),
               "--tokens", self.token_file, "--log-level", "info"]
        if not self.access_log:
            cmd.append("--no-access-log")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd)
        self.starts += 1
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"apollo serve exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"apollo serve did not answer within {timeout_s} s:\n{self.log()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL: the service crashes (nothing is flushed, no shutdown hook runs)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM: a graceful stop (uvicorn drains connections, at most ~3 s)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
