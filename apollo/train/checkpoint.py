"""Checkpoints of a DeepSpeed run: save every ``save_every`` steps, resume exactly.

A checkpoint holds DeepSpeed's model/optimizer/scheduler state (ZeRO shards per rank), the loop
state (stream position, counters, loss history; see :mod:`apollo.train.loop`) and every rank's RNG
state. ``latest`` is written only after every rank finished (atomically), so a run killed at any
moment resumes from a complete checkpoint. A run started with the same :func:`fingerprint` (dataset
bytes, base model files, training fields, world size) resumes from ``latest``; a different
fingerprint starts afresh (the stale checkpoints are deleted).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from apollo.train.config import LOOP_ONLY, RunOptions, TrainConfig

log = logging.getLogger(__name__)


def _file_digest(path: Path, h) -> None:
    size = path.stat().st_size
    h.update(f"{path.name}:{size}".encode())
    with open(path, "rb") as fh:
        if size <= 64 << 20:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        else:  # big weight files: size + head + tail (the safetensors header and the last tensors)
            h.update(fh.read(1 << 20))
            fh.seek(-(1 << 20), os.SEEK_END)
            h.update(fh.read(1 << 20))


def fingerprint(dataset: Path, base: Path, cfg: TrainConfig, opts: RunOptions, world_size: int) -> str:
    """What must not change for a checkpoint to be resumable."""
    h = hashlib.sha256()
    for p in [dataset] if dataset.is_file() else sorted(dataset.rglob("*")):
        if p.is_file():
            _file_digest(p, h)
    for p in sorted(base.rglob("*")):
        if p.is_file():
            _file_digest(p, h)
    run = {k: v for k, v in asdict(cfg).items() if k not in LOOP_ONLY}
    run.update(zero_stage=int(opts.zero_stage), world_size=world_size, objective=opts.objective)
    if opts.objective != "sft":
        run.update(policy_loss=opts.policy_loss, policy_loss_args=opts.policy_loss_args)
    h.update(json.dumps(run, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def _rng_state() -> dict[str, Any]:
    import numpy as np

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


class Checkpointer:
    """Collective save/resume of a DeepSpeed run in ``directory`` (every rank calls every method)."""

    def __init__(self, ds_engine, directory: Path, every: int, keep: int, fp: str, rank: int):
        self.ds, self.dir, self.every, self.keep, self.fp, self.rank = ds_engine, directory, every, max(1, keep), fp, rank

    def _barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()

    def prepare(self, resume: bool) -> str | None:
        """The tag to resume from, or None (then rank 0 clears stale checkpoints)."""
        fp_file = self.dir / "fingerprint.txt"
        latest = self.dir / "latest"
        tag = None
        if resume and latest.exists() and fp_file.exists() and fp_file.read_text().strip() == self.fp:
            tag = latest.read_text().strip()
            if not (self.dir / tag).is_dir():
                tag = None
        self._barrier()  # every rank has decided before rank 0 may clear the directory
        if tag is None and self.rank == 0:
            if latest.exists():
                log.warning("checkpoints in %s are not this run's (fingerprint) or --no-resume: starting afresh",
                            self.dir)
            if self.dir.exists():
                shutil.rmtree(self.dir)
            self.dir.mkdir(parents=True, exist_ok=True)
            write_atomic(fp_file, self.fp + "\n")
        self._barrier()
        return tag

    def load(self, tag: str) -> dict[str, Any]:
        path, client = self.ds.load_checkpoint(str(self.dir), tag=tag)
        if path is None:
            raise RuntimeError(f"DeepSpeed could not load checkpoint {self.dir / tag}")
        rng = self.dir / tag / f"rng_rank{self.rank:05d}.pt"
        if rng.exists():
            _set_rng_state(torch.load(rng, weights_only=False))
        return client["apollo_loop"]

    def maybe_save(self, step: int, state: dict[str, Any]) -> None:
        if self.every <= 0 or step % self.every or step >= state["planned_steps"]:
            return
        tag = f"step{step:08d}"
        (self.dir / tag).mkdir(parents=True, exist_ok=True)
        torch.save(_rng_state(), self.dir / tag / f"rng_rank{self.rank:05d}.pt")
        self.ds.save_checkpoint(str(self.dir), tag=tag, client_state={"apollo_loop": state}, save_latest=False)
        self._barrier()  # every rank's shards are on disk: now `latest` may point here
        if self.rank == 0:
            write_atomic(self.dir / "latest", tag)
            tags = sorted(p.name for p in self.dir.iterdir() if p.is_dir() and p.name.startswith("step"))
            for old in tags[: -self.keep]:
                shutil.rmtree(self.dir / old, ignore_errors=True)
        self._barrier()
