"""Training step time of LoRA against full fine-tuning, through the one trainer's loop (``train.lora``).

    python benchmarks/bench_lora.py [--model data/models/base] [--tokens 1836] [--steps 6] [--rank 16]

Same model (an HF directory; default: the bootstrap stage's ``data/models/base``, else SmolLM2-135M-Instruct
converted from the wheel's GGUF into a temporary directory), same rows (``--tokens`` tokens each, every
third one trained: about what a warm-up row of the default policy holds), same loop settings as
``params.yaml``'s ``bootstrap.warmup.sft`` (AdamW, bf16 autocast where native, micro-batch 1), in one
process, one after the other and then again in the other order:

* ``full``    — the baseline: every weight trained (``lora: null``, what the warm-up and the train stage do);
* ``lora``    — rank ``--rank`` adapters on every projection (q, k, v, o, gate, up, down), merged at the end;
* ``lora_qv`` — the same on q and v only.

Prints seconds per optimizer step (median over the steps after the first) and the ratio to ``full``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def run(model_dir: Path, lora, rows, steps: int) -> tuple[float, int]:
    import torch
    from transformers import AutoModelForCausalLM

    from apollo.models.tiny import count_parameters
    from apollo.train.config import loop_config, read_yaml, repo_params_path
    from apollo.train.loop import train
    from apollo.train.lora import add_adapters, merge_adapters

    warm = dict(read_yaml(repo_params_path())["bootstrap"]["warmup"]["sft"])
    warm.update(max_steps=steps, log_every=1, progress=False, warmup_steps=0, lora=lora)
    cfg = loop_config(warm, 0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if lora is not None:  # how many weights train (the loop adds the same adapters itself)
        h = add_adapters(model, cfg.lora)
        n = count_parameters(model, trainable_only=True)
        merge_adapters(h)
    else:
        n = count_parameters(model, trainable_only=True)
    hist = train(model, rows, cfg)["history"]
    per_step = [h["elapsed_s"] for h in hist]
    gaps = [b - a for a, b in itertools.pairwise(per_step)]
    return statistics.median(gaps), n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "data" / "models" / "base"))
    ap.add_argument("--tokens", type=int, default=1836)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rank", type=int, default=16)
    args = ap.parse_args()
    import torch

    model_dir = Path(args.model)
    tmp = None
    if not (model_dir / "config.json").is_file():
        from apollo.models.gguf import convert_gguf, wheel_gguf

        tmp = tempfile.TemporaryDirectory(prefix="bench-lora-")
        model_dir = Path(tmp.name) / "smollm2"
        convert_gguf(wheel_gguf(), model_dir)
    g = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(args.steps):
        ids = torch.randint(10, 49000, (args.tokens,), generator=g).tolist()
        rows.append({"input_ids": ids, "labels": [t if i % 3 == 0 else -100 for i, t in enumerate(ids)]})
    variants = {"full": None,
                "lora": {"r": args.rank, "alpha": 2 * args.rank, "dropout": 0.0, "target_modules": ALL},
                "lora_qv": {"r": args.rank, "alpha": 2 * args.rank, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}}
    times: dict[str, list[float]] = {k: [] for k in variants}
    trainable: dict[str, int] = {}
    order = list(variants)
    for rnd in range(2):
        for name in (order if rnd == 0 else order[::-1]):
            s, n = run(model_dir, variants[name], rows, args.steps)
            times[name].append(s)
            trainable[name] = n
            print(f"  round {rnd + 1} {name:8s} {s:6.2f} s/step", flush=True)
    base = min(times["full"])
    print(f"\n{args.tokens}-token rows, {torch.get_num_threads()} threads, model {args.model}")
    print(f"{'variant':8s} {'trainable':>12s} {'s/step (best of 2)':>19s} {'× full':>7s}")
    for name in variants:
        best = min(times[name])
        print(f"{name:8s} {trainable[name]:12,d} {best:19.2f} {base / best:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
