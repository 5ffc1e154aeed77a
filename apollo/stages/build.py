"""Build stage: masked trajectories → ``data/dataset/train.parquet`` (+ ``stats.json``).

In an experiment cell: ``data/masked/<rollouts>/s<seed>`` → ``data/dataset/<variant>/s<seed>``,
with the action masks on or off as the variant table says (``no_mask``: off)."""

from __future__ import annotations

import json
from typing import Any

from apollo.config import Paths, section
from apollo.data.build import BuildConfig, build_dataset, write_parquet
from apollo.schema import atomic_write_text, read_trajectories


def strip_action_masks(trajs):
    """The ``no_mask`` ablation: every valid action is trained (the mask decisions are dropped;
    invalid actions never train, and summary masks guard data integrity, so both stay)."""
    for t in trajs:
        for step in t.steps:
            step.mask = None
    return trajs


def run(params: dict[str, Any], tracker=None, paths: Paths | None = None) -> dict[str, Any]:
    from transformers import AutoTokenizer

    paths = paths or Paths.default()
    p = section(params, "build")
    cfg = BuildConfig(
        upsample_react=int(p.get("upsample_react", 7)),
        upsample_summary=int(p.get("upsample_summary", 10)),
        max_length=int(p.get("max_length", 4096)),
    )
    tokenizer = AutoTokenizer.from_pretrained(paths.base_model)
    trajs = read_trajectories(paths.masked / "train.jsonl")
    masks_on = True
    if paths.variant:  # an experiment cell: the variant table says whether action masks apply
        from apollo.experiment.variants import variant

        masks_on = variant(params, paths.variant).masks
    if not masks_on:
        trajs = strip_action_masks(trajs)
    auth: dict[str, int] = {}
    if any(s.guidance for t in trajs for s in t.steps):
        # guidance provenance (issue 13): a trajectory carrying a <real_user> message the store did not
        # authenticate (forged guidance) is left out whole; its later actions were conditioned on it
        from apollo.guidance.auth import check_trajectories, load_key

        key = load_key(paths.guidance_store.parent / "guidance.key", create=False)
        trajs, auth = check_trajectories(trajs, key)
        if auth.get("trajectories.refused"):
            import logging

            logging.getLogger(__name__).warning(
                "build: %d trajectories refused: %d guidance messages without a valid authentication tag",
                auth["trajectories.refused"], auth["guidance.unauthenticated"])
    rows, stats = build_dataset(trajs, tokenizer, cfg)
    stats.update({f"build.{k}": v for k, v in auth.items()})
    if not rows:
        raise ValueError(
            f"{paths.masked / 'train.jsonl'}: no trainable example (every action masked or no trajectory)"
        )
    from apollo.quality import check_dataset

    check_dataset(rows, max_length=cfg.max_length,
                  upsample={"react": cfg.upsample_react, "summary": cfg.upsample_summary},
                  base_counts={"react": stats["build.samples_react"], "summary": stats["build.samples_summary"]},
                  out=paths.quality / "dataset.json", tracker=tracker)
    write_parquet(rows, paths.dataset / "train.parquet")
    atomic_write_text(paths.dataset / "stats.json", json.dumps(stats, indent=2) + "\n")
    stats["build.action_masks"] = int(masks_on)
    if tracker is not None:
        tracker.log_metrics(stats)
    return stats
