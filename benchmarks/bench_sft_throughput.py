"""SFT training throughput: apollo's DeepSpeed trainer vs TRL's ``SFTTrainer`` (assistant-only loss).

Same machine, same tiny model (the same saved initial weights), same conversations, same
hyper-parameters (AdamW β=(0.9, 0.95), wd 0.01, clip 1.0 — params.yaml's train values, cosine lr → min lr, micro-batch 1,
gradient accumulation, whole epochs so both see every conversation equally often), one run:

- **apollo**: ``python -m apollo.train`` (DeepSpeed ZeRO-2, 1 rank, started without a
  launcher as the train stage does), rows pre-tokenized by :func:`apollo.data.tokenize.tokenize_conversation`;
- **TRL**: ``SFTTrainer`` on ``{"messages": …}`` rows with ``assistant_only_loss=True`` (it renders
  and masks through the chat template's ``{% generation %}`` markers), in this process.

Throughput = tokens of the training loop / loop seconds (DeepSpeed's ``train.seconds``; TRL's
``train_runtime``), both as all non-padding tokens and as trained (loss) tokens; start-up (imports,
engine set-up, dataset preparation, saving) is shown separately. Final losses are shown side by
side as each trainer logs them, plus one common measure: the token-mean loss of each final model
on the whole training set. Default run ≈ 2 min on 2 CPU cores.

    python benchmarks/bench_sft_throughput.py [--convs 48] [--epochs 2] [--grad-accum 4] [--preset tiny]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--convs", type=int, default=48)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--grad-accum", type=int, default=4)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--max-length", type=int, default=4096)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    try:
        import trl  # noqa: F401
    except ImportError:
        print("bench_sft_throughput: TRL is not installed (pip install 'trl>=1.16'); nothing to compare with",
              file=sys.stderr)
        return 1

    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    from apollo.data.tokenize import render, tokenize_conversation
    from apollo.models.bootstrap import save_model, synthetic_conversations
    from apollo.models.tiny import count_parameters, make_config, make_model, train_tokenizer

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-sft-"))
    work.mkdir(parents=True, exist_ok=True)
    convs = synthetic_conversations(args.convs, seed=0)
    probe = train_tokenizer(["a b"], vocab_size=300)
    tok = train_tokenizer([render(probe, c) for c in convs], vocab_size=4096)
    model = make_model(make_config(tok, args.preset), seed=0)
    save_model(work / "base", model, tok)
    # tokenize with the tokenizer as every later reader loads it (the build stage does the same; AutoTokenizer
    # may load a model-specific class whose pre-tokenizer differs from the in-memory one)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(work / "base")
    rows = [tokenize_conversation(tok, c, max_length=args.max_length) for c in convs]
    pq.write_table(pa.Table.from_pylist([{"input_ids": r["input_ids"], "labels": r["labels"]} for r in rows]),
                   work / "train.parquet")
    n_tok = sum(len(r["input_ids"]) for r in rows)
    n_trained = sum(sum(1 for x in r["labels"][1:] if x != -100) for r in rows)
    threads = torch.get_num_threads()
    print(f"data: {len(rows)} conversations, {n_tok} tokens ({n_trained} trained) per epoch; model {args.preset} "
          f"({count_parameters(model) / 1e6:.2f} M parameters); {args.epochs} epochs, micro-batch 1 × accum "
          f"{args.grad_accum}; {threads} threads; workdir {work}", flush=True)

    # ------------------------------------------------------------------ apollo (DeepSpeed, 1 rank)
    cfg = {"lr": args.lr, "min_lr": args.min_lr, "warmup_steps": args.warmup, "epochs": args.epochs,
           "micro_batch_size": 1, "grad_accum": args.grad_accum, "max_length": args.max_length, "log_every": 4,
           "progress": False, "zero_stage": 2, "save_every": 0, "seed": 0}
    (work / "apollo.json").write_text(json.dumps(cfg))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "apollo.train", "--dataset", str(work / "train.parquet"),
                        "--base", str(work / "base"), "--out", str(work / "apollo"), "--config",
                        str(work / "apollo.json"), "--no-mlflow"], env=env, capture_output=True, text=True)
    apollo_wall = time.perf_counter() - t0
    if p.returncode != 0:
        print(p.stdout[-3000:], p.stderr[-5000:], file=sys.stderr)
        return 1
    ours = json.loads((work / "apollo" / "train_stats.json").read_text())
    print(f"apollo: {ours['train.steps']} steps, loop {ours['train.seconds']:.1f} s, wall {apollo_wall:.1f} s", flush=True)

    # ----------------------------------------------------------------------------- TRL SFTTrainer
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    trl_model = AutoModelForCausalLM.from_pretrained(work / "base", dtype=torch.float32)
    trl_tok = AutoTokenizer.from_pretrained(work / "base")
    targs = trl.SFTConfig(
        output_dir=str(work / "trl"), assistant_only_loss=True, max_length=args.max_length, packing=False,
        per_device_train_batch_size=1, gradient_accumulation_steps=args.grad_accum, num_train_epochs=args.epochs,
        learning_rate=args.lr, lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs={"min_lr": args.min_lr},
        warmup_steps=args.warmup, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.95, max_grad_norm=1.0,
        logging_steps=4, save_strategy="no", report_to=[], use_cpu=True, bf16=False, seed=0,
        dataloader_pin_memory=False, disable_tqdm=True,
    )
    t0 = time.perf_counter()
    trainer = trl.SFTTrainer(model=trl_model, args=targs, processing_class=trl_tok,
                             train_dataset=Dataset.from_list([{"messages": c} for c in convs]))
    trl_prep = time.perf_counter() - t0
    same = _same_tokens(trainer.train_dataset, rows)
    out = trainer.train()
    trl_wall = time.perf_counter() - t0
    trl_loop = float(out.metrics["train_runtime"])
    trl_logs = [h for h in trainer.state.log_history if "loss" in h]
    print(f"trl {trl.__version__}: {out.global_step} steps, loop {trl_loop:.1f} s, wall {trl_wall:.1f} s "
          f"(dataset preparation {trl_prep:.1f} s)", flush=True)

    # --------------------------------------------------------------------------- common measure
    ours_eval = _dataset_loss(AutoModelForCausalLM.from_pretrained(work / "apollo"), rows)
    trl_eval = _dataset_loss(trainer.model, rows)
    base_eval = _dataset_loss(AutoModelForCausalLM.from_pretrained(work / "base"), rows)

    tokens = n_tok * args.epochs
    trained = n_trained * args.epochs
    ours_tps, trl_tps = tokens / ours["train.seconds"], tokens / trl_loop
    print()
    print(f"| {'':34} | {'apollo (DeepSpeed)':>18} | {'TRL SFTTrainer':>18} |")
    print(f"|{'-' * 36}|{'-' * 20}|{'-' * 20}|")
    rowf = "| {:34} | {:>18} | {:>18} |"
    print(rowf.format("optimizer steps", ours["train.steps"], out.global_step))
    print(rowf.format("tokens / s (training loop)", f"{ours_tps:,.0f}", f"{trl_tps:,.0f}"))
    print(rowf.format("trained tokens / s (training loop)", f"{trained / ours['train.seconds']:,.0f}",
                      f"{trained / trl_loop:,.0f}"))
    print(rowf.format("loop seconds", f"{ours['train.seconds']:.1f}", f"{trl_loop:.1f}"))
    print(rowf.format("wall seconds (incl. start-up)", f"{apollo_wall:.1f}", f"{trl_wall:.1f}"))
    print(rowf.format("final logged loss (last 4 steps)", f"{ours['train.final_loss']:.4f}", f"{trl_logs[-1]['loss']:.4f}"))
    print(rowf.format("loss of the final model, all data", f"{ours_eval:.4f}", f"{trl_eval:.4f}"))
    print(f"(initial model: {base_eval:.4f}; TRL's tokens and assistant masks equal apollo's: {same})")
    print(f"\nthroughput ratio apollo / TRL: {ours_tps / trl_tps:.2f}x (goal >= 1.0x)")
    return 0


def _same_tokens(ds, rows) -> bool:
    """Whether TRL's tokenization and assistant mask equal ours (row by row)."""
    try:
        for r, t in zip(rows, ds):
            if "labels" in t:  # TRL ≥ 1.x stores labels (-100 outside assistant turns)
                mask = [int(x != -100) for x in t["labels"]]
            else:
                mask = t.get("assistant_masks") or t.get("completion_mask")
            ours = [int(x != -100) for x in r["labels"]]
            if list(t["input_ids"]) != list(r["input_ids"]) or mask is None or list(mask) != ours:
                return False
        return len(ds) == len(rows)
    except Exception:  # noqa: BLE001 - a report, not a check
        return False


def _dataset_loss(model, rows) -> float:
    import torch

    from apollo.train.batching import collate
    from apollo.train.objectives import token_losses

    model = model.float().eval()
    total = n = 0.0
    with torch.no_grad():
        for r in rows:
            s, k = token_losses(model, collate([[(r["input_ids"], r["labels"])]]))
            total, n = total + float(s), n + k
    return total / max(1.0, n)


if __name__ == "__main__":
    sys.exit(main())
