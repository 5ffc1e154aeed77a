"""From examples to micro-batches: truncation and checks, rows (packing), a deterministic stream,
collation with block-diagonal attention.

Examples are ``{"input_ids": [...], "labels": [...]}`` (``-100`` = not trained) as built by
:mod:`apollo.data` / :func:`apollo.data.tokenize.tokenize_conversation`, optionally with per-token
float fields an objective needs (e.g. ``advantages``, ``rollout_logprobs`` for policy gradient),
aligned with ``input_ids``.

Rows. Each micro-batch is made of *rows*; a row holds one sample or, with ``packing=True``, several
samples packed first-fit-decreasing into ``max_length`` tokens. Packed samples never see each
other: ``position_ids`` restart at 0 for every sample and the attention mask is a 4D block-diagonal
causal mask (additive float, which both the eager and the SDPA attention of transformers accept).
A micro-batch whose rows are single samples of equal length needs no mask at all, so it takes
SDPA's ``is_causal`` fast path.

Packing is *off* in params: on CPU the SDPA kernel cannot skip masked blocks, so a packed row costs
``max_length**2`` attention instead of ``sum(len_i**2)``, and conversations of agent trajectories
(a few thousand tokens each) nearly fill a row anyway. Unpacked micro-batches group samples of
similar length to limit padding. On GPUs with varlen flash attention, packing is the better choice.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import torch

from apollo.train.config import TrainConfig

IGNORE_INDEX = -100
Example = tuple[list[int], list[int], dict[str, list[float]]]


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


def collate(segments: Sequence[Sequence[tuple]], pad_id: int = 0) -> dict[str, torch.Tensor | None]:
    """Build a micro-batch from rows of ``(input_ids, labels)`` or ``(input_ids, labels, fields)`` segments.

    Returns ``input_ids``, ``labels`` (``-100`` on padding and on each segment's first token, which
    no position of its own segment predicts), ``position_ids`` (restarting at 0 per segment),
    ``attention_mask``: ``None`` when every row is one segment of the same length (plain causal
    attention), else a ``(B, 1, L, L)`` float mask, 0 where a query may attend and the dtype minimum
    elsewhere: causal within a segment, nothing across segments. Padding forms its own segment, so no
    query row is fully masked. Per-token float ``fields`` become float32 ``[B, L]`` tensors (0 on padding).
    """
    lens = [sum(len(seg[0]) for seg in row) for row in segments]
    width = max(lens)
    bsz = len(segments)
    input_ids = torch.full((bsz, width), pad_id, dtype=torch.long)
    labels = torch.full((bsz, width), IGNORE_INDEX, dtype=torch.long)
    position_ids = torch.zeros((bsz, width), dtype=torch.long)
    seg_ids = torch.zeros((bsz, width), dtype=torch.long)
    names = sorted({k for row in segments for seg in row if len(seg) > 2 for k in seg[2]})
    extra = {k: torch.zeros((bsz, width), dtype=torch.float32) for k in names}
    for b, row in enumerate(segments):
        pos = 0
        for s, seg in enumerate(row):
            ids, labs = seg[0], seg[1]
            n = len(ids)
            input_ids[b, pos : pos + n] = torch.as_tensor(ids, dtype=torch.long)
            labels[b, pos : pos + n] = torch.as_tensor(labs, dtype=torch.long)
            labels[b, pos] = IGNORE_INDEX  # a sample's first token is never predicted (not even from its neighbour)
            position_ids[b, pos : pos + n] = torch.arange(n)
            seg_ids[b, pos : pos + n] = s
            for k in names:
                extra[k][b, pos : pos + n] = torch.as_tensor(seg[2][k], dtype=torch.float32)
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
    return {"input_ids": input_ids, "labels": labels, "position_ids": position_ids, "attention_mask": mask, **extra}


def prepare_examples(examples: Sequence[dict[str, Any]], max_length: int,
                     token_fields: Sequence[str] = ()) -> tuple[list[Example], list[int], list[int]]:
    """Truncate to ``max_length`` and check; returns ``(input_ids, labels, fields)`` triples, their
    lengths and their trained-token counts (labels after the first position that are not ``-100``).
    ``token_fields`` must be present in every example, one float per token."""
    if not examples:
        raise ValueError("no training examples")
    data: list[Example] = []
    trained: list[int] = []
    for k, e in enumerate(examples):
        ids, labs = list(e["input_ids"])[:max_length], list(e["labels"])[:max_length]
        if len(ids) != len(labs):
            raise ValueError(f"example {k}: {len(ids)} input_ids but {len(labs)} labels")
        extra: dict[str, list[float]] = {}
        for name in token_fields:
            if e.get(name) is None:
                raise ValueError(f"example {k}: no '{name}' (the objective needs one value per token)")
            vals = list(e[name])
            if len(vals) != len(e["input_ids"]):
                raise ValueError(f"example {k}: {len(vals)} {name} for {len(e['input_ids'])} input_ids")
            extra[name] = [float(v) for v in vals[:max_length]]
        n = sum(1 for x in labs[1:] if x != IGNORE_INDEX)
        if n == 0:
            raise ValueError(f"example {k} has no trained token (after truncation to {max_length})")
        data.append((ids, labs, extra))
        trained.append(n)
    return data, [len(d[0]) for d in data], trained


def _plan_epoch(rows: list[list[int]], lengths: list[int], cfg: TrainConfig,
                rng: random.Random) -> list[list[list[int]]]:
    """Shuffle rows into micro-batches; unpacked micro-batches hold rows of similar length."""
    order = list(range(len(rows)))
    rng.shuffle(order)
    mbs = cfg.micro_batch_size
    if mbs > 1 and not cfg.packing:
        # sort within windows of 16 micro-batches by length, then shuffle the micro-batches
        win = 16 * mbs
        order = [i for w in range(0, len(order), win)
                 for i in sorted(order[w : w + win], key=lambda i: lengths[rows[i][0]])]
    micro = [[rows[i] for i in order[k : k + mbs]] for k in range(0, len(order), mbs)]
    if mbs > 1 and not cfg.packing:
        rng.shuffle(micro)
    return micro


class MicroBatchStream:
    """The endless, deterministic stream of ``(epoch, micro-batch)`` over epochs of shuffled rows.

    ``position`` counts the micro-batches taken. A fresh stream (same rows, same ``cfg``) advanced by
    :meth:`skip` to a saved position continues exactly like the original: epoch plans are replayed
    from ``cfg.seed``, nothing but the position needs saving.
    """

    def __init__(self, rows: list[list[int]], lengths: list[int], cfg: TrainConfig):
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


def plan_steps(n_rows: int, cfg: TrainConfig, world_size: int = 1) -> tuple[int, int]:
    """``(steps_per_epoch, total_steps)`` for ``n_rows`` rows on ``world_size`` ranks."""
    micro_per_epoch = math.ceil(n_rows / cfg.micro_batch_size)
    steps_per_epoch = max(1, math.ceil(micro_per_epoch / (cfg.grad_accum * world_size)))
    total = cfg.max_steps or max(1, math.ceil(cfg.epochs * steps_per_epoch))
    return steps_per_epoch, total
