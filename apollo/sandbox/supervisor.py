"""The process that runs inside a sandbox and starts the agent's commands there.

Standard library only. :class:`~apollo.sandbox.remote.SupervisedSandbox` starts it as the first
process of a bwrap namespace (or a container) with ``python -I -B -c <fileops source + this
source> ROOT LOG_DIR LIMITS_JSON`` and talks to it over its stdin/stdout, one JSON object per line:

* requests ``{"rid": n, "op": "spawn", "cid": c, "command": "...", "log": "0001.log"}``,
  ``{"rid": n, "op": "kill", "cid": c}``, ``{"rid": n, "op": "file", "name": "read", "args": {...}}``,
  ``{"rid": n, "op": "ping"}``;
* replies ``{"rid": n, "ok": true, "result": ...}`` or ``{"rid": n, "ok": false, "kind": ..., "error": ...}``;
* events ``{"event": "ready", "pid": p, "uid": u}`` and ``{"event": "exit", "cid": c, "code": rc}``.

Commands run through ``bash -c`` in their own session (``killpg`` stops a command and what it
started in its process group); their output goes to ``LOG_DIR/<log>``, which the host reads.
The resource limits (``RLIMIT_CPU``, ``RLIMIT_AS``, ``RLIMIT_NPROC``, ``RLIMIT_FSIZE``,
``RLIMIT_CORE``) are set on the supervisor itself, so every command inherits them; they cannot be
raised again without privileges. The supervisor makes itself non-dumpable, so the agent's
processes (same user) can neither ptrace it nor read its ``/proc/<pid>/environ`` or ``fd``.
Killing it is possible (same user) and only ends the sandbox: the host notices and starts a
fresh one at the next command.
"""

import json
import os
import resource
import signal
import subprocess
import sys
import threading

_LIMITS = {
    "cpu_time_s": resource.RLIMIT_CPU,
    "memory_bytes": resource.RLIMIT_AS,
    "max_processes": resource.RLIMIT_NPROC,
    "max_file_bytes": resource.RLIMIT_FSIZE,
}


def _no_dump():
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass


def _set_limits(limits):
    for key, which in _LIMITS.items():
        value = limits.get(key)
        if value:
            resource.setrlimit(which, (int(value), int(value)))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class Supervisor:
    def __init__(self, root, log_dir, shell):
        self.root, self.log_dir, self.shell = root, log_dir, shell
        self.procs = {}
        self.lock = threading.Lock()
        self.out = sys.stdout

    def send(self, obj):
        line = json.dumps(obj)
        with self.lock:
            self.out.write(line + "\n")
            self.out.flush()

    def spawn(self, cid, command, log):
        path = os.path.join(self.log_dir, os.path.basename(log))
        with open(path, "wb") as fh:
            proc = subprocess.Popen([self.shell, "-c", command], cwd=self.root, stdin=subprocess.DEVNULL,
                                    stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[cid] = proc

        def wait():
            code = proc.wait()
            self.send({"event": "exit", "cid": cid, "code": code})

        threading.Thread(target=wait, daemon=True).start()
        return {"pid": proc.pid}

    def kill(self, cid):
        proc = self.procs.get(cid)
        if proc is None:
            return {"killed": False}
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return {"killed": True}

    def handle(self, req):
        rid = req.get("rid")
        try:
            op = req.get("op")
            if op == "spawn":
                result = self.spawn(req["cid"], req["command"], req["log"])
            elif op == "kill":
                result = self.kill(req["cid"])
            elif op == "file":
                result = dispatch(self.root, req["name"], req.get("args") or {})  # noqa: F821 (fileops source)
            elif op == "ping":
                result = {"pid": os.getpid()}
            else:
                raise ValueError(f"unknown op {op!r}")
            self.send({"rid": rid, "ok": True, "result": result})
        except FileOpError as e:  # noqa: F821 (fileops source)
            self.send({"rid": rid, "ok": False, "kind": e.kind, "error": e.message})
        except Exception as e:
            self.send({"rid": rid, "ok": False, "kind": "error", "error": f"{type(e).__name__}: {e}"})

    def loop(self):
        for line in sys.stdin:
            try:
                req = json.loads(line)
            except ValueError:
                continue
            if req.get("op") == "file":  # file operations may take a while: never block a kill
                threading.Thread(target=self.handle, args=(req,), daemon=True).start()
            else:
                self.handle(req)


def main(argv):
    root, log_dir, limits = argv[0], argv[1], json.loads(argv[2])
    _no_dump()
    _set_limits(limits)
    shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
    sup = Supervisor(root, log_dir, shell)
    sup.send({"event": "ready", "pid": os.getpid(), "uid": os.getuid()})
    sup.loop()


if __name__ == "__main__":
    main(sys.argv[1:])
