"""LoRA for the one trainer (``lora`` in a train config): low-rank adapters through ``peft``, merged
into the weights when training ends, so every stage after training reads a plain HF checkpoint.

``lora: null`` trains every weight (full fine-tuning). ``lora: {r, alpha, dropout, target_modules}``
freezes the model and trains ``B·A`` (rank ``r``, scaled by ``alpha / r``) beside each named linear
layer (``target_modules``: the module names, e.g. ``[q_proj, k_proj, v_proj, o_proj, gate_proj,
up_proj, down_proj]`` for the Llama/Qwen layout). The adapters are added to the model *in place*
(the caller's model object is the one trained) and merged back *in place* at the end
(``W ← W + (alpha / r)·B·A``, the adapter modules removed, every weight trainable again), so
``save_pretrained`` writes the usual files and the tied input/output embedding (SmolLM2, Qwen2.5
≤ 3B) stays tied: LoRA never adapts the embedding here.

Why and when (measured, docs/results.md#lora): on 2 CPU cores a SmolLM2-135M step on a 1,836-token
row takes 7.07 s with rank-16 adapters on every projection against 8.54 s of full fine-tuning
(``benchmarks/bench_lora.py``: the frozen weights still take part in the forward and in the backward
through the activations; only their weight gradients and optimizer state go), and the warm-up it gave
was worse (87% valid tool calls against 100%): off by default. On GPUs LoRA is what makes a 7B model
fit with ZeRO ≤ 2.
LoRA with ZeRO-3 is refused (the partitioned weights would have to be gathered to merge).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

LORA_FIELDS = ("r", "alpha", "dropout", "target_modules")


@dataclass(frozen=True)
class LoraSpec:
    r: int  # rank of the update B·A
    alpha: float  # the update is scaled by alpha / r
    dropout: float  # dropout on the adapter's input (0: none)
    target_modules: tuple[str, ...]  # names of the linear modules that get an adapter


def lora_spec(value: Any, where: str) -> LoraSpec | None:
    """A :class:`LoraSpec` from a ``lora`` mapping (``None``: full fine-tuning); a bad field is named."""
    if value is None:
        return None
    if isinstance(value, LoraSpec):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}.lora: expected null or a mapping with {list(LORA_FIELDS)}, got {value!r}")
    unknown = sorted(set(value) - set(LORA_FIELDS))
    missing = [f for f in LORA_FIELDS if f not in value]
    if unknown or missing:
        raise ValueError(f"{where}.lora: " + "; ".join(
            ([f"unknown field(s) {unknown}"] if unknown else []) + ([f"missing field(s) {missing}"] if missing else []))
            + f" (fields: {list(LORA_FIELDS)})")
    try:
        r, alpha, dropout = int(value["r"]), float(value["alpha"]), float(value["dropout"])
    except (TypeError, ValueError):
        raise ValueError(f"{where}.lora: r, alpha and dropout must be numbers, got {dict(value)!r}") from None
    if r < 1 or r != float(value["r"]):
        raise ValueError(f"{where}.lora.r must be an integer ≥ 1, got {value['r']!r}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"{where}.lora.dropout must be in [0, 1), got {value['dropout']!r}")
    mods = value["target_modules"]
    if isinstance(mods, str) or not isinstance(mods, (list, tuple)) or not mods or \
            not all(isinstance(m, str) and m for m in mods):
        raise ValueError(f"{where}.lora.target_modules: expected a non-empty list of module names, got {mods!r}")
    return LoraSpec(r=r, alpha=alpha, dropout=dropout, target_modules=tuple(mods))


def has_adapters(model: torch.nn.Module) -> bool:
    from peft.tuners.lora import LoraLayer

    return any(isinstance(m, LoraLayer) for m in model.modules())


def add_adapters(model: torch.nn.Module, spec: LoraSpec, seed: int = 0):
    """Freeze ``model`` and add the adapters in place; returns the handle :func:`merge_adapters` takes.

    ``A`` is initialised from ``seed`` alone (``B`` starts at 0), whatever the caller's RNG state: the
    in-process loop and a DeepSpeed rank start from the same adapters. A target name that matches no
    linear module of the model is refused with the names it has."""
    from peft import LoraConfig, get_peft_model

    linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
    absent = [t for t in spec.target_modules if t not in linear]
    if absent:
        raise ValueError(f"lora.target_modules {absent}: no linear module of this model has that name; "
                         f"its linear modules: {linear}")
    if "lm_head" in spec.target_modules:
        raise ValueError("lora.target_modules: lm_head is not adapted (it is tied to the input embedding in "
                         "SmolLM2 / Qwen2.5; merging would untie it)")
    cfg = LoraConfig(r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                     target_modules=list(spec.target_modules), bias="none")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        handle = get_peft_model(model, cfg)
    if handle.base_model.model is not model:  # peft wraps, it does not copy: the caller's object is trained
        raise RuntimeError("peft did not adapt the model in place")
    return handle


def merge_adapters(handle) -> torch.nn.Module:
    """Merge the adapters into the weights, remove them, make every weight trainable again; returns the
    model (the object :func:`add_adapters` was given)."""
    model = handle.merge_and_unload()
    for p in model.parameters():
        p.requires_grad_(True)
    return model
