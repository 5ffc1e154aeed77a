"""Masked supervised fine-tuning (behaviour cloning) in plain PyTorch.

Examples are ``{"input_ids": [...], "labels": [...]}`` (``-100`` = not trained) from
:func:`apollo.data.tokenize.tokenize_conversation`. The loss is the mean cross-entropy over the
trained tokens of an optimizer step (all its micro-batches together), so a long conversation weighs
by its trained tokens, not by its rows.

Rows. Each micro-batch is made of *rows*; a row holds one sample or, with ``packing=True``, several
samples packed first-fit-decreasing into ``max_length`` tokens. Packed samples never see each
other: ``position_ids`` restart at 0 for every sample and the attention mask is a 4D block-diagonal
causal mask (additive float, which both the eager and the SDPA attention of transformers accept).
A micro-batch whose rows are single samples of equal length needs no mask at all, so it takes
SDPA's ``is_causal`` fast path.

Packing is *off* by default: on CPU the SDPA kernel cannot skip masked blocks, so a packed row costs
``max_length**2`` attention instead of ``sum(len_i**2)``, and conversations of agent trajectories
(a few thousand tokens each) nearly fill a row anyway. Unpacked micro-batches group samples of
similar length to limit padding. On GPUs with varlen flash attention, packing is the better choice.

Logits are computed only at the positions that predict a trained token (``lm_head`` on the selected
hidden states), which saves most of the output-layer cost when only actions are trained.

The optimizer step lives behind a tiny engine interface (``backward(loss)``, ``step()``,
``get_lr()``) that matches a DeepSpeed engine, so one can replace :class:`TorchEngine` later (with
DeepSpeed, disable its own gradient-accumulation loss scaling: the loss here is already normalised
over the whole step).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

IGNORE_INDEX = -100


@dataclass
class SFTConfig:
    """Hyper-parameters of :func:`train_sft`. Defaults are tuned for behaviour cloning of the tiny model."""

    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 20
    epochs: float = 2.0
    max_steps: int | None = None  # if set, wins over ``epochs`` (cycling through the data)
    micro_batch_size: int = 1  # rows per forward pass
    grad_accum: int = 1  # micro-batches per optimizer step (the tiny model prefers many small steps)
    max_length: int = 4096  # longer samples are truncated (head kept); also the packed row size
    packing: bool = False
    seed: int = 0
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.95)
    max_grad_norm: float = 1.0
    log_every: int = 10  # optimizer steps between logs (the last step is always logged)
    num_threads: int | None = None  # torch.set_num_threads if set; otherwise left as it is
    bf16: bool = False  # CPU/GPU autocast to bfloat16 (weights stay float32)
    progress: bool = True  # tqdm bar
    time_budget_s: float | None = None  # stop early (logged, ``stopped_early``) once exceeded


class Engine(Protocol):
    """What the loop needs from an optimizer engine (a DeepSpeed engine has the same methods)."""

    def backward(self, loss: torch.Tensor) -> None: ...

    def step(self) -> None: ...

    def get_lr(self) -> list[float]: ...


def cosine_lr(step: int, *, lr: float, min_lr: float, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up from ~0 to ``lr`` over ``warmup_steps``, then cosine decay to ``min_lr``."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


class TorchEngine:
    """AdamW + cosine schedule + gradient clipping; ``step()`` is one optimizer step."""

    def __init__(self, model: torch.nn.Module, cfg: SFTConfig, total_steps: int):
        decay, no_decay = [], []
        for p in {id(p): p for p in model.parameters() if p.requires_grad}.values():
            (decay if p.ndim >= 2 else no_decay).append(p)
        self.params = decay + no_decay
        self.optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": cfg.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=cfg.lr,
            betas=cfg.betas,
            foreach=True,
        )
        self.cfg = cfg
        self.total_steps = total_steps
        self.steps = 0
        self.last_grad_norm = 0.0
        self._set_lr()

    def _set_lr(self) -> None:
        lr = cosine_lr(
            self.steps,
            lr=self.cfg.lr,
            min_lr=self.cfg.min_lr,
            warmup_steps=self.cfg.warmup_steps,
            total_steps=self.total_steps,
        )
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> None:
        if self.cfg.max_grad_norm and self.cfg.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
            self.last_grad_norm = float(norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        self._set_lr()

    def get_lr(self) -> list[float]:
        return [g["lr"] for g in self.optimizer.param_groups]


# --------------------------------------------------------------------------------------- batching


def make_rows(examples: Sequence[dict[str, Any]], max_length: int, packing: bool) -> list[list[int]]:
    """Group example indices into rows: one example per row, or first-fit-decreasing packing."""
    lengths = [min(len(e["input_ids"]), max_length) for e in examples]
    if not packing:
        return [[i] for i in range(len(examples))]
    order = sorted(range(len(examples)), key=lambda i: -lengths[i])
    rows: list[list[int]] = []
    room: list[int] = []
    for i in order:
        for r, free in enumerate(room):
            if lengths[i] <= free:
                rows[r].append(i)
                room[r] -= lengths[i]
                break
        else:
            rows.append([i])
            room.append(max_length - lengths[i])
    return rows


def collate(
    segments: Sequence[Sequence[tuple[Sequence[int], Sequence[int]]]], pad_id: int = 0
) -> dict[str, torch.Tensor]:
    """Build a micro-batch from rows of ``(input_ids, labels)`` segments.

    Returns ``input_ids``, ``labels`` (``-100`` on padding), ``position_ids`` (restarting at 0 per
    segment) and ``attention_mask``: ``None`` when every row is one segment of the same length
    (plain causal attention), else a ``(B, 1, L, L)`` float mask, 0 where a query may attend and the
    dtype minimum elsewhere: causal within a segment, nothing across segments. Padding forms its
    own segment, so no query row is fully masked.
    """
    lens = [sum(len(ids) for ids, _ in row) for row in segments]
    width = max(lens)
    bsz = len(segments)
    input_ids = torch.full((bsz, width), pad_id, dtype=torch.long)
    labels = torch.full((bsz, width), IGNORE_INDEX, dtype=torch.long)
    position_ids = torch.zeros((bsz, width), dtype=torch.long)
    seg_ids = torch.zeros((bsz, width), dtype=torch.long)
    for b, row in enumerate(segments):
        pos = 0
        for s, (ids, labs) in enumerate(row):
            n = len(ids)
            input_ids[b, pos : pos + n] = torch.as_tensor(ids, dtype=torch.long)
            labels[b, pos : pos + n] = torch.as_tensor(labs, dtype=torch.long)
            position_ids[b, pos : pos + n] = torch.arange(n)
            seg_ids[b, pos : pos + n] = s
            pos += n
        if pos < width:  # padding: its own segment
            position_ids[b, pos:] = torch.arange(width - pos)
            seg_ids[b, pos:] = len(row)
    simple = all(len(row) == 1 for row in segments) and len(set(lens)) == 1
    mask = None
    if not simple:
        causal = torch.ones(width, width, dtype=torch.bool).tril()
        allowed = (seg_ids[:, :, None] == seg_ids[:, None, :]) & causal
        mask = torch.zeros(bsz, 1, width, width, dtype=torch.float32)
        mask.masked_fill_(~allowed[:, None], torch.finfo(torch.float32).min)
    return {"input_ids": input_ids, "labels": labels, "position_ids": position_ids, "attention_mask": mask}


def token_losses(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
    """Summed next-token cross-entropy over trained tokens, and their count.

    Runs the decoder, then the output layer only where the next token is trained.
    """
    decoder = model.base_model
    out = decoder(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
    )
    hidden = out.last_hidden_state[:, :-1]
    targets = batch["labels"][:, 1:]
    keep = targets != IGNORE_INDEX
    n = int(keep.sum())
    if n == 0:
        return hidden.sum() * 0.0, 0
    logits = model.get_output_embeddings()(hidden[keep]).float()
    return F.cross_entropy(logits, targets[keep], reduction="sum"), n


# ------------------------------------------------------------------------------------------ train


def _plan_epoch(
    rows: list[list[int]], lengths: list[int], cfg: SFTConfig, rng: random.Random
) -> list[list[list[int]]]:
    """Shuffle rows into micro-batches; unpacked micro-batches hold rows of similar length."""
    order = list(range(len(rows)))
    rng.shuffle(order)
    mbs = cfg.micro_batch_size
    if mbs > 1 and not cfg.packing:
        # sort within windows of 16 micro-batches by length, then shuffle the micro-batches
        win = 16 * mbs
        order = [
            i for w in range(0, len(order), win) for i in sorted(order[w : w + win], key=lambda i: lengths[rows[i][0]])
        ]
    micro = [[rows[i] for i in order[k : k + mbs]] for k in range(0, len(order), mbs)]
    if mbs > 1 and not cfg.packing:
        rng.shuffle(micro)
    return micro


def train_sft(
    model: torch.nn.Module,
    examples: Sequence[dict[str, Any]],
    cfg: SFTConfig,
    on_log: Callable[[dict[str, Any]], None] | None = None,
    engine: Engine | None = None,
) -> dict[str, Any]:
    """Train ``model`` in place on masked examples; returns statistics.

    Logged (``on_log``) every ``cfg.log_every`` optimizer steps and at the end: ``step``, ``epoch``,
    ``loss`` (mean over trained tokens since the previous log), ``lr``, ``grad_norm``,
    ``tokens_per_s`` (non-padding tokens), ``trained_tokens`` (cumulative), ``elapsed_s``.

    Returns: ``steps`` (done), ``planned_steps``, ``stopped_early`` (``time_budget_s`` hit),
    ``epochs``, ``first_loss``, ``final_loss`` (last log window), ``last_epoch_loss``, ``tokens``,
    ``trained_tokens``, ``seconds``, ``tokens_per_s``, ``rows``, ``history`` (the logs), ``config``.
    """
    if not examples:
        raise ValueError("no training examples")
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)

    data: list[tuple[list[int], list[int]]] = []
    for k, e in enumerate(examples):
        ids, labs = list(e["input_ids"])[: cfg.max_length], list(e["labels"])[: cfg.max_length]
        if len(ids) != len(labs):
            raise ValueError(f"example {k}: {len(ids)} input_ids but {len(labs)} labels")
        if all(x == IGNORE_INDEX for x in labs[1:]):
            raise ValueError(f"example {k} has no trained token (after truncation to {cfg.max_length})")
        data.append((ids, labs))
    lengths = [len(ids) for ids, _ in data]
    rows = make_rows(examples=[{"input_ids": d[0]} for d in data], max_length=cfg.max_length, packing=cfg.packing)

    micro_per_epoch = math.ceil(len(rows) / cfg.micro_batch_size)
    steps_per_epoch = max(1, math.ceil(micro_per_epoch / cfg.grad_accum))
    total_steps = cfg.max_steps or max(1, math.ceil(cfg.epochs * steps_per_epoch))
    engine = engine or TorchEngine(model, cfg, total_steps)
    pad_id = int(getattr(getattr(model, "config", None), "pad_token_id", None) or 0)

    def micro_stream():
        epoch = 0
        while True:
            for mb in _plan_epoch(rows, lengths, cfg, rng):
                yield epoch, mb
            epoch += 1

    stream = micro_stream()
    model.train()
    autocast = torch.autocast(device_type=_device_of(model).type, dtype=torch.bfloat16, enabled=cfg.bf16)
    device = _device_of(model)

    history: list[dict[str, Any]] = []
    tokens = trained = 0
    win_loss = 0.0
    win_tok = 0
    epoch_loss: dict[int, list[float]] = {}
    t0 = time.perf_counter()
    t_log, tok_log = t0, 0
    epoch = 0
    bar = tqdm(total=total_steps, desc="sft", disable=not cfg.progress, dynamic_ncols=True, mininterval=2.0)
    stopped_early = False
    done = 0
    for step in range(total_steps):
        batches = []
        for _ in range(cfg.grad_accum):
            epoch, mb = next(stream)
            batches.append(collate([[data[i] for i in row] for row in mb], pad_id))
            tokens += sum(lengths[i] for row in mb for i in row)
        n_step = sum(int((b["labels"][:, 1:] != IGNORE_INDEX).sum()) for b in batches)
        step_loss = 0.0
        for b in batches:
            b = {k: (v.to(device) if v is not None else None) for k, v in b.items()}
            with autocast:
                loss_sum, _ = token_losses(model, b)
            engine.backward(loss_sum / max(1, n_step))
            step_loss += float(loss_sum.detach())
        engine.step()
        trained += n_step
        win_loss += step_loss
        win_tok += n_step
        epoch_loss.setdefault(epoch, [0.0, 0.0])
        epoch_loss[epoch][0] += step_loss
        epoch_loss[epoch][1] += n_step
        bar.update(1)
        done = step + 1
        over_budget = cfg.time_budget_s is not None and time.perf_counter() - t0 > cfg.time_budget_s
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
                "elapsed_s": now - t0,
            }
            history.append(log)
            bar.set_postfix(loss=f"{log['loss']:.3f}", tok_s=f"{log['tokens_per_s']:.0f}")
            if on_log is not None:
                on_log(log)
            win_loss, win_tok, t_log, tok_log = 0.0, 0, now, tokens
        if over_budget and step + 1 < total_steps:
            stopped_early = True
            break
    bar.close()
    seconds = time.perf_counter() - t0
    model.eval()
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
        "tokens_per_s": tokens / max(1e-9, seconds),
        "rows": len(rows),
        "history": history,
        "config": asdict(cfg),
    }


def _device_of(model: torch.nn.Module) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")
