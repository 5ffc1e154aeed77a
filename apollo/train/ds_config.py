"""The DeepSpeed config of a run: generated from the train fields, tuning knobs merged over it.

Batch (micro-batch, accumulation, global batch), clipping, bf16 and the ZeRO stage come from the
fields; ``ds_config`` names a JSON/YAML file (e.g. ``infra/deepspeed/zero3.json``) deep-merged over
it for the ZeRO tuning knobs (buckets, offload, …). The optimizer is ``torch.optim.AdamW`` with the
cosine schedule (:mod:`apollo.train.engine`), both handed to DeepSpeed; a ``ds_config`` with its own
``optimizer``/``scheduler`` section replaces them (e.g. DeepSpeedCPUAdam for ZeRO-Offload) and gets
its hyper-parameters from the fields. ``python -m apollo.train --print-ds-config`` prints the result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from apollo.train.config import RunOptions, TrainConfig, read_yaml


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def read_overlay(path: str | Path) -> dict[str, Any]:
    doc = read_yaml(path) or {}  # YAML is a superset of JSON
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a DeepSpeed config must be a mapping")
    return {k: v for k, v in doc.items() if not k.startswith("_")}  # "_comment" keys are notes


def build_ds_config(cfg: TrainConfig, opts: RunOptions, world_size: int,
                    overlay: dict[str, Any] | None = None) -> dict[str, Any]:
    """Batch, clipping, precision and ZeRO stage from the fields, ``overlay`` merged over it.
    Batch keys and the ZeRO stage in the overlay must agree with the fields."""
    conf: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
        "gradient_accumulation_steps": cfg.grad_accum,
        "train_batch_size": cfg.micro_batch_size * cfg.grad_accum * world_size,
        "gradient_clipping": float(cfg.max_grad_norm or 0.0),
        "bf16": {"enabled": bool(cfg.bf16)},
        "zero_optimization": {"stage": int(opts.zero_stage)},
        "zero_allow_untested_optimizer": True,  # torch AdamW is fine with every ZeRO stage
        "steps_per_print": 1_000_000_000,  # the loop logs
        "wall_clock_breakdown": False,
    }
    if int(opts.zero_stage) == 3:
        conf["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = True
    merged = deep_merge(conf, overlay or {})
    if isinstance(merged.get("optimizer"), dict):  # a DeepSpeed optimizer: its hyper-parameters from the fields
        o = merged["optimizer"].setdefault("params", {})
        o.setdefault("lr", cfg.lr)
        o.setdefault("betas", list(cfg.betas))
        o.setdefault("weight_decay", cfg.weight_decay)
    for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size"):
        if merged[key] != conf[key]:
            raise ValueError(f"ds_config sets {key}={merged[key]} but the train fields give {conf[key]}; "
                             "set batch sizes in params (train.micro_batch_size, grad_accum/global_batch_size)")
    if merged["zero_optimization"].get("stage") != int(opts.zero_stage):
        raise ValueError(f"ds_config sets ZeRO stage {merged['zero_optimization'].get('stage')} but "
                         f"train.zero_stage is {opts.zero_stage}")
    return merged
