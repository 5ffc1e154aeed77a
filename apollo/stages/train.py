"""Train stage: the one trainer (:mod:`apollo.train`) on the built dataset → ``data/models/<variant>/``
(objective ``train.objective``: masked SFT for the Apollo variants).

``train.backend: deepspeed`` runs :mod:`apollo.train.cli` in a child process: one rank
as ``python -m apollo.train`` (``launcher: auto`` with ``world_size: 1``), more ranks (or a
``hostfile``) through the DeepSpeed launcher. The child process keeps the stage's process (a Prefect
worker thread, or ``dvc repro``) free of a global process group, and a killed run leaves its
checkpoints in ``data/checkpoints/<variant>/``: running the stage again resumes from the last one
(same data, base model and training fields), a changed run starts afresh. Rank 0 logs step metrics
into this stage's MLflow run (``APOLLO_TRAIN_RUN_ID``).

``train.backend: torch`` runs the same loop (:func:`apollo.train.loop.train`) in this process with the
torch engine (no checkpoints). The fields: :mod:`apollo.train.config` (values in ``params.yaml`` only).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path
from typing import Any

from apollo.config import Paths, section
from apollo.schema import atomic_write_text

log = logging.getLogger(__name__)


def run(params: dict[str, Any], tracker=None, paths: Paths | None = None, variant: str = "sft") -> dict[str, Any]:
    from apollo.train.config import resolve_config

    paths = paths or Paths.default()
    p = dict(section(params, "train"))
    seed = int(params.get("seed", 0))
    cfg, opts = resolve_config(p, seed)
    out = paths.model(variant)
    if opts.backend == "torch":
        summary = _run_in_process(cfg, opts, paths, out, tracker)
    else:
        summary = _run_deepspeed(p, seed, opts, paths, out, tracker, variant)
    for key in ("train.final_loss", "train.first_loss"):
        if key in summary and not _finite(summary[key]):
            raise FloatingPointError(f"train: {key} is {summary[key]} (not finite)")
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(out)  # the checkpoint must load
    return summary


def _finite(x: Any) -> bool:
    import math

    return math.isfinite(float(x))


def _run_deepspeed(p: dict[str, Any], seed: int, opts, paths: Paths, out: Path, tracker, variant: str) -> dict[str, Any]:
    from apollo.train.launch import launch_command

    root = paths.root
    ckpt = Path(opts.checkpoint_dir) if opts.checkpoint_dir else paths.checkpoints(variant)
    ckpt = ckpt if ckpt.is_absolute() else root / ckpt
    if opts.ds_config and not Path(opts.ds_config).is_absolute():
        p["ds_config"] = str(root / opts.ds_config)
    if opts.hostfile and not Path(opts.hostfile).is_absolute():
        opts.hostfile = str(root / opts.hostfile)
    config_file = ckpt.with_name(f"{ckpt.name}.config.json")  # beside the checkpoints (visible to every node)
    atomic_write_text(config_file, json.dumps({"seed": seed, "train": p}, indent=1) + "\n")
    args = ["--dataset", str(paths.dataset / "train.parquet"), "--base", str(paths.base_model), "--out", str(out),
            "--config", str(config_file), "--checkpoint-dir", str(ckpt)]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    run_id = getattr(tracker, "run_id", None)
    if run_id:
        from apollo.tracking import tracking_uri

        env.update(APOLLO_TRAIN_RUN_ID=run_id, MLFLOW_TRACKING_URI=tracking_uri())
    else:
        args.append("--no-mlflow")
    cmd = launch_command(opts, args)
    log.info("train: %s", " ".join(cmd))
    proc = subprocess.run(cmd, cwd=root, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"train: the DeepSpeed run failed (exit {proc.returncode}); its checkpoints stay in "
                           f"{ckpt}, running the stage again resumes from the last one")
    config_file.unlink(missing_ok=True)
    summary = json.loads((out / "train_stats.json").read_text())
    if tracker is not None and not run_id:  # a tracker without a run id (tests): log the summary here
        tracker.log_metrics(summary)
    return summary


def _run_in_process(cfg, opts, paths: Paths, out: Path, tracker) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from apollo.models.bootstrap import _save_atomic
    from apollo.train.cli import read_rows
    from apollo.train.loop import train
    from apollo.train.objectives import make_objective

    objective = make_objective(opts.objective, opts.policy_loss, opts.policy_loss_args)
    rows = read_rows(paths.dataset / "train.parquet", objective.token_fields)
    tokenizer = AutoTokenizer.from_pretrained(paths.base_model)
    model = AutoModelForCausalLM.from_pretrained(paths.base_model, dtype=torch.float32)

    def on_log(rec: dict[str, Any]) -> None:
        if tracker is not None:
            tracker.log_metrics({f"train.{k}": v for k, v in rec.items() if k != "step"}, step=int(rec["step"]))

    stats = train(model, rows, cfg, on_log=on_log, objective=objective)
    for key in ("final_loss", "first_loss"):
        if not _finite(stats[key]):
            raise FloatingPointError(f"train: {key} is {stats[key]} (not finite); the model is not saved")
    _save_atomic(out, model, tokenizer)
    summary = {f"train.{k}": v for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    atomic_write_text(out / "train_stats.json", json.dumps(summary, indent=2) + "\n")
    if tracker is not None:
        tracker.log_metrics(summary)
    return summary
