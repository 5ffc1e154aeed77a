"""Dataset building: context windows → loss-masked token sequences → upsampled Parquet.

* **ReAct samples**: one per context window, exactly as the agent saw it (prefix, optional summary,
  verbatim steps, guidance). Labels only on kept assistant action tokens; observations, guidance,
  system/task text and masked actions stay in context without labels.
* **Summary samples**: one per summarization call (its prompt → its summary text), unless the
  call's mask dropped it (an empty summary, or one cut at ``max_new_tokens``: see
  :func:`apollo.schema.summary_mask`); dropped summaries are counted by category, never trained.
* Upsampling: every ReAct sample ×``upsample_react`` (Apollo: 7), every summary sample
  ×``upsample_summary`` (Apollo: 10).

A window whose every action was masked has nothing to train on: it is skipped and counted, never
turned into a silent all-zero example.

This is the one data path from trajectories to training rows: masked SFT (``build`` stage) and the
embedded model's behaviour cloning (:mod:`apollo.stages.bootstrap`) both train on its rows, so a
policy learns from exactly the windows, trainable flags and summary calls it meets at inference.
:func:`sample_conversations` gives the samples before tokenization (e.g. to train a tokenizer).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from apollo.agent.prompt import neutralize, summary_prompt, window_conversation
from apollo.data.tokenize import TruncatedAway, tokenize_conversation
from apollo.schema import Trajectory, summary_mask


@dataclass
class BuildConfig:
    upsample_react: int = 7
    upsample_summary: int = 10
    max_length: int = 4096


def windows(traj: Trajectory) -> list[tuple[int, int, int | None]]:
    """``(first_step, last_step, summary_index)`` of each context window, in order."""
    out: list[tuple[int, int, int | None]] = []
    for s in traj.steps:
        key = (s.context.first_step, s.context.summary_index)
        if out and (out[-1][0], out[-1][2]) == key:
            out[-1] = (out[-1][0], s.index, out[-1][2])
        else:
            out.append((key[0], s.index, key[1]))
    return out


@dataclass
class ConversationSample:
    """One training sample before tokenization: a conversation and which messages carry loss."""

    kind: str  # "react" | "summary"
    messages: list[dict[str, Any]]
    trainable: list[bool]
    first: int  # window (react) or covered steps (summary)
    last: int


def react_conversations(traj: Trajectory) -> tuple[list[ConversationSample], int]:
    """One sample per context window with something to train; returns (samples, windows skipped)."""
    out, skipped = [], 0
    for first, last, summ in windows(traj):
        msgs, trainable = window_conversation(traj, first, last, summ)
        if not any(trainable):
            skipped += 1
            continue
        out.append(ConversationSample("react", msgs, trainable, first, last))
    return out, skipped


def summary_conversations(traj: Trajectory, dropped: Counter | None = None) -> list[ConversationSample]:
    """One sample per kept summarization call; ``dropped`` counts the others by mask category."""
    out = []
    for summ in traj.summaries:
        mask = summ.mask if summ.mask is not None else summary_mask(summ.text, None)
        if mask is not None and not mask.keep:
            if dropped is not None:
                dropped[mask.category or "masked"] += 1
            continue
        msgs = [*summary_prompt(traj, summ), {"role": "assistant", "content": neutralize(summ.text)}]
        out.append(ConversationSample("summary", msgs, [False] * (len(msgs) - 1) + [True],
                                      summ.covers_from, summ.covers_to - 1))
    return out


def sample_conversations(traj: Trajectory) -> list[ConversationSample]:
    """Every sample of a trajectory (ReAct windows, then summary calls), untokenized."""
    return react_conversations(traj)[0] + summary_conversations(traj)


def _tokenized(samples: list[ConversationSample], traj: Trajectory, tokenizer: Any,
               max_length: int, cut: Counter | None = None) -> list[dict[str, Any]]:
    """The samples' rows; a sample whose trained tokens all lie beyond ``max_length`` (its kept
    actions come late in a long window) has nothing to train: it is left out and counted in
    ``cut[kind]`` (without ``cut`` it raises :class:`~apollo.data.tokenize.TruncatedAway`)."""
    rows = []
    for s in samples:
        try:
            tok = tokenize_conversation(tokenizer, s.messages, s.trainable, max_length=max_length)
        except TruncatedAway:
            if cut is None:
                raise
            cut[s.kind] += 1
            continue
        rows.append(_row(tok, s.kind, traj, s.first, s.last))
    return rows


def react_examples(traj: Trajectory, tokenizer: Any, max_length: int,
                   cut: Counter | None = None) -> tuple[list[dict[str, Any]], int]:
    samples, skipped = react_conversations(traj)
    return _tokenized(samples, traj, tokenizer, max_length, cut), skipped


def summary_examples(traj: Trajectory, tokenizer: Any, max_length: int,
                     dropped: Counter | None = None, cut: Counter | None = None) -> list[dict[str, Any]]:
    """One row per kept summary; ``dropped`` counts the others by mask category."""
    return _tokenized(summary_conversations(traj, dropped), traj, tokenizer, max_length, cut)


def _row(tok: dict[str, Any], kind: str, traj: Trajectory, first: int, last: int) -> dict[str, Any]:
    return {
        "input_ids": tok["input_ids"],
        "labels": tok["labels"],
        "kind": kind,
        "trajectory_id": traj.trajectory_id,
        "task_id": traj.task_id,
        "window_first": first,
        "window_last": last,
        "n_tokens": tok["n_tokens"],
        "n_trained": tok["n_trained"],
        "truncated": bool(tok.get("truncated", False)),
        "tokenization": tok.get("method", "incremental"),
    }


def upsample(rows: list[dict[str, Any]], cfg: BuildConfig) -> list[dict[str, Any]]:
    factor = {"react": cfg.upsample_react, "summary": cfg.upsample_summary}
    out = []
    for r in rows:
        n = factor[r["kind"]]
        if n < 1:
            raise ValueError(f"upsampling factor for '{r['kind']}' must be >= 1, got {n}")
        out.extend({**r, "copy_index": k} for k in range(n))
    return out


def build_dataset(trajs: list[Trajectory], tokenizer: Any, cfg: BuildConfig) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    base: list[dict[str, Any]] = []
    skipped = 0
    dropped: Counter = Counter()
    cut: Counter = Counter()
    for t in trajs:
        ex, sk = react_examples(t, tokenizer, cfg.max_length, cut)
        base.extend(ex)
        skipped += sk
        base.extend(summary_examples(t, tokenizer, cfg.max_length, dropped, cut))
    rows = upsample(base, cfg)
    kinds = Counter(r["kind"] for r in base)
    stats = {
        "build.samples_react": kinds.get("react", 0),
        "build.samples_summary": kinds.get("summary", 0),
        "build.rows": len(rows),
        "build.rows_react": kinds.get("react", 0) * cfg.upsample_react,
        "build.rows_summary": kinds.get("summary", 0) * cfg.upsample_summary,
        "build.windows_skipped_all_masked": skipped,
        "build.summaries_masked": sum(dropped.values()),
        **{f"build.summaries_masked.{k}": v for k, v in sorted(dropped.items())},
        "build.tokens": sum(r["n_tokens"] for r in base),
        "build.trained_tokens": sum(r["n_trained"] for r in base),
        "build.truncated": sum(r["truncated"] for r in base),
        "build.truncated_away": sum(cut.values()),  # samples left out: every trained token beyond max_length
        "build.offset_fallbacks": sum(r["tokenization"] != "incremental" for r in base),
    }
    return rows, stats


def write_parquet(rows: list[dict[str, Any]], path) -> None:
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows, schema=pa.schema([
        ("input_ids", pa.list_(pa.int32())),
        ("labels", pa.list_(pa.int32())),
        ("kind", pa.string()),
        ("trajectory_id", pa.string()),
        ("task_id", pa.string()),
        ("window_first", pa.int32()),
        ("window_last", pa.int32()),
        ("n_tokens", pa.int32()),
        ("n_trained", pa.int32()),
        ("truncated", pa.bool_()),
        ("tokenization", pa.string()),
        ("copy_index", pa.int32()),
    ]))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def read_parquet(path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()
