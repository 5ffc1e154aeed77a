"""Generate the mini task suite: ``python -m apollo.env.generate [--out DIR] [--seed N]``.

The suite is a list of ``(task_id, family, split, seed)`` instances (:func:`suite_instances`);
generation is deterministic in ``seed`` (params.yaml ``suite.seed``), byte for byte. The suite is an
artifact, not source: the DVC stage ``suite`` (:mod:`apollo.stages.suite`) writes it to
``data/suite/`` in InnovatorBench's layout, and every stage that reads tasks depends on it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from apollo.env.families import FAMILIES

DEFAULT_OUT = Path("data") / "suite"
SPLITS = ("train", "test")


@dataclass(frozen=True)
class Instance:
    task_id: str
    family: str
    split: str
    seed: int


def _instances(family: str, prefix: str, n_train: int, n_test: int, seed0: int) -> list[Instance]:
    out = [Instance(f"{prefix}-train-{i:02d}", family, "train", seed0 + i) for i in range(1, n_train + 1)]
    out += [Instance(f"{prefix}-test-{i:02d}", family, "test", seed0 + 500 + i) for i in range(1, n_test + 1)]
    return out


# (family, prefix, train count, test count, seed base): Apollo's 18 train tasks and InnovatorBench's
# 20 test tasks per domain. Seeds of existing ids never change, so adding instances keeps the others.
SUITE_SPEC: tuple[tuple[str, str, int, int, int], ...] = (
    ("data_construction", "dc", 4, 4, 3000),
    ("data_filtering", "df", 3, 3, 1000),
    ("data_augmentation", "da", 3, 5, 4000),
    ("loss_design", "ld", 2, 3, 2000),
    ("reward_design", "rd", 3, 2, 5000),
    ("scaffold_construction", "sc", 3, 3, 6000),
)
# Seed strides between suite seeds: instance seeds stay below the bootstrap demonstrations' 50_000+.
SEED_STRIDE = 10_000


def suite_instances(seed: int = 0) -> list[Instance]:
    """Apollo's 18 train and InnovatorBench's 20 test instances; ``seed`` shifts every instance seed."""
    if seed < 0:
        raise ValueError(f"suite seed must be >= 0, got {seed}")
    shift = 0 if seed == 0 else 100_000 + seed * SEED_STRIDE  # seed 0 keeps the documented seeds
    return [Instance(i.task_id, i.family, i.split, i.seed + shift)
            for spec in SUITE_SPEC for i in _instances(*spec)]


SUITE: list[Instance] = suite_instances(0)


def generate_suite(out: Path = DEFAULT_OUT, instances: list[Instance] | None = None, *,
                   seed: int = 0) -> list[Path]:
    """(Re)write every instance under ``out/<split>/<task_id>/``; returns the task dirs.

    ``instances`` defaults to :func:`suite_instances` of ``seed``. Only ``out/train``,
    ``out/test`` and ``out/suite.json`` are replaced.
    """
    instances = suite_instances(seed) if instances is None else instances
    out = Path(out)
    for split in SPLITS:
        if (out / split).exists():
            shutil.rmtree(out / split)
    dirs = []
    for inst in instances:
        task_dir = out / inst.split / inst.task_id
        task_dir.mkdir(parents=True)
        FAMILIES[inst.family].generate(task_dir, inst.task_id, inst.split, inst.seed)
        dirs.append(task_dir)
    manifest = [
        {"task_id": i.task_id, "family": i.family, "domain": FAMILIES[i.family].DOMAIN, "split": i.split,
         "seed": i.seed}
        for i in instances
    ]
    (out / "suite.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return dirs


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="suite root (default: data/suite)")
    ap.add_argument("--seed", type=int, default=0, help="suite seed (params.yaml suite.seed)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    dirs = generate_suite(args.out, seed=args.seed)
    print(f"wrote {len(dirs)} tasks to {args.out} in {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
