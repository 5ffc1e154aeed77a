"""``sandbox.backend: docker`` — one container per episode (GPU nodes, clusters, scale).

The same supervisor as the bwrap backend runs as the container's first process, attached through
``docker run -i`` (the CLI's stdin/stdout carry the line protocol), so the episode code cannot
tell the backends apart. The container gets: the workspace bind-mounted read-write at
``/workspace`` (the only writable host folder), the log folder at ``/run/apollo/logs``,
``sandbox.ro_binds`` read-only at their own paths, a read-only root file system with a private
``/tmp``, ``--network none`` (loopback only; ``sandbox.network: host`` → ``--network host``),
``--cap-drop ALL``, ``--security-opt no-new-privileges``, a non-root ``--user``, ``--pids-limit``,
``--memory``, ``--cpus``, ``--gpus`` when asked, and only the allow-listed environment. ``--rm``
and ``--init`` (tini reaps and forwards) remove it with every process at episode end; closing
also runs ``docker rm -f`` on its name in case the CLI died first.

The image must provide ``sandbox.python`` (a Python 3 with the task's packages, e.g. numpy) and
bash; the host's virtualenv is not mounted (its interpreter need not run in the image). The
``podman`` CLI takes the same argv (``sandbox.docker: podman``). On Kubernetes the same argv maps
onto a pod spec (``securityContext: {runAsNonRoot, capabilities: {drop: [ALL]},
allowPrivilegeEscalation: false, readOnlyRootFilesystem}``, resources, a NetworkPolicy that
denies all traffic, the workspace as a volume) attached with ``kubectl run -i``; that launcher is
not written yet.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

from apollo.sandbox.base import SandboxConfig, SandboxError
from apollo.sandbox.remote import INNER_LOG_DIR, SupervisedSandbox, supervisor_source

INNER_WORKSPACE = "/workspace"


class DockerSandbox(SupervisedSandbox):
    name = "docker"

    def __init__(self, config: SandboxConfig, workspace: Path, scratch: Path) -> None:
        super().__init__(config, workspace, scratch)
        self.container = f"apollo-sbx-{uuid.uuid4().hex[:12]}"

    @property
    def inner_workspace(self) -> str:
        return INNER_WORKSPACE

    def argv(self) -> list[str]:
        cfg = self.config
        cli = shutil.which(cfg.docker) or cfg.docker
        a = [cli, "run", "-i", "--rm", "--init", "--name", self.container,
             "--network", "none" if cfg.network == "loopback" else "host",
             "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
             "--user", f"{cfg.uid}:{cfg.uid}", "--read-only", "--tmpfs", "/tmp:rw,nosuid,size=1g",
             "--pids-limit", str(cfg.max_processes), "--memory", f"{cfg.memory_mb}m", "--cpus", f"{cfg.cpus:g}",
             "--ulimit", f"cpu={cfg.cpu_time_s}", "--ulimit", f"fsize={cfg.max_file_mb << 20}",
             "--ulimit", "core=0",
             "-v", f"{self.workspace}:{INNER_WORKSPACE}:rw", "-v", f"{self.log_dir}:{INNER_LOG_DIR}:rw",
             "-w", INNER_WORKSPACE]
        for b in cfg.ro_binds:
            a += ["-v", f"{b}:{b}:ro"]
        if cfg.gpus:
            a += ["--gpus", cfg.gpus]
        env = cfg.command_env(INNER_WORKSPACE, ["/usr/local/bin", "/usr/bin", "/bin"])
        for k, v in env.items():
            a += ["-e", f"{k}={v}"]
        a += [cfg.image, cfg.python, "-I", "-B", "-c", supervisor_source(), INNER_WORKSPACE, INNER_LOG_DIR,
              json.dumps(cfg.limits())]
        return a

    def launch_env(self) -> dict[str, str]:
        import os

        env = super().launch_env()
        for k in ("DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT", "HOME"):  # how the CLI finds its daemon
            if k in os.environ:
                env[k] = os.environ[k]
        return env

    def start(self) -> None:
        cli = shutil.which(self.config.docker)
        if cli is None:
            raise SandboxError(f"sandbox.backend docker: the '{self.config.docker}' CLI is not installed; "
                               "install Docker (or podman: sandbox.docker: podman) or use sandbox.backend: bwrap")
        super().start()

    def start_error(self, stderr: str) -> str:
        if "Cannot connect to the Docker daemon" in stderr or "docker daemon" in stderr.lower():
            return ("sandbox.backend docker: the Docker daemon is not reachable "
                    f"({stderr.strip().splitlines()[-1][:300]}); start dockerd (or set DOCKER_HOST), "
                    "or use sandbox.backend: bwrap")
        if "Unable to find image" in stderr or "pull access denied" in stderr:
            return (f"sandbox.backend docker: image {self.config.image!r} is not available "
                    f"({stderr.strip().splitlines()[-1][:300]}); build or pull it, or set sandbox.image")
        return super().start_error(stderr)

    def _after_terminate(self) -> None:
        cli = shutil.which(self.config.docker)
        if cli is None:
            return
        try:
            subprocess.run([cli, "rm", "-f", self.container], capture_output=True, timeout=30,
                           env=self.launch_env())
        except (OSError, subprocess.TimeoutExpired):
            pass
