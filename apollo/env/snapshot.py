"""Snapshots of an episode's workspace at step boundaries, restored into a fresh workspace.

Tree rollouts (:mod:`apollo.rl.tree`) branch an agent episode at a token inside step ``k``; the
branch needs the files as they were *before* step ``k`` ran its tool. :class:`WorkspaceSnapshots`
copies the workspace folder at every step boundary (``take(ws, k)``: the state before step ``k``)
and :meth:`~WorkspaceSnapshots.restore` puts one into another, freshly made
:class:`~apollo.env.workspace.Workspace` (its sandbox already running on that folder).

Copies are copy-on-write where the filesystem allows it (``cp -a --reflink=auto``: btrfs, XFS,
overlayfs on those; elsewhere a plain copy, mode bits, times and symlinks kept); a snapshot is
read-only by convention and a branch writes only into its own workspace, so the parent's
snapshots never change.

What is **not** restored (the branch starts from the files only):

- processes: background commands of ``run_command(wait_for_completion=False)`` and anything they
  started end with the parent's sandbox; the branch has no sessions but ``default``, so
  ``get_session_output`` on a parent session says it does not exist;
- the sandbox's own state outside the workspace folder: its ``/tmp``, per-command output logs,
  environment of running shells;
- a file being written by a background command at the boundary is copied as it was at that
  instant (possibly partial).

The eval budget is not a file: the loop restores ``evals_used`` from the parent's record.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["WorkspaceSnapshots", "copy_tree"]


def copy_tree(src: Path, dst: Path) -> None:
    """Copy the contents of ``src`` into the (existing, empty) folder ``dst``, copy-on-write where
    the filesystem supports reflinks; metadata and symlinks are kept."""
    if shutil.which("cp"):
        r = subprocess.run(["cp", "-a", "--reflink=auto", f"{src}/.", f"{dst}/"], capture_output=True, text=True,
                           check=False)
        if r.returncode == 0:
            return
        raise OSError(f"cp -a --reflink=auto {src} {dst} failed: {r.stderr.strip()[:300]}")
    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)  # pragma: no cover (no coreutils)


def _empty(folder: Path) -> None:
    for child in folder.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


class WorkspaceSnapshots:
    """The step-boundary snapshots of one episode under ``root`` (``root/before-0003`` = the
    workspace before step 3). ``root=None``: a temporary folder, deleted by :meth:`close`."""

    def __init__(self, root: Path | str | None = None):
        self._own = root is None
        self.root = Path(tempfile.mkdtemp(prefix="apollo-snap-")) if root is None else Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, step: int) -> Path:
        return self.root / f"before-{step:04d}"

    def steps(self) -> list[int]:
        return sorted(int(p.name.split("-")[1]) for p in self.root.glob("before-*") if p.is_dir())

    def take(self, ws: Any, step: int) -> Path | None:
        """Snapshot ``ws.path`` as the state before ``step`` (written beside, then renamed: a
        reader never sees half a snapshot). Usable as ``arun_episode(on_boundary=snaps.take)``.

        A copy that fails (e.g. a background command deleted a file mid-copy) is logged and left
        out (None): the episode goes on; a branch from that step then fails to restore, by name."""
        dst = self.path(step)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", dir=self.root))
        try:
            copy_tree(Path(ws.path), tmp)
            if dst.exists():
                shutil.rmtree(dst)
            tmp.rename(dst)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            log.warning("no workspace snapshot before step %d: %s", step, e)
            return None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return dst

    def restore(self, ws: Any, step: int) -> None:
        """Replace the files of ``ws`` (a fresh workspace) with the snapshot before ``step``.

        The folder itself stays (the sandbox has it mounted); its contents are swapped."""
        src = self.path(step)
        if not src.is_dir():
            raise FileNotFoundError(f"no workspace snapshot before step {step} in {self.root} "
                                    f"(have {self.steps()})")
        dst = Path(ws.path)
        _empty(dst)
        copy_tree(src, dst)

    def close(self) -> None:
        """Delete the snapshots (a temporary root is removed entirely)."""
        if self._own:
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            for p in self.root.glob("before-*"):
                shutil.rmtree(p, ignore_errors=True)

    def __enter__(self) -> WorkspaceSnapshots:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
