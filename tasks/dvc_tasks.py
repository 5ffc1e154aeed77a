"""DVC as the judge of staleness and the recorder of outputs.

All DVC calls of one workspace go through one lock: DVC's own repo lock is not safe under
parallel ``repro``/``commit`` from threads of one process.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

_DVC_LOCK = threading.Lock()


def _repo(root: Path):
    from dvc.repo import Repo

    return Repo(str(root))


def stage_order(root: Path) -> list[str]:
    """Stage names (foreach/matrix expanded) in a topological order stable w.r.t. dvc.yaml."""
    import networkx as nx

    with _DVC_LOCK:
        repo = _repo(root)
        try:
            graph = repo.index.graph  # edges: stage -> the stages it depends on
            index = {s.addressing: i for i, s in enumerate(repo.index.stages)}
            order = nx.lexicographical_topological_sort(graph.reverse(), key=lambda s: index[s.addressing])
            return [s.addressing for s in order]
        finally:
            repo.close()


@task(name="dvc-status", cache_policy=NO_CACHE)
def dvc_status(root: Path, stage: str) -> dict[str, Any]:
    """What changed for ``stage`` (empty when up to date)."""
    with _DVC_LOCK:
        repo = _repo(root)
        try:
            return repo.status(targets=[stage])
        finally:
            repo.close()


@task(name="dvc-commit", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def dvc_commit(root: Path, stage: str) -> None:
    """Record the stage's deps/outs hashes in dvc.lock and its outs in the DVC cache."""
    with _DVC_LOCK:
        repo = _repo(root)
        try:
            repo.commit(target=stage, force=True)
        finally:
            repo.close()
