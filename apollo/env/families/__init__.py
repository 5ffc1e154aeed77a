"""Task families: each module writes task instances in InnovatorBench's on-disk format.

A family module exposes ``FAMILY``, ``DOMAIN``, ``PREFIX`` and
``generate(task_dir: Path, task_id: str, split: str, seed: int) -> None``.
Add a family by writing such a module and listing it in :data:`FAMILIES`.
"""

from __future__ import annotations

from types import ModuleType

from apollo.env.families import (
    data_augmentation,
    data_construction,
    data_filtering,
    loss_design,
    reward_design,
    scaffold_construction,
)

FAMILIES: dict[str, ModuleType] = {
    m.FAMILY: m
    for m in (data_construction, data_filtering, data_augmentation, loss_design, reward_design, scaffold_construction)
}

__all__ = ["FAMILIES"]
