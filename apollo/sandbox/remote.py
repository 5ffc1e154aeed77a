"""A sandbox whose commands are started by :mod:`apollo.sandbox.supervisor` inside it.

The bwrap and container backends differ only in the argv that starts the supervisor; this class
speaks the supervisor's line protocol over the pipes of that process: requests with an id and a
reply per request, ``exit`` events per command. A supervisor that dies (the agent killed it, a
limit hit it) ends the sandbox's namespace; the next command starts a fresh sandbox on the same
workspace and says so in its output.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import threading
from abc import abstractmethod
from pathlib import Path
from typing import Any

from apollo.sandbox import fileops, supervisor
from apollo.sandbox.base import Process, Sandbox, SandboxConfig, SandboxError
from apollo.sandbox.fileops import FileOpError


INNER_LOG_DIR = "/run/apollo/logs"
REQUEST_TIMEOUT_S = 60.0


def supervisor_source() -> str:
    """The program the sandbox runs: the file operations and the supervisor, standard library only."""
    return Path(fileops.__file__).read_text(encoding="utf-8") + "\n\n" + Path(supervisor.__file__).read_text(
        encoding="utf-8")


class RemoteProcess(Process):
    def __init__(self, box: SupervisedSandbox, cid: int) -> None:
        self.box, self.cid = box, cid
        self._code: int | None = None
        self._done = threading.Event()
        self.generation = 0  # which supervisor process started it

    def _exited(self, code: int) -> None:
        self._code = code
        self._done.set()

    @property
    def returncode(self) -> int | None:
        return self._code

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def kill(self) -> None:
        if self._done.is_set():
            return
        try:
            self.box._request({"op": "kill", "cid": self.cid}, timeout=10)
        except SandboxError:
            pass
        self._done.wait(5)


class SupervisedSandbox(Sandbox):
    """Common part of the bwrap and container backends."""

    def __init__(self, config: SandboxConfig, workspace: Path, scratch: Path) -> None:
        super().__init__(config, workspace, scratch)
        self._proc: subprocess.Popen[str] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[threading.Event, list[Any]]] = {}
        self._commands: dict[int, RemoteProcess] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._ready = threading.Event()
        self._dead = True
        self._closed = False
        self.info: dict[str, Any] = {}
        self._stderr_path = self.scratch / f"{self.name}.stderr"

    @abstractmethod
    def argv(self) -> list[str]:
        """The command line that starts the supervisor inside the sandbox."""

    def launch_env(self) -> dict[str, str]:
        return {"PATH": "/usr/local/bin:/usr/bin:/bin"}

    def preexec(self) -> None:
        """Runs in the launcher's child before exec (e.g. join the sandbox's cgroups)."""

    def start_error(self, stderr: str) -> str:
        return f"{self.name} sandbox did not start: {stderr.strip()[-800:] or 'no error output'}"

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> None:
        if self._closed:
            raise SandboxError("the sandbox is closed")
        self._ready.clear()
        with open(self._stderr_path, "w") as err:
            try:
                self._proc = subprocess.Popen(
                    self.argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                    env=self.launch_env(), bufsize=1, close_fds=True, start_new_session=True,
                    preexec_fn=self.preexec,
                )
            except FileNotFoundError as e:
                raise SandboxError(f"{self.name} sandbox: {e.filename} not found; install it "
                                   "(make test does) or pick another sandbox.backend") from None
        self._dead = False
        threading.Thread(target=self._reader, args=(self._proc,), daemon=True,
                         name=f"sandbox-{self.name}-reader").start()
        if not self._ready.wait(self.config.start_timeout_s) or self._dead:
            self._terminate()
            stderr = self._stderr_path.read_text(errors="replace") if self._stderr_path.exists() else ""
            raise SandboxError(self.start_error(stderr))

    def _reader(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "rid" in msg:
                with self._lock:
                    slot = self._pending.pop(msg["rid"], None)
                if slot is not None:
                    slot[1].append(msg)
                    slot[0].set()
            elif msg.get("event") == "exit":
                p = self._commands.get(msg.get("cid"))
                if p is not None:
                    p._exited(int(msg.get("code", -1)))
            elif msg.get("event") == "ready":
                self.info = msg
                self._ready.set()
        # EOF: the supervisor (and with it the namespace) is gone
        if proc is self._proc:
            self._dead = True
        self._ready.set()
        with self._lock:
            pending, self._pending = self._pending, {}
        for ev, box in pending.values():
            box.append({"ok": False, "kind": "error", "error": "the sandbox stopped"})
            ev.set()
        for p in list(self._commands.values()):
            if p.returncode is None and p.generation == id(proc):
                p._exited(-9)

    def _terminate(self) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()  # bwrap --die-with-parent / container --rm take the namespace with it
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._after_terminate()

    def _after_terminate(self) -> None:
        """Backend clean-up after the supervisor ended (e.g. remove a container)."""

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._terminate()
        self._dead = True
        for p in self._commands.values():
            if p.returncode is None:
                p._exited(-9)

    @property
    def alive(self) -> bool:
        return not self._dead and self._proc is not None and self._proc.poll() is None

    def ensure_started(self) -> None:
        """Start, or restart after the sandbox died (:meth:`take_note` then says so once)."""
        if self.alive:
            return
        if self._proc is not None:
            self._terminate()
            self.restarts += 1
            self.note = "[the sandbox had stopped, all its processes were killed; a fresh one was started]"
        self.start()

    # -- requests -----------------------------------------------------------------------------------
    def _request(self, req: dict[str, Any], timeout: float = REQUEST_TIMEOUT_S) -> Any:
        if not self.alive:
            raise SandboxError("the sandbox is not running")
        rid = next(self._ids)
        ev: threading.Event = threading.Event()
        box: list[Any] = []
        with self._lock:
            self._pending[rid] = (ev, box)
        line = json.dumps({**req, "rid": rid}) + "\n"
        try:
            with self._write_lock:
                assert self._proc is not None and self._proc.stdin is not None
                self._proc.stdin.write(line)
                self._proc.stdin.flush()
        except (OSError, ValueError) as e:
            with self._lock:
                self._pending.pop(rid, None)
            raise SandboxError(f"the sandbox stopped ({e})") from None
        if not ev.wait(timeout):
            with self._lock:
                self._pending.pop(rid, None)
            raise SandboxError(f"the sandbox did not answer {req.get('op')} within {timeout:.0f} s")
        msg = box[0]
        if not msg.get("ok"):
            if req.get("op") == "file" and msg.get("kind") in ("refused", "error"):
                raise FileOpError(msg["kind"], msg.get("error", ""))
            raise SandboxError(msg.get("error", "the sandbox failed"))
        return msg.get("result")

    def spawn(self, command: str, log_name: str) -> RemoteProcess:
        self.ensure_started()
        cid = next(self._ids)
        p = RemoteProcess(self, cid)
        p.generation = id(self._proc)
        self._commands[cid] = p
        try:
            self._request({"op": "spawn", "cid": cid, "command": command, "log": log_name})
        except SandboxError:
            p._exited(-1)
            raise
        return p

    def file_op(self, name: str, **args: Any) -> Any:
        self.ensure_started()
        return self._request({"op": "file", "name": name, "args": args})
