"""The step loop of the one trainer: every backend (DeepSpeed ranks, the in-process ``torch``
backend, behaviour cloning in bootstrap) and every objective go through :func:`train`.

The loss of an optimizer step is the objective's per-token loss averaged over the trained tokens of
the step (all its micro-batches together), so a long conversation weighs by its trained tokens, not
by its rows.

Data parallelism. With a :class:`~apollo.train.engine.DataParallel` of ``world_size`` W, an
optimizer step consumes ``W × grad_accum`` micro-batches of one deterministic stream (every rank
plans the same stream from ``cfg.seed``) and rank r trains micro-batches ``r·grad_accum …
(r+1)·grad_accum − 1`` of them. Every rank knows the trained-token count of the whole step without
communication, so the loss it back-propagates is ``local summed loss / trained tokens of the step``:
the *sum* of the ranks' gradients is exactly the single-process gradient of the same global batch
(an engine that averages gradients over ranks multiplies by W). Only the logged loss (and the
time-budget decision) needs one scalar all-reduce per step.

Resuming. ``on_step(step, state)`` receives after every optimizer step a small JSON-able ``state``
(step, stream position, token counters, loss windows, history); passing it back as ``resume=``
continues the run exactly where it was (the caller restores model, optimizer and schedule).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import torch
from tqdm.auto import tqdm

from apollo.train.batching import MicroBatchStream, collate, make_rows, plan_steps, prepare_examples
from apollo.train.config import TrainConfig
from apollo.train.engine import DataParallel, Engine, TorchEngine
from apollo.train.objectives import Objective, SFTObjective, token_logprobs


def train(
    model: torch.nn.Module,
    examples: Sequence[dict[str, Any]],
    cfg: TrainConfig,
    on_log: Callable[[dict[str, Any]], None] | None = None,
    engine: Engine | None = None,
    *,
    objective: Objective | None = None,
    parallel: DataParallel | None = None,
    resume: dict[str, Any] | None = None,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Train ``model`` in place on ``examples`` with ``objective`` (default: masked SFT); returns statistics.

    ``engine`` defaults to :class:`~apollo.train.engine.TorchEngine` (the ``torch`` backend).
    Logged (``on_log``) every ``cfg.log_every`` optimizer steps and at the end: ``step``, ``epoch``,
    ``loss`` (mean per trained token since the previous log), ``lr``, ``grad_norm``,
    ``tokens_per_s`` (non-padding tokens of all ranks), ``trained_tokens`` (cumulative, all ranks),
    ``elapsed_s``, and the objective's stats as ``obj.<name>`` (token-weighted over this rank's
    micro-batches of the window). With ``cfg.lora`` and no ``engine``, LoRA adapters are added to
    ``model`` here and merged into its weights before returning (:mod:`apollo.train.lora`); with an
    ``engine``, the caller adds them before building it and merges them. With ``parallel`` every
    rank calls this with the same examples and config; the loss logs and results are identical on
    all ranks.

    ``on_step(step, state)`` is called after every optimizer step (``state["planned_steps"]`` is the
    run's length); ``resume=state`` continues from it (the caller has restored the model, the
    engine's optimizer and schedule, and the RNG state; the loop does not reseed then).

    Returns: ``steps`` (done), ``planned_steps``, ``stopped_early`` (``time_budget_s`` hit),
    ``epochs``, ``first_loss``, ``final_loss`` (last log window), ``last_epoch_loss``, ``tokens``,
    ``trained_tokens``, ``seconds`` and ``tokens_per_s`` (this call only), ``rows``,
    ``resumed_from_step``, ``world_size``, ``history`` (the logs, resumed ones included), ``config``,
    ``objective``.
    """
    objective = objective or SFTObjective()
    par = parallel or DataParallel()
    world, rank, accum = par.world_size, par.rank, cfg.grad_accum
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    if resume is None:
        torch.manual_seed(cfg.seed)

    data, lengths, n_trained = prepare_examples(examples, cfg.max_length, objective.token_fields)
    rows = make_rows([{"input_ids": d[0]} for d in data], cfg.max_length, cfg.packing)
    steps_per_epoch, total_steps = plan_steps(len(rows), cfg, world)
    lora = None  # adapters added here (and merged at the end) when this call builds the engine
    if cfg.lora is not None:
        from apollo.train.lora import add_adapters, has_adapters

        if engine is None:
            lora = add_adapters(model, cfg.lora, cfg.seed)
        elif not has_adapters(model):  # an engine over the full weights would train them all
            raise ValueError("train: cfg.lora is set but the engine was built over a model without adapters "
                             "(add them with apollo.train.lora.add_adapters before building the engine)")
    engine = engine or TorchEngine(model, cfg, total_steps)
    loss_fn = getattr(engine, "loss", None) or (lambda b: objective(b, token_logprobs(model, b)))
    pad_id = int(getattr(getattr(model, "config", None), "pad_token_id", None) or 0)
    device = _device_of(model)
    dtype = _dtype_of(model)
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                              enabled=cfg.bf16 and dtype == torch.float32)

    st: dict[str, Any] = {
        "step": 0, "micro": 0, "tokens": 0, "trained_tokens": 0, "win_loss": 0.0, "win_tok": 0,
        "epoch_loss": [], "history": [], "elapsed_s": 0.0,
    }
    if resume is not None:
        if int(resume.get("world_size", world)) != world:
            raise ValueError(f"cannot resume a {resume['world_size']}-rank run on {world} ranks")
        st.update({k: v for k, v in resume.items() if k in st})
    resumed_from = int(st["step"])
    stream = MicroBatchStream(rows, lengths, cfg)
    stream.skip(int(st["micro"]))
    epoch_loss: dict[int, list[float]] = {int(e): [float(l), float(n)] for e, l, n in st["epoch_loss"]}
    history: list[dict[str, Any]] = list(st["history"])
    tokens, trained = int(st["tokens"]), int(st["trained_tokens"])
    win_loss, win_tok = float(st["win_loss"]), int(st["win_tok"])
    win_stats: dict[str, float] = {}
    win_stat_tok = 0

    model.train()
    t0 = time.perf_counter()
    elapsed0 = float(st["elapsed_s"])
    t_log, tok_log, tok_start = t0, tokens, tokens
    epoch = 0
    bar = tqdm(total=total_steps, initial=resumed_from, desc=objective.name, dynamic_ncols=True, mininterval=2.0,
               disable=not cfg.progress or rank != 0)
    stopped_early = False
    done = resumed_from
    for step in range(resumed_from, total_steps):
        step_mbs = [next(stream) for _ in range(world * accum)]
        epoch = step_mbs[-1][0]
        n_step = sum(n_trained[i] for _, mb in step_mbs for row in mb for i in row)
        tokens += sum(lengths[i] for _, mb in step_mbs for row in mb for i in row)
        local_loss = 0.0
        for _, mb in step_mbs[rank * accum : (rank + 1) * accum]:
            b = collate([[data[i] for i in row] for row in mb], pad_id)
            b = {k: (v.to(device) if v is not None else None) for k, v in b.items()}
            if b["attention_mask"] is not None and dtype.is_floating_point and dtype != torch.float32:
                b["attention_mask"] = b["attention_mask"].clamp(min=torch.finfo(dtype).min).to(dtype)
            with autocast:
                loss_sum, stats = loss_fn(b)
            engine.backward(loss_sum / max(1, n_step))
            local_loss += float(loss_sum.detach())
            n_mb = sum(n_trained[i] for row in mb for i in row)
            for k, v in stats.items():
                win_stats[k] = win_stats.get(k, 0.0) + float(v) * n_mb
            win_stat_tok += n_mb
        engine.step()
        elapsed = elapsed0 + time.perf_counter() - t0
        over_budget = cfg.time_budget_s is not None and elapsed > cfg.time_budget_s
        if world > 1:  # one collective per step: the step's loss, and the early stop decided together
            step_loss, n_over = par.all_reduce_sum([local_loss, float(over_budget)])
            over_budget = n_over > 0
        else:
            step_loss = local_loss
        trained += n_step
        win_loss += step_loss
        win_tok += n_step
        epoch_loss.setdefault(epoch, [0.0, 0.0])
        epoch_loss[epoch][0] += step_loss
        epoch_loss[epoch][1] += n_step
        bar.update(1)
        done = step + 1
        if (step + 1) % cfg.log_every == 0 or step + 1 == total_steps or over_budget:
            now = time.perf_counter()
            log = {
                "step": step + 1,
                "epoch": epoch + 1,
                "loss": win_loss / max(1, win_tok),
                "lr": engine.get_lr()[0],
                "grad_norm": getattr(engine, "last_grad_norm", float("nan")),
                "tokens_per_s": (tokens - tok_log) / max(1e-9, now - t_log),
                "trained_tokens": trained,
                "elapsed_s": elapsed0 + now - t0,
                **{f"obj.{k}": v / max(1, win_stat_tok) for k, v in win_stats.items()},
            }
            history.append(log)
            bar.set_postfix(loss=f"{log['loss']:.3f}", tok_s=f"{log['tokens_per_s']:.0f}")
            if on_log is not None:
                on_log(log)
            win_loss, win_tok, t_log, tok_log = 0.0, 0, now, tokens
            win_stats, win_stat_tok = {}, 0
        if on_step is not None:
            on_step(step + 1, {
                "step": step + 1, "planned_steps": total_steps, "world_size": world, "micro": stream.position,
                "tokens": tokens, "trained_tokens": trained, "win_loss": win_loss, "win_tok": win_tok,
                "epoch_loss": [[e, v[0], v[1]] for e, v in sorted(epoch_loss.items())],
                "history": history, "elapsed_s": elapsed0 + time.perf_counter() - t0,
            })
        if over_budget and step + 1 < total_steps:
            stopped_early = True
            break
    bar.close()
    seconds = time.perf_counter() - t0
    if lora is not None:
        from apollo.train.lora import merge_adapters

        merge_adapters(lora)
    model.eval()
    if not history:  # resumed at the very end: nothing left to do
        raise ValueError("nothing to train: the resumed state is already at the last step")
    last = epoch_loss[max(epoch_loss)]
    return {
        "steps": done,
        "planned_steps": total_steps,
        "stopped_early": stopped_early,
        "epochs": done / steps_per_epoch,
        "first_loss": history[0]["loss"],
        "final_loss": history[-1]["loss"],
        "last_epoch_loss": last[0] / max(1.0, last[1]),
        "tokens": tokens,
        "trained_tokens": trained,
        "seconds": seconds,
        "tokens_per_s": (tokens - tok_start) / max(1e-9, seconds),
        "rows": len(rows),
        "resumed_from_step": resumed_from,
        "world_size": world,
        "history": history,
        "config": asdict(cfg),
        "objective": objective.name,
    }


def _dtype_of(model: torch.nn.Module) -> torch.dtype:
    try:
        return next(model.parameters()).dtype
    except StopIteration:
        return torch.float32


def _device_of(model: torch.nn.Module) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")
