"""``sandbox.backend: bwrap`` — one bubblewrap namespace set per episode (the default).

What a command inside sees and may do (the argv is :meth:`BwrapSandbox.argv`):

* **file system**: a fresh root with read-only ``/usr`` (and the ``/bin``, ``/lib*`` links), a few
  read-only ``/etc`` files (loader cache, passwd/group, hosts, TLS certificates), the interpreter
  and virtualenv of this worker read-only at their own paths (task scripts run numpy with the
  project's python), ``params.yaml: sandbox.ro_binds``, private ``/tmp``, ``/proc`` and ``/dev``,
  and the episode's workspace — the only writable host folder, at its host path. Not mounted:
  the project tree (so no task's hidden ``evaluations/``, no guidance store ``data/store``, no
  token files), other rollouts' workspaces, the worker's home;
* **processes**: a new PID namespace (the worker and every other host process are invisible and
  cannot be signalled; when the supervisor — its first process — ends, the kernel kills every
  process left, ``setsid``/``nohup``/double-forked ones included), ``--die-with-parent`` (a dying
  worker takes its sandboxes along), ``--new-session`` (no terminal to inject input into);
* **user**: a new user namespace with uid/gid ``sandbox.uid`` (1000) inside, every capability
  dropped and further user namespaces disabled, also when the worker runs as root;
* **network**: a new network namespace with only loopback (``sandbox.network: host`` shares the
  host's instead);
* **limits** (set by the supervisor, inherited by every command): CPU seconds and address space
  per process, process count (its own user namespace; ignored by the kernel when the worker is
  root), file size, no core dumps; plus, where cgroups are writable, a cgroup per sandbox with
  ``pids.max`` and a memory limit for the whole sandbox (:mod:`apollo.sandbox.cgroup`);
* **environment**: :meth:`SandboxConfig.command_env` only (``--clearenv``).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from apollo.sandbox.base import SandboxConfig, SandboxError, python_paths
from apollo.sandbox.cgroup import CgroupLimits
from apollo.sandbox.remote import INNER_LOG_DIR, SupervisedSandbox, supervisor_source

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/passwd",
             "/etc/group", "/etc/hosts", "/etc/nsswitch.conf", "/etc/localtime", "/etc/ssl", "/etc/ca-certificates",
             "/etc/mime.types")
TMP_BYTES = 1 << 30


@functools.cache
def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.cache
def bwrap_features() -> frozenset[str]:
    path = bwrap_path()
    if path is None:
        return frozenset()
    try:
        text = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    return frozenset(f for f in ("--disable-userns", "--unshare-cgroup-try", "--size") if f in text)


class BwrapSandbox(SupervisedSandbox):
    name = "bwrap"

    def __init__(self, config: SandboxConfig, workspace: Path, scratch: Path) -> None:
        super().__init__(config, workspace, scratch)
        venv, venv_real, base = python_paths()
        self.python = str(venv / "bin" / "python") if (venv / "bin" / "python").exists() else sys.executable
        self._venv, self._venv_real, self._base = venv, venv_real, base
        self.cgroup = CgroupLimits(f"apollo-sbx-{uuid.uuid4().hex[:12]}", config.max_processes,
                                   config.memory_mb << 20)

    def start(self) -> None:
        if not self.cgroup.dirs:
            self.cgroup.create()
        super().start()

    def preexec(self) -> None:
        self.cgroup.join()

    def _after_terminate(self) -> None:
        if self._closed:
            self.cgroup.remove()

    def command_path(self) -> list[str]:
        return [str(self._venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin"]

    def argv(self) -> list[str]:
        path = bwrap_path()
        if path is None:
            raise SandboxError("sandbox.backend bwrap: the 'bwrap' program is missing; install the Debian "
                               "package bubblewrap (`apt-get install -y bubblewrap`, `make test` does) or set "
                               "sandbox.backend: none (no isolation)")
        feats = bwrap_features()
        cfg = self.config
        uid = str(cfg.uid)
        a = [path, "--die-with-parent", "--new-session",
             "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        if "--unshare-cgroup-try" in feats:
            a.append("--unshare-cgroup-try")
        if cfg.network == "loopback":
            a.append("--unshare-net")
        if "--disable-userns" in feats:
            a.append("--disable-userns")
        a += ["--uid", uid, "--gid", uid, "--hostname", "apollo-sandbox", "--cap-drop", "ALL"]
        for d in SYSTEM_DIRS:
            p = Path(d)
            if p.is_symlink():
                a += ["--symlink", os.readlink(p), d]
            elif p.is_dir():
                a += ["--ro-bind", d, d]
        for f in ETC_FILES:
            a += ["--ro-bind-try", f, f]
        a += ["--proc", "/proc", "--dev", "/dev"]
        if "--size" in feats:
            a += ["--size", str(TMP_BYTES)]
        a += ["--tmpfs", "/tmp", "--dir", "/run/apollo", "--bind", str(self.log_dir), INNER_LOG_DIR]
        binds = [str(self._base), str(self._venv_real), *cfg.ro_binds]
        for b in dict.fromkeys(binds):
            a += ["--ro-bind", b, b]
        if self._venv != self._venv_real:
            a += ["--symlink", str(self._venv_real), str(self._venv)]
        ws = str(self.workspace)
        a += ["--bind", ws, ws, "--chdir", ws, "--clearenv"]
        for k, v in cfg.command_env(ws, self.command_path()).items():
            a += ["--setenv", k, v]
        a += ["--", self.python, "-I", "-S", "-B", "-c", supervisor_source(), ws, INNER_LOG_DIR, json.dumps(cfg.limits())]
        return a

    def start_error(self, stderr: str) -> str:
        msg = super().start_error(stderr)
        if "namespace" in stderr or "Operation not permitted" in stderr:
            msg += (" — this machine does not allow unprivileged user namespaces (sysctl "
                    "kernel.unprivileged_userns_clone / user.max_user_namespaces, or a container without "
                    "them); use sandbox.backend: docker, or none for debugging")
        return msg
