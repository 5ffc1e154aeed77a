"""What a stage run is made of, read from ``dvc.yaml`` and ``dvc.lock`` through DVC's own index:
the params it declares (and those of every upstream stage), its data dependencies with the hashes
DVC recorded, the git commit and the ``dvc.lock`` hash.

:class:`ParamsGuard` keeps ``dvc.lock`` true: DVC hashes a stage's params once more *after* its
command ends, so a ``params.yaml`` edited while a stage runs would be recorded as the params of an
output made with the old ones (and served from the run cache later). The guard compares the
stage's declared params at its end with those it read at its start and fails the stage on a
difference, so DVC records nothing.
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from apollo.config import load_params

log = logging.getLogger(__name__)


class ParamsChangedError(RuntimeError):
    pass


@dataclass
class StageInfo:
    address: str
    param_keys: list[str] = field(default_factory=list)           # this stage's declared params
    upstream: list[str] = field(default_factory=list)             # stages it depends on, transitively
    upstream_param_keys: list[str] = field(default_factory=list)  # declared params of those stages
    data_deps: list[str] = field(default_factory=list)            # deps produced by other stages / data


def _param_keys(stage) -> list[str]:
    from dvc.dependency.param import ParamsDependency

    keys: list[str] = []
    for dep in stage.deps:
        if isinstance(dep, ParamsDependency) and Path(dep.def_path).name == "params.yaml":
            keys += [k for k in (dep.params or []) if k not in keys]
    return keys


def stage_info(root: Path, address: str) -> StageInfo | None:
    """The stage ``address`` (``train``, ``evaluate@base``) of ``root/dvc.yaml``; None without one."""
    if not (Path(root) / "dvc.yaml").exists():
        return None
    import networkx as nx
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    repo = Repo(str(root))
    try:
        stages = {s.addressing: s for s in repo.index.stages}
        if address not in stages:
            return None
        stage = stages[address]
        graph = repo.index.graph  # stage -> the stages it depends on
        up = [s.addressing for s in nx.descendants(graph, stage)]
        up_keys: list[str] = []
        for a in up:
            up_keys += [k for k in _param_keys(stages[a]) if k not in up_keys]
        data = [str(Path(d.def_path)) for d in stage.deps
                if not isinstance(d, ParamsDependency) and str(d.def_path).startswith("data/")]
        return StageInfo(address, _param_keys(stage), sorted(up), up_keys, data)
    finally:
        repo.close()


def select(params: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """The nested subset of ``params`` named by dotted ``keys``."""
    out: dict[str, Any] = {}
    for key in keys:
        node: Any = params
        parts = key.split(".")
        for p in parts:
            if not isinstance(node, dict) or p not in node:
                break
            node = node[p]
        else:
            cur = out
            for p in parts[:-1]:
                cur = cur.setdefault(p, {})
            cur[parts[-1]] = node
    return out


class ParamsGuard:
    """Snapshot a stage's declared params at its start; :meth:`check` fails if params.yaml changed them."""

    def __init__(self, params_file: Path, keys: list[str]):
        self.file, self.keys = Path(params_file), list(keys)
        self.start = select(load_params(self.file), self.keys) if self.keys else {}

    def check(self) -> None:
        if not self.keys:
            return
        now = select(load_params(self.file), self.keys)
        if now != self.start:
            changed = _diff(self.start, now)
            raise ParamsChangedError(
                f"{self.file}: {', '.join(changed)} changed while the stage ran; its outputs were made "
                f"with the old values, so DVC records nothing; run the stage again")


def _diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            out += _diff(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else str(k))
        return out
    return [] if a == b else [f"{prefix} ({a!r} -> {b!r})"]


def git_commit(root: Path) -> str:
    try:
        p = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        return p.stdout.strip() if p.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def lock_hash(root: Path) -> str:
    """sha256 (first 16 hex) of ``dvc.lock`` as the stage starts ("" when there is none yet)."""
    f = Path(root) / "dvc.lock"
    return hashlib.sha256(f.read_bytes()).hexdigest()[:16] if f.exists() else ""


def locked_hashes(root: Path, address: str) -> dict[str, str]:
    """``path -> md5`` of the stage's deps as ``dvc.lock`` recorded them (the last run of the stage)."""
    f = Path(root) / "dvc.lock"
    if not f.exists():
        return {}
    entry = (yaml.safe_load(f.read_text()) or {}).get("stages", {}).get(address) or {}
    return {d["path"]: d.get("md5", "") for d in entry.get("deps", []) if "path" in d}


def out_hashes(root: Path) -> dict[str, str]:
    """``out path -> md5`` of every stage output recorded in ``dvc.lock`` (the digests of inputs)."""
    f = Path(root) / "dvc.lock"
    if not f.exists():
        return {}
    out = {}
    for entry in ((yaml.safe_load(f.read_text()) or {}).get("stages") or {}).values():
        for o in entry.get("outs", []) or []:
            out[o["path"]] = o.get("md5", "")
    return out
