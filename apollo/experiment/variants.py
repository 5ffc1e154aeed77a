"""The variant table (``params.yaml: experiment``) and the experiment's cells.

A *variant* says what a policy is trained on; a *cell* is one (variant, seed). The Apollo ablation,
as the paper defines it:

=========== ================== ============ ===========================================
variant     rollouts           action masks policy
=========== ================== ============ ===========================================
full        guided (annotator) on           masked SFT of the base policy
no_mask     guided             off          SFT on every valid action of the same data
no_human    unguided           on           masked SFT on rollouts without an annotator
untrained   –                  –            the base policy, evaluation only
=========== ================== ============ ===========================================

``dvc.yaml``'s matrices cannot look a variant up by name, so ``experiment`` also lists the variants
per DAG shape (``sft_guided``, ``sft_unguided``: the build matrices; ``trained``: the SFT train
matrix; ``evaluated``: the
evaluate matrix, whatever stage made ``data/models/<variant>/s<seed>``). :func:`check_table`
keeps those lists and the table in step; every experiment stage calls it when it starts. A later
method (APPO, SAO, GRPO …) is a row of the table with ``policy: <its stage>`` and an entry in
``evaluated``; its training stage writes ``data/models/<variant>/s<seed>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ROLLOUT_KINDS = ("guided", "unguided")


class VariantTableError(ValueError):
    """``params.yaml: experiment`` is inconsistent: names the key and what to change."""


@dataclass(frozen=True)
class Variant:
    name: str
    policy: str  # sft (build + train from rollouts) | base (evaluation only) | another training stage
    rollouts: str | None = None  # guided | unguided (sft variants)
    masks: bool = True  # action masks applied when building the training data

    @property
    def trained(self) -> bool:
        return self.policy != "base"


def experiment_section(params: dict[str, Any]) -> dict[str, Any]:
    e = params.get("experiment")
    if not isinstance(e, dict):
        raise VariantTableError("params.yaml: missing section 'experiment' (variants, seeds)")
    return e


def variants(params: dict[str, Any]) -> dict[str, Variant]:
    """The table, in params order; each row checked."""
    table = experiment_section(params).get("variants")
    if not isinstance(table, dict) or not table:
        raise VariantTableError("params.yaml: experiment.variants must map variant names to their settings")
    out = {}
    for name, row in table.items():
        where = f"params.yaml: experiment.variants.{name}"
        if not isinstance(row, dict):
            raise VariantTableError(f"{where}: expected a mapping such as {{rollouts: guided, masks: true}}")
        unknown = set(row) - {"policy", "rollouts", "masks"}
        if unknown:
            raise VariantTableError(f"{where}: unknown key(s) {sorted(unknown)} (policy, rollouts, masks)")
        policy = str(row.get("policy", "sft"))
        rollouts = row.get("rollouts")
        if policy == "sft" and rollouts not in ROLLOUT_KINDS:
            raise VariantTableError(f"{where}.rollouts: '{rollouts}' is not one of {list(ROLLOUT_KINDS)}")
        masks = row.get("masks", True)
        if not isinstance(masks, bool):
            raise VariantTableError(f"{where}.masks: expected true or false, got {masks!r}")
        out[name] = Variant(str(name), policy, rollouts, masks)
    return out


def variant(params: dict[str, Any], name: str) -> Variant:
    table = check_table(params)
    if name not in table:
        raise VariantTableError(f"params.yaml: experiment.variants has no variant '{name}' "
                                f"(variants: {', '.join(table)})")
    return table[name]


def seeds(params: dict[str, Any]) -> list[int]:
    s = experiment_section(params).get("seeds")
    if not isinstance(s, list) or not s or not all(isinstance(x, int) for x in s) or len(set(s)) != len(s):
        raise VariantTableError(f"params.yaml: experiment.seeds must be a list of distinct integers, got {s!r}")
    return s


def check_table(params: dict[str, Any]) -> dict[str, Variant]:
    """The DVC matrix lists agree with the table: ``sft_guided`` / ``sft_unguided`` are exactly the
    sft variants on guided / unguided rollouts, ``evaluated`` every trained variant."""
    e, table = experiment_section(params), variants(params)
    seeds(params)
    expect = {
        "sft_guided": [v.name for v in table.values() if v.policy == "sft" and v.rollouts == "guided"],
        "sft_unguided": [v.name for v in table.values() if v.policy == "sft" and v.rollouts == "unguided"],
        "trained": [v.name for v in table.values() if v.policy == "sft"],
        "evaluated": [v.name for v in table.values() if v.trained],
    }
    for key, names in expect.items():
        got = e.get(key)
        if not isinstance(got, list) or sorted(got) != sorted(names):
            raise VariantTableError(f"params.yaml: experiment.{key} is {got!r} but the variant table gives {names}: "
                                    f"dvc.yaml's matrices read experiment.{key}; list the same variants")
    baseline = e.get("baseline", "untrained")
    if baseline not in table:
        raise VariantTableError(f"params.yaml: experiment.baseline '{baseline}' is not a variant of the table")
    return table


def cells(params: dict[str, Any], only_variants: list[str] | None = None,
          only_seeds: list[int] | None = None) -> list[tuple[str, int]]:
    """(variant, seed) cells of the table, optionally restricted; unknown names fail."""
    table, all_seeds = check_table(params), seeds(params)
    vs = list(only_variants) if only_variants else list(table)
    unknown = [v for v in vs if v not in table]
    if unknown:
        raise VariantTableError(f"variants {unknown} are not in params.yaml: experiment.variants ({', '.join(table)})")
    ss = list(only_seeds) if only_seeds is not None else all_seeds
    bad = [s for s in ss if s not in all_seeds]
    if bad:
        raise VariantTableError(f"seeds {bad} are not in params.yaml: experiment.seeds {all_seeds}")
    return [(v, s) for v in vs for s in ss]


def eval_stage(params: dict[str, Any], variant_name: str, seed: int) -> str:
    """The dvc.yaml address of a cell's evaluation (its upstream stages are the rest of the cell)."""
    v = variant(params, variant_name)
    return f"evaluate_untrained@{seed}" if v.policy == "base" else f"evaluate@{v.name}-{seed}"
