"""The RL policy update on N DeepSpeed ranks (the one trainer's engine), the rollout side on rank 0.

APPO's and SAO/GRPO's update is the one trainer's (:mod:`apollo.train`): the same
:class:`~apollo.train.objectives.ObjectiveModule`, DeepSpeed config
(:func:`~apollo.train.ds_config.build_ds_config`), optimizer and schedule
(:func:`~apollo.train.engine.make_optimizer`), engine adapter
(:class:`~apollo.train.engine.DeepSpeedEngineAdapter`) and step loop
(:func:`~apollo.train.loop.train`) as the masked SFT on ranks. What this module adds is the RL side
of it: the rows of an update are made on **rank 0** (rollouts, advantages, rollout logprobs: the
unchanged loops of :mod:`apollo.rl.appo_loop` and :mod:`apollo.rl.sao_loop`), and every update is a
*command* that rank 0 broadcasts (``torch.distributed.broadcast_object_list``) and every rank then
executes together:

- ``train``: APPO's update, :func:`apollo.train.loop.train` over the iteration's rows (each rank its
  share of every optimizer step's micro-batches; the step loss is the single-process token mean);
- ``step``: SAO/GRPO's update, one optimizer step over the rows of one batch of rollouts, split
  into ``micro_batches`` chunks (rank r takes chunks ``r·A … (r+1)·A − 1``, ``A = micro_batches / W``),
  the loss of each divided by the trained tokens of the whole batch — the split, not the number of
  ranks, decides the result, so 1 rank and N ranks give the same update;
- ``save`` / ``load``: a DeepSpeed checkpoint (model, optimizer and schedule; ZeRO shards per rank);
- ``stop``: the other ranks leave :meth:`DeepSpeedLearner.serve`.

With ZeRO 0–2 every rank holds the full weights, so rank 0's rollout side samples from the very
module DeepSpeed updates (the ``hf`` engine shares it; a served ``vllm_server`` reloads the policy
rank 0 saves). ZeRO-3 partitions the weights and is refused here (``learner.zero_stage``).

Programs (every rank runs the same command; the launcher is DeepSpeed's or torchrun,
:func:`launch_command`)::

    deepspeed --num_gpus 2 --module apollo.rl.distributed replay --method sao --policy base/ \\
        --rows rows.jsonl --updates 5 --config spec.json --out out/ --checkpoint-dir ckpt/

``replay`` runs ``--updates`` updates from a fixed rows file (deterministic: the rank-count and
kill/resume tests, benchmarks). ``python -m apollo.rl.rl_ranks appo|sao`` runs
:func:`apollo.rl.appo_loop.run_appo` and :func:`apollo.rl.sao_loop.run_loop` with the rollouts on
rank 0 (:mod:`apollo.rl.rl_ranks`, ``infra/gpu/smoke.sh``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from apollo.rl.tempered import tempered
from apollo.train.batching import IGNORE_INDEX, collate
from apollo.train.config import TrainConfig

log = logging.getLogger(__name__)
MODULE = "apollo.rl.distributed"
BACKENDS = ("torch", "deepspeed")
LAUNCHERS = ("deepspeed", "torchrun")


@dataclass
class LearnerOptions:
    """``appo.learner`` / ``sao.learner``: where the policy update runs.

    ``backend: torch`` is the in-process update (the loops as they were); ``deepspeed`` the update on
    ``world_size`` ranks with ZeRO ``zero_stage`` (0–2), started by ``launcher``; ``ds_config`` a
    DeepSpeed JSON/YAML deep-merged over the generated config (``""``: none); ``micro_batches``: the
    chunks an SAO/GRPO batch is split into (a multiple of ``world_size``; it decides the numerics)."""

    backend: str  # torch (in this process) | deepspeed (the one trainer's DeepSpeed engine on ranks)
    world_size: int  # ranks of the update (one node; GPUs, or CPU gloo ranks)
    zero_stage: int  # 0-2 (ZeRO-3 partitions the weights rank 0 samples from)
    launcher: str  # deepspeed | torchrun
    ds_config: str  # JSON/YAML deep-merged over the generated DeepSpeed config ("": none)
    micro_batches: int  # SAO/GRPO: chunks of an update's rows (a multiple of world_size; decides the numerics)

    def check(self, where: str) -> LearnerOptions:
        if self.backend not in BACKENDS:
            raise ValueError(f"{where}.backend must be one of {BACKENDS}, not {self.backend!r}")
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"{where}.launcher must be one of {LAUNCHERS}, not {self.launcher!r}")
        if int(self.world_size) < 1:
            raise ValueError(f"{where}.world_size must be ≥ 1, got {self.world_size}")
        if int(self.zero_stage) not in (0, 1, 2):
            raise ValueError(f"{where}.zero_stage must be 0, 1 or 2 (rank 0 samples from the trained module; "
                             f"ZeRO-3 partitions it), got {self.zero_stage}")
        if int(self.micro_batches) < 1 or int(self.micro_batches) % int(self.world_size):
            raise ValueError(f"{where}.micro_batches ({self.micro_batches}) must be a positive multiple of "
                             f"{where}.world_size ({self.world_size})")
        return self


def learner_options(mapping: Mapping[str, Any], where: str) -> LearnerOptions:
    """:class:`LearnerOptions` from a complete mapping; unknown and missing keys are named."""
    known = {f.name for f in dataclasses.fields(LearnerOptions)}
    m = dict(mapping or {})
    unknown, missing = sorted(set(m) - known), sorted(known - set(m))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown} (known: {sorted(known)})")
    if missing:
        raise ValueError(f"{where}: missing key(s) {missing} (there are no defaults in code)")
    return LearnerOptions(**m).check(where)


def deepspeed_learner(mapping: Mapping[str, Any] | None, where: str) -> LearnerOptions | None:
    """The options when ``mapping`` asks for the DeepSpeed update, else None (empty or ``backend: torch``)."""
    if not mapping or mapping.get("backend", "torch") == "torch":
        if mapping and mapping.get("backend", "torch") not in BACKENDS:
            raise ValueError(f"{where}.backend must be one of {BACKENDS}, not {mapping.get('backend')!r}")
        return None
    return learner_options(mapping, where)


# --------------------------------------------------------------------------------- the learner


def split_chunks(n: int, k: int) -> list[range]:
    """``k`` contiguous chunks of ``range(n)``, sizes differing by at most one (some empty when n < k)."""
    q, r = divmod(n, k)
    out, start = [], 0
    for i in range(k):
        size = q + (1 if i < r else 0)
        out.append(range(start, start + size))
        start += size
    return out


def _device() -> torch.device:
    from deepspeed.accelerator import get_accelerator

    accel = get_accelerator()
    if accel.device_name() == "cpu":
        return torch.device("cpu")
    return torch.device(accel.device_name(int(os.environ.get("LOCAL_RANK", 0))))


def init_ranks() -> tuple[int, int]:
    """Join (or, without a launcher, create a 1-rank) process group; ``(rank, world_size)``."""
    from apollo.train.launch import single_process_env, skip_cpu_shm_comm

    single_process_env()
    skip_cpu_shm_comm()
    import deepspeed
    import torch.distributed as dist

    if not dist.is_initialized():
        deepspeed.init_distributed(verbose=False)
    dev = _device()
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    return dist.get_rank(), dist.get_world_size()


class DeepSpeedLearner:
    """A DeepSpeed engine over ``lm`` with ``objective``; built collectively on every rank (rank 0's
    weights win: DeepSpeed broadcasts them), driven by rank 0's commands (module docstring)."""

    def __init__(self, lm: torch.nn.Module, objective: Any, tcfg: TrainConfig, opts: LearnerOptions):
        import deepspeed
        import torch.distributed as dist

        from apollo.train.config import train_config
        from apollo.train.ds_config import build_ds_config, read_overlay
        from apollo.train.engine import DeepSpeedEngineAdapter, TorchDistParallel, make_optimizer
        from apollo.train.launch import cpu_threads
        from apollo.train.objectives import ObjectiveModule

        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        if self.world != int(opts.world_size) and self.rank == 0:
            log.warning("learner.world_size=%s but %d ranks were launched: using %d", opts.world_size, self.world,
                        self.world)
        if int(opts.micro_batches) % self.world:
            raise ValueError(f"learner.micro_batches ({opts.micro_batches}) must be a multiple of the "
                             f"{self.world} ranks")
        self.device = _device()
        if self.device.type == "cpu":
            cpu_threads(tcfg)
        self.lm, self.objective, self.opts = lm, objective, opts
        self.tcfg = tcfg
        self.accum = 1  # the engine's accumulation; set per update by _set_accum
        # bf16 on CPU ranks: fp32 weights and optimizer, bf16 autocast in the loop (as apollo.train.cli)
        cpu_autocast = bool(tcfg.bf16) and self.device.type == "cpu"
        run_opts = train_config(zero_stage=int(opts.zero_stage), world_size=self.world, grad_accum=1,
                                global_batch_size=None, backend="deepspeed")[1]
        overlay = read_overlay(opts.ds_config) if opts.ds_config else None
        ds_cfg = build_ds_config(dataclasses.replace(tcfg, grad_accum=1, bf16=False) if cpu_autocast
                                 else dataclasses.replace(tcfg, grad_accum=1), run_opts, self.world, overlay)
        self.wrapper = ObjectiveModule(lm, objective)
        opt, schedule = make_optimizer(self.wrapper, tcfg, 10**9, self.device)  # lr constant after warm-up
        self.ds, _, _, _ = deepspeed.initialize(
            model=self.wrapper,
            optimizer=None if "optimizer" in ds_cfg else opt,
            model_parameters=[{"params": g["params"], "weight_decay": g["weight_decay"]} for g in opt.param_groups]
            if "optimizer" in ds_cfg else None,
            lr_scheduler=None if "scheduler" in ds_cfg else schedule,
            config=ds_cfg,
        )
        self.adapter = DeepSpeedEngineAdapter(self.ds)
        self.parallel = TorchDistParallel(self.device if self.device.type == "cuda" else torch.device("cpu"))
        self.pad_id = int(getattr(getattr(lm, "config", None), "pad_token_id", None) or 0)

    # ---- the command channel
    def _broadcast(self, cmd: list[Any] | None) -> list[Any]:
        import torch.distributed as dist

        box = [cmd]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def _call(self, *cmd: Any) -> Any:
        if self.rank != 0:
            raise RuntimeError("only rank 0 issues learner commands (the other ranks serve())")
        if self.world > 1:
            self._broadcast(list(cmd))
        return self._run(list(cmd))

    def serve(self) -> None:
        """Ranks ≥ 1: execute rank 0's commands until ``stop``."""
        while True:
            cmd = self._broadcast(None)
            if cmd[0] == "stop":
                return
            self._run(cmd)

    def _run(self, cmd: list[Any]) -> Any:
        kind = cmd[0]
        if kind == "train":
            return self._train(*cmd[1:])
        if kind == "step":
            return self._step(*cmd[1:])
        if kind == "save":
            return self._save(*cmd[1:])
        if kind == "load":
            return self._load(*cmd[1:])
        if kind == "stop":
            return None
        raise ValueError(f"unknown learner command {kind!r}")

    # ---- rank 0's API
    def train(self, rows: Sequence[dict[str, Any]], cfg: TrainConfig, temperature: float = 1.0) -> dict[str, Any]:
        """APPO's update: :func:`apollo.train.loop.train` over ``rows`` on every rank. ``cfg.grad_accum``
        is the single-process accumulation; on W ranks each rank accumulates ``grad_accum / W``."""
        return self._call("train", list(rows), dataclasses.asdict(cfg), float(temperature))

    def step(self, rows: Sequence[dict[str, Any]], temperature: float = 1.0) -> dict[str, float]:
        """SAO/GRPO's update: one optimizer step over ``rows`` (``input_ids``, ``labels``, per-token
        ``advantages`` and ``rollout_logprobs``); returns ``policy_loss`` (token mean), ``grad_norm`` and
        the objective's stats token-weighted over every rank."""
        return self._call("step", list(rows), float(temperature))

    def save(self, directory: str | Path, tag: str) -> None:
        self._call("save", str(directory), tag)

    def load(self, directory: str | Path, tag: str) -> None:
        self._call("load", str(directory), tag)

    def stop(self) -> None:
        if self.rank == 0 and self.world > 1:
            self._broadcast(["stop"])

    # ---- what every rank executes
    def _set_accum(self, accum: int) -> None:
        """The engine's accumulation boundary for this update (DeepSpeed counts micro-steps to find it)."""
        if accum != self.accum:
            self.ds.set_train_batch_size(self.ds.train_micro_batch_size_per_gpu() * accum * self.world)
            self.accum = accum

    def _autocast(self):
        lm_dtype = next(self.lm.parameters()).dtype
        on = bool(self.tcfg.bf16) and lm_dtype == torch.float32
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16) if on else nullcontext()

    def _train(self, rows: list[dict[str, Any]], cfg_map: dict[str, Any], temperature: float) -> dict[str, Any]:
        from apollo.train.loop import train

        cfg = TrainConfig(**{**cfg_map, "betas": tuple(cfg_map["betas"])})
        if cfg.grad_accum % self.world:
            raise ValueError(f"train.grad_accum ({cfg.grad_accum}) must be a multiple of the {self.world} learner "
                             "ranks (it is the single-process accumulation; each rank takes grad_accum / ranks)")
        accum = cfg.grad_accum // self.world
        self._set_accum(accum)
        cfg = dataclasses.replace(cfg, grad_accum=accum, progress=cfg.progress and self.rank == 0)
        with tempered(self.lm, temperature):
            stats = train(self.lm, rows, cfg, engine=self.adapter, objective=self.objective, parallel=self.parallel)
        self.lm.eval()
        return stats

    def _step(self, rows: list[dict[str, Any]], temperature: float) -> dict[str, float]:
        m = int(self.opts.micro_batches)
        accum = m // self.world
        self._set_accum(accum)
        fields = tuple(self.objective.token_fields)
        segs = [(list(r["input_ids"]), list(r["labels"]), {k: [float(x) for x in r[k]] for k in fields})
                for r in rows]
        n_total = sum(sum(1 for x in s[1][1:] if x != IGNORE_INDEX) for s in segs)
        if n_total == 0:
            raise ValueError("learner step: no trained token in the batch")
        chunks = split_chunks(len(segs), m)[self.rank * accum:(self.rank + 1) * accum]
        self.lm.train()
        local_loss, stat_sum, stat_tok = 0.0, {}, 0
        for ch in chunks:
            if len(ch):
                part = [[segs[i]] for i in ch]
            else:  # an empty chunk (fewer rows than chunks): a zero that still reaches every parameter
                ids, _, f = segs[0]
                part = [[(ids, [IGNORE_INDEX] * len(ids), f)]]
            b = collate(part, self.pad_id)
            b = {k: (v.to(self.device) if isinstance(v, torch.Tensor) else v) for k, v in b.items()}
            with tempered(self.lm, temperature), self._autocast():
                loss_sum, st = self.adapter.loss(b)
            self.adapter.backward(loss_sum / n_total)
            local_loss += float(loss_sum.detach())
            n = int(sum(1 for i in ch for x in segs[i][1][1:] if x != IGNORE_INDEX))
            for k, v in st.items():
                stat_sum[k] = stat_sum.get(k, 0.0) + float(v) * n
            stat_tok += n
        self.adapter.step()
        self.lm.eval()
        names = sorted(stat_sum) if self.rank == 0 else None
        if self.world > 1:
            names = self._broadcast(names)
            vals = self.parallel.all_reduce_sum([local_loss, stat_tok] + [stat_sum.get(k, 0.0) for k in names])
        else:
            vals = [local_loss, stat_tok] + [stat_sum[k] for k in names]
        loss, tok = vals[0], max(1.0, vals[1])
        out = {"policy_loss": loss / n_total, "grad_norm": float(self.adapter.last_grad_norm)}
        out.update({f"loss.{k}": v / tok for k, v in zip(names, vals[2:])})
        return out

    def _save(self, directory: str, tag: str) -> None:
        import torch.distributed as dist

        self.ds.save_checkpoint(directory, tag=tag, save_latest=False)
        dist.barrier()

    def _load(self, directory: str, tag: str) -> None:
        path, _ = self.ds.load_checkpoint(directory, tag=tag)
        if path is None:
            raise RuntimeError(f"DeepSpeed could not load the learner checkpoint {Path(directory) / tag}")

    def state_dict_for_save(self) -> dict[str, torch.Tensor]:
        """The policy's weights as an HF ``state_dict`` (ZeRO 0–2: the module's own)."""
        return self.lm.state_dict()


# --------------------------------------------------------------------------------- launching


def launch_command(opts: LearnerOptions, args: Sequence[str], *, python: str = sys.executable,
                   master_port: int | None = None, module: str = MODULE) -> list[str]:
    """The command that runs ``python -m MODULE ARGS`` (default this module) on ``opts.world_size`` ranks of this node."""
    from apollo.train.launch import free_port

    port = str(master_port or free_port())
    if opts.launcher == "torchrun":
        return [python, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(opts.world_size),
                "--master_addr", "127.0.0.1", "--master_port", port, "-m", module, *args]
    return [python, "-m", "deepspeed.launcher.runner", "--master_port", port, "--num_gpus", str(opts.world_size),
            "--module", module, *args]


# --------------------------------------------------------------------------------- objectives


def make_rl_objective(method: str, args: Mapping[str, Any]):
    """The update's objective by method: ``appo`` → :class:`~apollo.rl.appo_objective.AppoObjective`
    (``args`` its fields), ``sao`` / ``grpo`` → :class:`~apollo.train.objectives.PolicyGradientObjective`
    with the ``sao`` / ``dual_clip_ppo`` loss (``args`` the loss's keywords)."""
    from apollo.train.objectives import PolicyGradientObjective

    if method == "appo":
        from apollo.rl.appo_objective import AppoObjective

        return AppoObjective(**dict(args))
    if method in ("sao", "grpo"):
        return PolicyGradientObjective("sao" if method == "sao" else "dual_clip_ppo", dict(args))
    raise ValueError(f"unknown RL method {method!r}; known: appo, sao, grpo")


# --------------------------------------------------------------------------------- replay


def replay(args: argparse.Namespace) -> dict[str, Any]:
    """``--updates`` updates from a fixed rows file on every rank, a learner checkpoint after each;
    a run started again resumes after the last complete one. Rank 0 writes the HF policy to ``--out``
    with ``replay_history.json`` (per update: the loss, and the grad norm for ``step`` updates)."""
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from apollo.models.bootstrap import _save_atomic
    from apollo.schema import atomic_write_text
    from apollo.train.checkpoint import write_atomic
    from apollo.train.config import loop_config

    rank, world = init_ranks()
    spec = json.loads(Path(args.config).read_text())
    tcfg = loop_config(spec["train"], int(spec.get("seed", 0)), where=f"{args.config}: train")
    opts = learner_options({**spec["learner"], "backend": "deepspeed"}, f"{args.config}: learner")
    objective = make_rl_objective(args.method, spec.get("objective", {}))
    temperature = float(spec.get("temperature", 1.0))
    rows = [json.loads(ln) for ln in open(args.rows, encoding="utf-8") if ln.strip()]
    torch.manual_seed(tcfg.seed)
    lm = AutoModelForCausalLM.from_pretrained(args.policy, dtype=torch.float32)
    learner = DeepSpeedLearner(lm, objective, tcfg, opts)
    ckpt = Path(args.checkpoint_dir)
    start, history = 0, []
    if rank == 0:
        latest = ckpt / "latest"
        if latest.exists():
            tag = latest.read_text().strip()
            state = json.loads((ckpt / f"{tag}.json").read_text())
            start, history = int(state["update"]), list(state["history"])
        ckpt.mkdir(parents=True, exist_ok=True)
    if rank != 0:
        learner.serve()
        dist.barrier()
        dist.destroy_process_group()
        return {}
    try:
        if start:
            log.info("replay: resuming after update %d from %s", start, ckpt)
            learner.load(ckpt, f"update-{start:04d}")
        for k in range(start, args.updates):
            t0 = time.perf_counter()
            if args.method == "appo":
                st = learner.train(rows, dataclasses.replace(tcfg, seed=tcfg.seed * 1000 + k), temperature)
                rec = {"loss": float(st["final_loss"]), "losses": [h["loss"] for h in st["history"]],
                       "steps": st["steps"]}
            else:
                st = learner.step(rows, temperature)
                rec = {"loss": st["policy_loss"], "grad_norm": st["grad_norm"],
                       **{k2: v for k2, v in st.items() if k2.startswith("loss.")}}
            rec.update(update=k + 1, seconds=time.perf_counter() - t0)
            history.append(rec)
            tag = f"update-{k + 1:04d}"
            learner.save(ckpt, tag)
            write_atomic(ckpt / f"{tag}.json", json.dumps({"update": k + 1, "history": history}))
            write_atomic(ckpt / "latest", tag)  # only now is the update complete
            print(json.dumps({"replay": rec}), flush=True)
    finally:
        learner.stop()
    tok = AutoTokenizer.from_pretrained(args.policy)
    _save_atomic(Path(args.out), lm, tok)
    atomic_write_text(Path(args.out) / "replay_history.json", json.dumps(history) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return {"updates": len(history), "history": history}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="program", required=True)
    r = sub.add_parser("replay", help="updates from a fixed rows file (deterministic)")
    r.add_argument("--method", choices=("appo", "sao", "grpo"), required=True)
    r.add_argument("--policy", required=True, help="HF model directory to start from")
    r.add_argument("--rows", required=True, help="JSONL rows: input_ids, labels, advantages, rollout_logprobs")
    r.add_argument("--updates", type=int, required=True)
    r.add_argument("--config", required=True, help="JSON: {train: loop fields, learner: {...}, objective: {...}, "
                                                  "temperature, seed}")
    r.add_argument("--out", required=True)
    r.add_argument("--checkpoint-dir", required=True)
    ap.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)  # launcher
    return ap


def main(argv: list[str] | None = None) -> int:
    from apollo.train.cli import setup_rank_logging

    setup_rank_logging()
    args, rest = build_parser().parse_known_args(argv)
    rest = [a for a in rest if not a.startswith("--local_rank")]
    if rest:
        build_parser().error(f"unknown arguments {rest}")
    replay(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
