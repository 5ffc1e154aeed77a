"""Generate the mini task suite: ``python -m apollo.env.generate [--out DIR]``.

The suite is a list of ``(task_id, family, split, seed)`` instances (:data:`SUITE`); generation is
deterministic, so the committed ``apollo/env/mini_suite/`` can be checked byte-for-byte.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from apollo.env.families import FAMILIES

DEFAULT_OUT = Path(__file__).resolve().parent / "mini_suite"
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
SUITE: list[Instance] = [inst for spec in SUITE_SPEC for inst in _instances(*spec)]


def generate_suite(out: Path = DEFAULT_OUT, instances: list[Instance] | None = None) -> list[Path]:
    """(Re)write every instance under ``out/<split>/<task_id>/``; returns the task dirs.

    Only ``out/train``, ``out/test`` and ``out/suite.json`` are replaced.
    """
    instances = SUITE if instances is None else instances
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
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="suite root (default: apollo/env/mini_suite)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    dirs = generate_suite(args.out)
    print(f"wrote {len(dirs)} tasks to {args.out} in {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
