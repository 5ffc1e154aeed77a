"""Train stage: masked SFT of the base model on the built dataset → ``data/models/sft/``."""

from __future__ import annotations

import json
from typing import Any

from apollo.config import Paths, section
from apollo.data.build import read_parquet
from apollo.schema import atomic_write_text


def sft_config(p: dict[str, Any], seed: int):
    from apollo.train.sft import SFTConfig

    fields = SFTConfig.__dataclass_fields__
    unknown = sorted(set(p) - set(fields) - {"variant"})
    if unknown:
        raise ValueError(f"params.yaml: train: unknown field(s) {unknown}; known: {sorted(fields)}")
    kw = {k: v for k, v in p.items() if k in fields}
    if "betas" in kw:
        kw["betas"] = tuple(kw["betas"])
    kw.setdefault("seed", seed)
    return SFTConfig(**kw)


def run(params: dict[str, Any], tracker=None, paths: Paths | None = None, variant: str = "sft") -> dict[str, Any]:
    import math

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from apollo.models.bootstrap import _save_atomic
    from apollo.train.sft import train_sft

    paths = paths or Paths.default()
    cfg = sft_config(section(params, "train"), int(params.get("seed", 0)))
    rows = read_parquet(paths.dataset / "train.parquet")
    tokenizer = AutoTokenizer.from_pretrained(paths.base_model)
    model = AutoModelForCausalLM.from_pretrained(paths.base_model, dtype=torch.float32)

    def on_log(rec: dict[str, Any]) -> None:
        if tracker is not None:
            tracker.log_metrics({f"train.{k}": v for k, v in rec.items() if k != "step"}, step=int(rec["step"]))

    stats = train_sft(model, rows, cfg, on_log=on_log)
    for key in ("final_loss", "first_loss"):
        if not math.isfinite(float(stats[key])):
            raise FloatingPointError(f"train: {key} is {stats[key]} (not finite); the model is not saved")
    out = paths.model(variant)
    _save_atomic(out, model, tokenizer)
    AutoModelForCausalLM.from_pretrained(out)  # the checkpoint must load
    summary = {f"train.{k}": v for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    atomic_write_text(out / "train_stats.json", json.dumps(summary, indent=2) + "\n")
    if tracker is not None:
        tracker.log_metrics(summary)
    return summary
