"""How the trainer's ranks are started: one process, the DeepSpeed launcher (local or a hostfile),
or torchrun; and the per-process set-up every rank does first.

``launcher: auto`` runs one rank as a plain ``python -m apollo.train`` and more ranks (or a
hostfile) through the DeepSpeed launcher (``python -m deepspeed.launcher.runner``, i.e. the
``deepspeed`` command of this interpreter) on a free master port. ``torchrun`` is the lighter
single-node alternative (and what ``infra/k8s/sft-pytorchjob.yaml`` runs across nodes). Measured
start-up of a 1-step run on 2 CPU cores: python −m 7.6 s, torchrun 9.1 s, deepspeed launcher
14.8 s (two extra interpreters importing DeepSpeed, and a 1-s polling loop) — so one rank never goes
through a launcher.

CPU. DeepSpeed's CPU accelerator JIT-builds a shared-memory comm op (≈1 min, once per machine)
that only its tensor-parallel *inference* all-reduce uses; training does not need it, so it is
skipped on CPU unless ``APOLLO_DS_SHM_COMM=1``. Each CPU rank uses ``cores / local ranks`` threads.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import torch

from apollo.train.config import RunOptions, TrainConfig

MODULE = "apollo.train"  # the CLI every rank runs (apollo/train/__main__.py)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hostfile_slots(path: str | Path) -> int:
    """Sum of ``slots=N`` over a DeepSpeed hostfile (``host slots=N`` per line, ``#`` comments)."""
    total = 0
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            slots = [f for f in line.split()[1:] if f.startswith("slots=")]
            total += int(slots[0].split("=", 1)[1]) if slots else 1
    return total


def launch_command(opts: RunOptions, trainer_args: list[str], *, python: str = sys.executable,
                   master_port: int | None = None) -> list[str]:
    """The command that runs the trainer on ``opts.world_size`` ranks (see the module docstring)."""
    launcher = opts.launcher
    if launcher == "auto":
        launcher = "python" if opts.world_size == 1 and not opts.hostfile else "deepspeed"
    if launcher == "python":
        if opts.world_size != 1 or opts.hostfile:
            raise ValueError("train.launcher=python runs a single rank: use launcher deepspeed (or auto)")
        return [python, "-m", MODULE, *trainer_args]
    if launcher == "torchrun":  # one node; multi-node torchrun is what infra/k8s/sft-pytorchjob.yaml runs
        if opts.hostfile:
            raise ValueError("train.launcher=torchrun does not read a hostfile: use launcher deepspeed")
        return [python, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(opts.world_size),
                "--master_addr", "127.0.0.1", "--master_port", str(master_port or free_port()),
                "-m", MODULE, *trainer_args]
    if launcher != "deepspeed":
        raise ValueError(f"train.launcher must be auto, python, deepspeed or torchrun, not {opts.launcher!r}")
    cmd = [python, "-m", "deepspeed.launcher.runner", "--master_port", str(master_port or free_port())]
    if opts.hostfile:
        slots = hostfile_slots(opts.hostfile)
        if slots != opts.world_size:
            raise ValueError(f"train.world_size={opts.world_size} but {opts.hostfile} has {slots} slots")
        cmd += ["--hostfile", str(opts.hostfile)]
    else:
        cmd += ["--num_gpus", str(opts.world_size)]  # on CPU: the number of CPU ranks
    return cmd + ["--module", MODULE, *trainer_args]


def single_process_env() -> None:
    """Without a launcher: a 1-rank process group on a free local port."""
    if "RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ:
        return
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=os.environ.get("MASTER_PORT") or str(free_port()))


def skip_cpu_shm_comm() -> None:
    """Skip the CPU shared-memory comm op build (used only by DeepSpeed's TP inference all-reduce)."""
    if os.environ.get("APOLLO_DS_SHM_COMM") == "1":
        return
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().device_name() == "cpu":
        import importlib

        # (not ``import deepspeed.comm.torch as m``: the package's ``torch`` attribute is torch itself)
        importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None


def cpu_threads(cfg: TrainConfig) -> None:
    if cfg.num_threads or os.environ.get("OMP_NUM_THREADS"):
        return
    local = int(os.environ.get("LOCAL_SIZE") or os.environ.get("LOCAL_WORLD_SIZE") or 1)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(max(1, cores // max(1, local)))
