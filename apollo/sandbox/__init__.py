"""Isolation per rollout: every command and file operation of an episode runs in its own sandbox.

``make_sandbox(config, workspace, scratch)`` returns a :class:`Sandbox` of the configured backend:

* ``bwrap`` (default, :mod:`apollo.sandbox.bwrap`): Linux user/mount/PID/network namespaces
  through bubblewrap — only the workspace writable, nothing of the project, the guidance store
  or other rollouts mounted, the worker invisible, everything killed at episode end;
* ``docker`` (:mod:`apollo.sandbox.container`): the same contract in a container (GPU nodes, scale);
* ``none`` (:mod:`apollo.sandbox.local`): host processes, no isolation (debugging only).

The backend comes from ``params.yaml: sandbox:`` (:func:`configure`, called by
:func:`apollo.config.load_params`), else from ``$APOLLO_SANDBOX`` (a backend name or a JSON
object), else ``bwrap``. :func:`configure` also exports ``$APOLLO_SANDBOX`` so worker processes
started later use the same settings.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from apollo.sandbox.base import (
    BACKENDS,
    CommandResult,
    Process,
    Sandbox,
    SandboxConfig,
    SandboxError,
    copy_out,
)
from apollo.sandbox.fileops import FileOpError

ENV_VAR = "APOLLO_SANDBOX"
_configured: SandboxConfig | None = None


def configure(section: dict[str, Any] | SandboxConfig | None) -> SandboxConfig:
    """Set the process-wide sandbox settings (the ``sandbox:`` section of params.yaml)."""
    global _configured
    cfg = section if isinstance(section, SandboxConfig) else SandboxConfig.from_dict(section)
    _configured = cfg
    os.environ[ENV_VAR] = json.dumps(cfg.__dict__)
    return cfg


def default_config() -> SandboxConfig:
    if _configured is not None:
        return _configured
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw:
        return SandboxConfig()
    if raw.startswith("{"):
        try:
            return SandboxConfig.from_dict(json.loads(raw))
        except json.JSONDecodeError as e:
            raise ValueError(f"${ENV_VAR}: not valid JSON ({e})") from None
    return SandboxConfig.from_dict({"backend": raw})


def make_sandbox(config: SandboxConfig | dict[str, Any] | str | None, workspace: Path, scratch: Path) -> Sandbox:
    """A (not yet started) sandbox of the configured backend for one episode."""
    if config is None:
        cfg = default_config()
    elif isinstance(config, str):
        cfg = SandboxConfig.from_dict({"backend": config})
    elif isinstance(config, dict):
        cfg = SandboxConfig.from_dict(config)
    else:
        cfg = config
    if cfg.backend == "bwrap":
        from apollo.sandbox.bwrap import BwrapSandbox

        return BwrapSandbox(cfg, workspace, scratch)
    if cfg.backend == "docker":
        from apollo.sandbox.container import DockerSandbox

        return DockerSandbox(cfg, workspace, scratch)
    from apollo.sandbox.local import LocalSandbox

    return LocalSandbox(cfg, workspace, scratch)


__all__ = ["BACKENDS", "CommandResult", "FileOpError", "Process", "Sandbox", "SandboxConfig", "SandboxError",
           "configure", "copy_out", "default_config", "make_sandbox"]
