"""The trainer's command line: one DeepSpeed rank of a run (``python -m apollo.train``).

Run it::

    # one process (CPU or one GPU): no launcher needed, the module sets up a 1-rank process group
    python -m apollo.train --dataset data/dataset/train.parquet --base data/models/base \\
        --out data/models/sft --config params.yaml
    # N ranks on this machine (CPU ranks here, GPUs on a GPU node), or across the nodes of a hostfile
    deepspeed --num_gpus 2 --master_port 29611 --module apollo.train --dataset … --config params.yaml
    deepspeed --hostfile infra/hostfile.example --module apollo.train …
    # torchrun (Kubernetes PyTorchJob) sets the same RANK/WORLD_SIZE/MASTER_* variables
    torchrun --nnodes 2 --nproc_per_node 8 -m apollo.train …

``--config`` is ``params.yaml`` itself (its ``train`` section and top-level ``seed``) or a bare
mapping of some train fields, overlaid on the repository's ``params.yaml`` ``train`` section (the
only home of defaults, see :mod:`apollo.train.config`); ``--set key=value`` overrides single fields.
The objective (``objective: sft | pg``) is that of :mod:`apollo.train.objectives`; with ``pg`` the
dataset rows carry ``advantages`` and ``rollout_logprobs`` per token.

Output: ``--out`` gets an HF model directory (safetensors, config, generation config, tokenizer,
chat template; written atomically by :func:`apollo.models.bootstrap._save_atomic`; ZeRO-3 weights
are gathered first), ``train_stats.json`` and ``train_history.json``. Checkpoints
(:mod:`apollo.train.checkpoint`) go to ``--checkpoint-dir`` (default ``<out>.checkpoints``) and are
deleted after a successful run unless ``keep_checkpoints_after: true``.

MLflow (rank 0 only): step metrics ``train.loss``, ``train.lr``, ``train.tokens_per_s``,
``train.trained_tokens``, ``train.grad_norm``, ``train.epoch``, ``train.elapsed_s``, the objective's
``train.obj.*`` and the final summary go to the run ``--run-id`` / ``$APOLLO_TRAIN_RUN_ID`` (what the
train stage passes: its own child run), else to a new run ``train@deepspeed``, child of
``$APOLLO_PARENT_RUN_ID`` when set; ``--no-mlflow`` turns it off.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from apollo.train.batching import make_rows, plan_steps, prepare_examples
from apollo.train.checkpoint import Checkpointer, fingerprint
from apollo.train.config import load_train_section, resolve_config
from apollo.train.ds_config import build_ds_config, read_overlay
from apollo.train.engine import DeepSpeedEngineAdapter, TorchDistParallel, make_optimizer
from apollo.train.launch import cpu_threads, single_process_env, skip_cpu_shm_comm
from apollo.train.loop import train
from apollo.train.objectives import ObjectiveModule, make_objective

log = logging.getLogger(__name__)


class _WithStateDict:
    """A model whose ``save_pretrained`` writes a given (gathered) state dict: lets ZeRO-3 weights go
    through :func:`apollo.models.bootstrap._save_atomic` unchanged."""

    def __init__(self, model: torch.nn.Module, state_dict: dict[str, torch.Tensor]):
        self._model, self._sd = model, state_dict

    def __getattr__(self, name: str):
        return getattr(self._model, name)

    def save_pretrained(self, directory, **kw):
        return self._model.save_pretrained(directory, state_dict=self._sd, **kw)


def _open_tracker(args: argparse.Namespace, params: dict[str, Any]):
    """The MLflow run rank 0 logs to, and whether this process must close it."""
    if args.no_mlflow:
        return None, False
    from apollo.tracking import Run, _client, experiment_id

    run_id = args.run_id or os.environ.get("APOLLO_TRAIN_RUN_ID")
    client = _client()
    if run_id:
        return Run(client, run_id), False
    tags = {"apollo.stage": "train", "apollo.kind": "stage"}
    if os.environ.get("APOLLO_PARENT_RUN_ID"):
        tags["mlflow.parentRunId"] = os.environ["APOLLO_PARENT_RUN_ID"]
    run = Run(client, client.create_run(experiment_id(client), run_name="train@deepspeed", tags=tags).info.run_id)
    run.log_params(params, prefix="train")
    return run, True


def _train_mapping(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    train, seed = load_train_section(args.config) if args.config else load_train_section_default()
    for item in args.set or []:
        import yaml

        key, _, value = item.partition("=")
        train[key.strip()] = yaml.safe_load(value)
    return train, (args.seed if args.seed is not None else seed)


def load_train_section_default() -> tuple[dict[str, Any], int]:
    from apollo.train.config import repo_params_path

    return load_train_section(repo_params_path())


def read_rows(dataset: Path, token_fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """Rows of a Parquet (or JSONL) dataset: ``input_ids``, ``labels`` and the objective's token fields."""
    from apollo.data.build import read_parquet

    rows = read_parquet(dataset) if dataset.suffix == ".parquet" else \
        [json.loads(ln) for ln in open(dataset, encoding="utf-8") if ln.strip()]
    keys = ("input_ids", "labels", *token_fields)
    return [{k: r.get(k) for k in keys} for r in rows]


def train_rank(args: argparse.Namespace) -> dict[str, Any]:
    """One rank of a DeepSpeed run (see the module docstring). Returns the summary on every rank."""
    single_process_env()
    skip_cpu_shm_comm()
    import deepspeed
    import torch.distributed as dist
    from deepspeed.accelerator import get_accelerator
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from apollo.models.bootstrap import _save_atomic
    from apollo.schema import atomic_write_text

    t_start = time.perf_counter()
    train_map, seed = _train_mapping(args)
    deepspeed.init_distributed(verbose=False)
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg, opts = resolve_config(train_map, seed=seed, world_size=world)
    if int(train_map.get("world_size", world)) != world and rank == 0:
        log.warning("train.world_size=%s but %d ranks were launched: using %d", train_map.get("world_size"), world,
                    world)
    if rank != 0:
        cfg.progress = False
    accel = get_accelerator()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(accel.device_name(local_rank) if accel.device_name() != "cpu" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        cpu_threads(cfg)
    overlay = read_overlay(opts.ds_config) if opts.ds_config else None
    # bf16 on CPU ranks: fp32 weights, gradients and optimizer, the forward/backward under bf16 autocast
    # (the loop's). DeepSpeed's own bf16 mode (bf16 weights, fp32 master copy) brought no speed on CPU:
    # 10 s per 1024-token SmolLM2-135M step as in fp32, against 5.4 s under autocast (2 cores, avx512_bf16)
    cpu_autocast = bool(cfg.bf16) and device.type == "cpu"
    ds_config = build_ds_config(dataclasses.replace(cfg, bf16=False) if cpu_autocast else cfg, opts, world, overlay)
    objective = make_objective(opts.objective, opts.policy_loss, opts.policy_loss_args)

    dataset, base, out = Path(args.dataset), Path(args.base), Path(args.out)
    ckpt_dir = Path(args.checkpoint_dir or opts.checkpoint_dir or f"{out}.checkpoints")
    examples = read_rows(dataset, objective.token_fields)
    data, _, _ = prepare_examples(examples, cfg.max_length, objective.token_fields)
    n_rows = len(make_rows([{"input_ids": d[0]} for d in data], cfg.max_length, cfg.packing))
    _, total_steps = plan_steps(n_rows, cfg, world)

    hf_ds = None
    if int(opts.zero_stage) == 3:  # transformers then loads the weights already partitioned (zero.Init)
        from transformers.integrations import HfDeepSpeedConfig

        hf_ds = HfDeepSpeedConfig(ds_config)  # noqa: F841 (must stay alive while loading)
    tokenizer = AutoTokenizer.from_pretrained(base)
    dtype = torch.bfloat16 if cfg.bf16 and not cpu_autocast else torch.float32
    lm = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)  # deepspeed.initialize moves it to the device
    adapters = None
    if cfg.lora is not None:  # LoRA: the engine holds the adapters' weights only; merged before saving
        from apollo.models.tiny import count_parameters
        from apollo.train.lora import add_adapters

        adapters = add_adapters(lm, cfg.lora, cfg.seed)
        if rank == 0:
            log.info("lora: r=%d on %s, %d trainable parameters", cfg.lora.r, ",".join(cfg.lora.target_modules),
                     count_parameters(lm, trainable_only=True))
    wrapper = ObjectiveModule(lm, objective)
    opt, schedule = make_optimizer(wrapper, cfg, total_steps, device)
    ds_engine, _, _, _ = deepspeed.initialize(
        model=wrapper,
        optimizer=None if "optimizer" in ds_config else opt,  # a ds_config optimizer (e.g. CPU Adam for offload)
        model_parameters=[{"params": g["params"], "weight_decay": g["weight_decay"]} for g in opt.param_groups]
        if "optimizer" in ds_config else None,  # keeps the decay groups
        lr_scheduler=None if "scheduler" in ds_config else schedule,
        config=ds_config,
    )
    del hf_ds
    adapter = DeepSpeedEngineAdapter(ds_engine)
    parallel = TorchDistParallel(device if device.type == "cuda" else torch.device("cpu"))

    fp = fingerprint(dataset, base, cfg, opts, world)
    ckpt = Checkpointer(ds_engine, ckpt_dir, opts.save_every, opts.keep_checkpoints, fp, rank)
    tag = ckpt.prepare(resume=not args.no_resume)
    state = None
    if tag is not None:
        state = ckpt.load(tag)
        if rank == 0:
            log.info("resuming from %s (step %d of %d)", ckpt_dir / tag, state["step"], total_steps)

    tracker, own_run = (None, False)
    if rank == 0:
        tracker, own_run = _open_tracker(args, {**asdict(cfg), **asdict(opts), "world_size": world})

    def on_log(rec: dict[str, Any]) -> None:
        if tracker is not None:
            tracker.log_metrics({f"train.{k}": v for k, v in rec.items() if k != "step"}, step=int(rec["step"]))
        if rank == 0 and not cfg.progress:
            print(json.dumps({"train_log": rec}), flush=True)

    try:
        stats = train(lm, examples, cfg, on_log=on_log, engine=adapter, objective=objective, parallel=parallel,
                      resume=state, on_step=ckpt.maybe_save)
    except BaseException:
        if own_run:
            tracker.client.set_terminated(tracker.run_id, "FAILED")
        raise

    for key in ("first_loss", "final_loss"):
        if not math.isfinite(float(stats[key])):  # identical on every rank: all stop here
            raise FloatingPointError(f"train: {key} is {stats[key]} (not finite); the model is not saved")

    # ---- the HF model
    if adapters is not None:
        from apollo.train.lora import merge_adapters

        merge_adapters(adapters)
    if int(opts.zero_stage) == 3:
        sd = ds_engine._zero3_consolidated_16bit_state_dict()  # collective; full weights on rank 0
        if rank == 0:
            sd = {k.removeprefix("lm."): v for k, v in sd.items()}
            _save_atomic(out, _WithStateDict(lm, sd), tokenizer)
    elif rank == 0:
        _save_atomic(out, lm, tokenizer)
    summary = {f"train.{k}": v for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    summary.update({"train.zero_stage": int(opts.zero_stage), "train.grad_accum": cfg.grad_accum,
                    "train.global_batch_size": cfg.micro_batch_size * cfg.grad_accum * world,
                    "train.stopped_early": int(stats["stopped_early"]),
                    "train.wall_s": time.perf_counter() - t_start})
    if rank == 0:
        atomic_write_text(out / "train_stats.json", json.dumps(summary, indent=2) + "\n")
        atomic_write_text(out / "train_history.json", json.dumps(stats["history"]) + "\n")
        if tracker is not None:
            tracker.log_metrics(summary)
            if own_run:
                tracker.client.set_terminated(tracker.run_id, "FINISHED")
    dist.barrier()
    if rank == 0 and not opts.keep_checkpoints_after:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    dist.barrier()
    if hasattr(ds_engine, "destroy"):  # ZeRO-3 hooks and comm threads first (else "terminate called" at exit)
        ds_engine.destroy()
    dist.destroy_process_group()
    return summary


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m apollo.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", help="Parquet (or JSONL) rows with input_ids and labels (+ the objective's fields)")
    ap.add_argument("--base", help="HF model directory to start from")
    ap.add_argument("--out", help="HF model directory to write")
    ap.add_argument("--config", help="params.yaml, or a YAML/JSON mapping of some train fields (default: the "
                                     "repository's params.yaml)")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a train field (repeatable)")
    ap.add_argument("--seed", type=int, default=None, help="default: params' top-level seed")
    ap.add_argument("--checkpoint-dir", default=None)
    ap.add_argument("--no-resume", action="store_true", help="ignore existing checkpoints (they are deleted)")
    ap.add_argument("--run-id", default=None, help="MLflow run to log into (default $APOLLO_TRAIN_RUN_ID)")
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--print-ds-config", action="store_true", help="print the DeepSpeed config and exit")
    ap.add_argument("--world-size", type=int, default=None, help="with --print-ds-config (default train.world_size)")
    ap.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)  # launcher
    return ap


def setup_rank_logging() -> None:
    """A rank process's log lines (``APOLLO_LOG_LEVEL``, default INFO), the libraries' chatter at WARNING
    (the trainer's ranks here, the RL ranks through :mod:`apollo.rl.distributed`)."""
    logging.basicConfig(level=os.environ.get("APOLLO_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for noisy in ("DeepSpeed", "deepspeed", "mlflow", "alembic", "urllib3", "httpx", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    setup_rank_logging()
    args = build_parser().parse_args(argv)
    if args.print_ds_config:
        train_map, seed = _train_mapping(args)
        cfg, opts = resolve_config(train_map, seed, world_size=args.world_size or int(train_map.get("world_size", 1)))
        overlay = read_overlay(opts.ds_config) if opts.ds_config else None
        print(json.dumps(build_ds_config(cfg, opts, opts.world_size, overlay), indent=2))
        return 0
    missing = [n for n in ("dataset", "base", "out") if not getattr(args, n)]
    if missing:
        build_parser().error(f"missing --{', --'.join(missing)}")
    summary = train_rank(args)
    if int(os.environ.get("RANK", 0)) == 0:
        print("RESULT " + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
