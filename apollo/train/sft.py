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
``get_lr()``, optionally ``loss(batch)``) that a DeepSpeed engine adapter also implements
(:mod:`apollo.train.ds_sft`); the loss handed to ``backward`` is already normalised over the whole
optimizer step, so an engine must not scale it again for gradient accumulation.

Data parallelism. With a :class:`DataParallel` of ``world_size`` W, an optimizer step consumes
``W × grad_accum`` micro-batches of one deterministic stream (every rank plans the same stream from
``cfg.seed``) and rank r trains micro-batches ``r·grad_accum … (r+1)·grad_accum − 1`` of them. Every
rank knows the trained-token count of the whole step without communication, so the loss it
back-propagates is ``local summed loss / trained tokens of the step``: the *sum* of the ranks'
gradients is exactly the single-process gradient of the same global batch (an engine that averages
gradients over ranks multiplies by W). Only the logged loss (and the time-budget decision) needs one
scalar all-reduce per step.

Resuming. ``on_step(step, state)`` receives after every optimizer step a small JSON-able ``state``
(step, stream position, token counters, loss windows, history); passing it back as ``resume=``
continues the run exactly where it was (the caller restores model, optimizer and schedule).
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
    """What the loop needs from an optimizer engine (a DeepSpeed engine has the same methods).

    An engine may also define ``loss(batch) -> (summed loss, trained tokens)`` (the forward pass must
    go through a DeepSpeed engine's ``forward``); without it the loop calls :func:`token_losses`.
    """

    def backward(self, loss: torch.Tensor) -> None: ...

    def step(self) -> None: ...

    def get_lr(self) -> list[float]: ...


@dataclass
class DataParallel:
    """This process's place among data-parallel ranks; the default is a single process.

    Subclasses with ``world_size > 1`` implement :meth:`all_reduce_sum` (a collective: every rank
    calls it at the same point).
    """

    rank: int = 0
    world_size: int = 1

    def all_reduce_sum(self, values: Sequence[float]) -> list[float]:
        if self.world_size > 1:
            raise NotImplementedError("DataParallel.all_reduce_sum needs a process group")
        return [float(v) for v in values]


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

    Returns ``input_ids``, ``labels`` (``-100`` on padding and on each segment's first token, which
    no position of its own segment predicts), ``position_ids`` (restarting at 0 per
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
            labels[b, pos] = IGNORE_INDEX  # a sample's first token is never predicted (not even from its neighbour)
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
    if n == 0:  # a zero that still reaches every parameter (data-parallel engines expect gradients)
        return model.get_output_embeddings()(hidden[:, :1]).float().sum() * 0.0, 0
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


def prepare_examples(
    examples: Sequence[dict[str, Any]], max_length: int
) -> tuple[list[tuple[list[int], list[int]]], list[int], list[int]]:
    """Truncate to ``max_length`` and check; returns ``(input_ids, labels)`` pairs, their lengths and
    their trained-token counts (labels after the first position that are not ``-100``)."""
    if not examples:
        raise ValueError("no training examples")
    data: list[tuple[list[int], list[int]]] = []
    trained: list[int] = []
    for k, e in enumerate(examples):
        ids, labs = list(e["input_ids"])[:max_length], list(e["labels"])[:max_length]
        if len(ids) != len(labs):
            raise ValueError(f"example {k}: {len(ids)} input_ids but {len(labs)} labels")
        n = sum(1 for x in labs[1:] if x != IGNORE_INDEX)
        if n == 0:
            raise ValueError(f"example {k} has no trained token (after truncation to {max_length})")
        data.append((ids, labs))
        trained.append(n)
    return data, [len(ids) for ids, _ in data], trained


class MicroBatchStream:
    """The endless, deterministic stream of ``(epoch, micro-batch)`` over epochs of shuffled rows.

    ``position`` counts the micro-batches taken. A fresh stream (same rows, same ``cfg``) advanced by
    :meth:`skip` to a saved position continues exactly like the original: epoch plans are replayed
    from ``cfg.seed``, nothing but the position needs saving.
    """

    def __init__(self, rows: list[list[int]], lengths: list[int], cfg: SFTConfig):
        self.rows, self.lengths, self.cfg = rows, lengths, cfg
        self.position = 0
        self._rng = random.Random(cfg.seed)
        self._it = self._generate()

    def _generate(self):
        epoch = 0
        while True:
            for mb in _plan_epoch(self.rows, self.lengths, self.cfg, self._rng):
                yield epoch, mb
            epoch += 1

    def __iter__(self) -> MicroBatchStream:
        return self

    def __next__(self) -> tuple[int, list[list[int]]]:
        item = next(self._it)
        self.position += 1
        return item

    def skip(self, n: int) -> None:
        for _ in range(n):
            next(self)


def plan_steps(n_rows: int, cfg: SFTConfig, world_size: int = 1) -> tuple[int, int]:
    """``(steps_per_epoch, total_steps)`` for ``n_rows`` rows on ``world_size`` ranks."""
    micro_per_epoch = math.ceil(n_rows / cfg.micro_batch_size)
    steps_per_epoch = max(1, math.ceil(micro_per_epoch / (cfg.grad_accum * world_size)))
    total = cfg.max_steps or max(1, math.ceil(cfg.epochs * steps_per_epoch))
    return steps_per_epoch, total


def train_sft(
    model: torch.nn.Module,
    examples: Sequence[dict[str, Any]],
    cfg: SFTConfig,
    on_log: Callable[[dict[str, Any]], None] | None = None,
    engine: Engine | None = None,
    *,
    parallel: DataParallel | None = None,
    resume: dict[str, Any] | None = None,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Train ``model`` in place on masked examples; returns statistics.

    Logged (``on_log``) every ``cfg.log_every`` optimizer steps and at the end: ``step``, ``epoch``,
    ``loss`` (mean over trained tokens since the previous log), ``lr``, ``grad_norm``,
    ``tokens_per_s`` (non-padding tokens of all ranks), ``trained_tokens`` (cumulative, all ranks),
    ``elapsed_s``. With ``parallel`` every rank calls this with the same examples and config; logs
    and results are identical on all ranks.

    ``on_step(step, state)`` is called after every optimizer step (``state``: see the module
    docstring; ``state["planned_steps"]`` is the run's length); ``resume=state`` continues from it
    (the caller has restored the model, the engine's optimizer and schedule, and the RNG state;
    the loop does not reseed then).

    Returns: ``steps`` (done), ``planned_steps``, ``stopped_early`` (``time_budget_s`` hit),
    ``epochs``, ``first_loss``, ``final_loss`` (last log window), ``last_epoch_loss``, ``tokens``,
    ``trained_tokens``, ``seconds`` and ``tokens_per_s`` (this call only), ``rows``,
    ``resumed_from_step``, ``world_size``, ``history`` (the logs, resumed ones included), ``config``.
    """
    par = parallel or DataParallel()
    world, rank, accum = par.world_size, par.rank, cfg.grad_accum
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    if resume is None:
        torch.manual_seed(cfg.seed)

    data, lengths, n_trained = prepare_examples(examples, cfg.max_length)
    rows = make_rows(examples=[{"input_ids": d[0]} for d in data], max_length=cfg.max_length, packing=cfg.packing)
    steps_per_epoch, total_steps = plan_steps(len(rows), cfg, world)
    engine = engine or TorchEngine(model, cfg, total_steps)
    loss_fn = getattr(engine, "loss", None) or (lambda b: token_losses(model, b))
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

    model.train()
    t0 = time.perf_counter()
    elapsed0 = float(st["elapsed_s"])
    t_log, tok_log, tok_start = t0, tokens, tokens
    epoch = 0
    bar = tqdm(total=total_steps, initial=resumed_from, desc="sft", dynamic_ncols=True, mininterval=2.0,
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
                loss_sum, _ = loss_fn(b)
            engine.backward(loss_sum / max(1, n_step))
            local_loss += float(loss_sum.detach())
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
            }
            history.append(log)
            bar.set_postfix(loss=f"{log['loss']:.3f}", tok_s=f"{log['tokens_per_s']:.0f}")
            if on_log is not None:
                on_log(log)
            win_loss, win_tok, t_log, tok_log = 0.0, 0, now, tokens
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
