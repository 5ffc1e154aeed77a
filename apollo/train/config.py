"""The trainer's configuration: typed, validated, with no defaults of its own.

Defaults live in ``params.yaml`` only: its ``train`` section is the complete configuration of the
train stage (every field of :class:`TrainConfig` and :class:`RunOptions`), ``bootstrap.sft`` the
complete :class:`TrainConfig` of behaviour cloning. A mapping that lacks a field, or has one that
is not a field, is refused with the field names and where the mapping came from. Callers that give
only a few fields (tests, the CLI with a bare YAML) overlay them on the repository's
``params.yaml`` ``train`` section with :func:`overlay_defaults` / :func:`train_config`.

YAML 1.1 reads ``5e-6`` (no dot) as a string; numeric fields are coerced (or the field is named).
``bf16: auto`` becomes :func:`apollo.config.fast_bf16` (CUDA, or a CPU with native bf16). Batch: ``global_batch_size`` (rows per
optimizer step) = ``micro_batch_size × grad_accum × world_size``; give ``grad_accum`` or
``global_batch_size`` (the other ``null``).
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

OBJECTIVES = ("sft", "pg")
BACKENDS = ("deepspeed", "torch")
LAUNCHERS = ("auto", "python", "deepspeed", "torchrun")


@dataclass
class TrainConfig:
    """Hyper-parameters of the step loop (:func:`apollo.train.loop.train`)."""

    lr: float  # peak learning rate (cosine schedule)
    min_lr: float  # the schedule's floor
    warmup_steps: int  # linear warm-up, optimizer steps
    epochs: float  # passes over the data (``max_steps`` wins when set)
    max_steps: int | None  # optimizer steps; cycles through the data
    micro_batch_size: int  # rows per forward pass
    grad_accum: int  # micro-batches per optimizer step and rank
    max_length: int  # longer samples are truncated (head kept); the packed row size
    packing: bool  # first-fit-decreasing packing of samples into rows
    seed: int  # data order and initialisation (params' top-level ``seed`` unless given)
    weight_decay: float  # AdamW, on matrices only
    betas: tuple[float, float]
    max_grad_norm: float  # 0: no clipping
    log_every: int  # optimizer steps between logs (the last step is always logged)
    num_threads: int | None  # torch.set_num_threads when set
    bf16: bool  # autocast to bfloat16 (``auto`` in params: on with CUDA)
    progress: bool  # tqdm bar on rank 0
    time_budget_s: float | None  # stop early (``stopped_early``) once exceeded
    lora: Any  # null: full fine-tuning; {r, alpha, dropout, target_modules}: LoRA adapters, merged at the end
    #            (a mapping is read into an apollo.train.lora.LoraSpec; see that module)

    def __post_init__(self) -> None:
        from apollo.train.lora import lora_spec

        self.lora = lora_spec(self.lora, "train")


@dataclass
class RunOptions:
    """How the train stage runs the loop: backend, objective, DeepSpeed, launcher, checkpoints."""

    backend: str  # deepspeed | torch (the same loop in-process, no checkpoints)
    objective: str  # sft | pg (policy gradient on per-token advantages, see apollo.train.objectives)
    policy_loss: str  # pg: a name of apollo.rl.losses.POLICY_LOSSES (dual_clip_ppo, sao, ...)
    policy_loss_args: dict[str, Any]  # pg: keyword arguments of that loss (e.g. eps_low, eps_high for sao)
    zero_stage: int  # 0–3
    world_size: int  # ranks in all (with a hostfile: the sum of its slots)
    global_batch_size: int | None  # rows per optimizer step; derives grad_accum when grad_accum is null
    launcher: str  # auto | python | deepspeed | torchrun
    hostfile: str  # DeepSpeed hostfile for multi-node runs (launcher deepspeed)
    ds_config: str  # JSON/YAML deep-merged over the generated DeepSpeed config (tuning knobs)
    save_every: int  # optimizer steps between checkpoints (0: none)
    keep_checkpoints: int
    keep_checkpoints_after: bool  # keep the checkpoints once the model is saved
    checkpoint_dir: str  # "": data/checkpoints/<variant> (stage) or <out>.checkpoints (CLI)


LOOP_FIELDS = {f.name for f in fields(TrainConfig)}
RUN_FIELDS = {f.name for f in fields(RunOptions)}
LOOP_ONLY = {"progress", "log_every", "num_threads", "time_budget_s"}  # do not change the result of a step


def _coerce(mapping: Mapping[str, Any], cls: type, where: str) -> dict[str, Any]:
    """Numbers from strings (YAML ``5e-6``), ``betas`` as a tuple; a wrong type names the field."""
    hints = typing.get_type_hints(cls)
    out = dict(mapping)
    for name, hint in hints.items():
        if name not in out or out[name] is None:
            continue
        v = out[name]
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        kinds = [t for t in (typing.get_args(hint) if union else (hint,)) if t is not type(None)]
        kind = kinds[0] if kinds else None
        if kind in (int, float) and not isinstance(v, bool):
            try:
                num = float(v)
            except (TypeError, ValueError):
                raise ValueError(f"{where}.{name}: expected a number, got {v!r}") from None
            if kind is int and num != int(num):
                raise ValueError(f"{where}.{name}: expected an integer, got {v!r}")
            out[name] = int(num) if kind is int else num
        elif kind is bool and not isinstance(v, bool):
            if name == "bf16" and v == "auto":
                continue
            raise ValueError(f"{where}.{name}: expected true or false, got {v!r}")
        elif kind is str and not isinstance(v, str):
            raise ValueError(f"{where}.{name}: expected a string, got {v!r}")
        elif name == "betas":
            if not isinstance(v, (list, tuple)) or len(v) != 2:
                raise ValueError(f"{where}.betas: expected two numbers, got {v!r}")
            out[name] = (float(v[0]), float(v[1]))
        elif name == "policy_loss_args" and not isinstance(v, dict):
            raise ValueError(f"{where}.policy_loss_args: expected a mapping, got {v!r}")
    return out


def _check_fields(mapping: Mapping[str, Any], required: set[str], allowed: set[str], where: str) -> None:
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {unknown}; known: {sorted(allowed)}")
    missing = sorted(required - set(mapping))
    if missing:
        raise ValueError(f"{where}: missing field(s) {missing} (every field is set in params.yaml; "
                         "there are no defaults in code)")


def loop_config(mapping: Mapping[str, Any], seed: int | None = None, *, where: str = "params.yaml: train") -> TrainConfig:
    """A :class:`TrainConfig` from a complete mapping (``seed`` fills the field when the mapping has none)."""
    m = dict(mapping)
    if "seed" not in m and seed is not None:
        m["seed"] = seed
    _check_fields(m, LOOP_FIELDS, LOOP_FIELDS, where)
    m = _coerce(m, TrainConfig, where)
    if m["bf16"] == "auto":
        from apollo.config import fast_bf16

        m["bf16"] = fast_bf16()
    if m.get("lora") is not None:
        from apollo.train.lora import lora_spec

        m["lora"] = lora_spec(m["lora"], where)  # the error names where the mapping came from
    cfg = TrainConfig(**m)
    for name in ("micro_batch_size", "max_length", "log_every"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{where}.{name} must be ≥ 1, got {getattr(cfg, name)}")
    if cfg.grad_accum is not None and cfg.grad_accum < 1:
        raise ValueError(f"{where}.grad_accum must be ≥ 1, got {cfg.grad_accum}")
    if cfg.max_steps is not None and cfg.max_steps < 1:
        raise ValueError(f"{where}.max_steps must be ≥ 1 or null, got {cfg.max_steps}")
    return cfg


def resolve_config(train: Mapping[str, Any], seed: int = 0, world_size: int | None = None, *,
                   where: str = "params.yaml: train") -> tuple[TrainConfig, RunOptions]:
    """Split a complete ``train`` mapping into :class:`TrainConfig` and :class:`RunOptions`, validate,
    and derive ``grad_accum`` from ``global_batch_size`` (``world_size`` overrides the field)."""
    train = dict(train)
    train.pop("variant", None)
    _check_fields(train, (LOOP_FIELDS - {"seed"}) | RUN_FIELDS, LOOP_FIELDS | RUN_FIELDS, where)
    run = _coerce({k: v for k, v in train.items() if k in RUN_FIELDS}, RunOptions, where)
    opts = RunOptions(**run)
    if world_size is not None:
        opts.world_size = world_size
    if opts.backend not in BACKENDS:
        raise ValueError(f"{where}.backend must be one of {BACKENDS}, not {opts.backend!r}")
    if opts.objective not in OBJECTIVES:
        raise ValueError(f"{where}.objective must be one of {OBJECTIVES}, not {opts.objective!r}")
    if opts.launcher not in LAUNCHERS:
        raise ValueError(f"{where}.launcher must be one of {LAUNCHERS}, not {opts.launcher!r}")
    if not 0 <= opts.zero_stage <= 3:
        raise ValueError(f"{where}.zero_stage must be 0..3, not {opts.zero_stage}")
    if opts.world_size < 1:
        raise ValueError(f"{where}.world_size must be ≥ 1, not {opts.world_size}")
    if train.get("lora") is not None and opts.backend == "deepspeed" and opts.zero_stage == 3:
        raise ValueError(f"{where}.lora with zero_stage 3 is not supported (the partitioned weights would have to be "
                         "gathered to merge the adapters): use zero_stage 0-2, LoRA's optimizer state is small")
    if opts.objective == "pg":
        from apollo.rl.losses import get_policy_loss

        try:
            fn = get_policy_loss(opts.policy_loss)
        except ValueError as e:
            raise ValueError(f"{where}.policy_loss: {e}") from None
        try:  # the keywords must fit the loss (checked now, not at the first step)
            inspect.signature(fn).bind(None, None, None, None, **opts.policy_loss_args)
        except TypeError as e:
            raise ValueError(f"{where}.policy_loss_args {opts.policy_loss_args} do not fit "
                             f"{opts.policy_loss}{inspect.signature(fn)}: {e}") from None
    loop = {k: v for k, v in train.items() if k in LOOP_FIELDS}
    gbs = opts.global_batch_size
    if loop.get("grad_accum") is None:
        if not gbs:
            raise ValueError(f"{where}: set grad_accum or global_batch_size")
        per_step = int(float(loop["micro_batch_size"])) * opts.world_size
        if gbs % per_step:
            raise ValueError(f"{where}.global_batch_size {gbs} is not a multiple of micro_batch_size × world_size "
                             f"= {per_step}")
        loop["grad_accum"] = gbs // per_step
    cfg = loop_config(loop, seed, where=where)
    if gbs and gbs != cfg.micro_batch_size * cfg.grad_accum * opts.world_size:
        raise ValueError(f"{where}.global_batch_size {gbs} ≠ micro_batch_size × grad_accum × world_size = "
                         f"{cfg.micro_batch_size * cfg.grad_accum * opts.world_size}")
    return cfg, opts


# -------------------------------------------------------------------------- params.yaml defaults


def repo_params_path() -> Path:
    """The repository's ``params.yaml`` (beside the ``apollo`` package)."""
    return Path(__file__).resolve().parents[2] / "params.yaml"


def read_yaml(path: str | Path) -> Any:
    import yaml

    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def repo_train_section(path: str | Path | None = None) -> dict[str, Any]:
    """The ``train`` section of ``params.yaml`` (the repository's unless ``path``)."""
    doc = read_yaml(path or repo_params_path()) or {}
    if not isinstance(doc, dict) or not isinstance(doc.get("train"), dict):
        raise ValueError(f"{path or repo_params_path()}: no 'train' section")
    return dict(doc["train"])


def overlay_defaults(overrides: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``overrides`` over ``base`` (default: the repository's ``params.yaml`` ``train``). Giving
    ``global_batch_size`` without ``grad_accum`` lets the former derive the latter."""
    out = dict(repo_train_section() if base is None else base)
    if "global_batch_size" in overrides and "grad_accum" not in overrides:
        out["grad_accum"] = None
    out.update(overrides)
    return out


def train_config(seed: int = 0, world_size: int | None = None, **overrides: Any) -> tuple[TrainConfig, RunOptions]:
    """:func:`resolve_config` of ``overrides`` over the repository's ``params.yaml`` ``train`` section."""
    return resolve_config(overlay_defaults(overrides), seed, world_size)


def load_train_section(path: str | Path) -> tuple[dict[str, Any], int]:
    """``(complete train mapping, seed)`` from a YAML/JSON file: a params file (its ``train`` section
    and ``seed``) or a bare mapping of some fields, overlaid on the repository's defaults."""
    doc = read_yaml(path) or {}
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a mapping")
    seed = int(doc.get("seed", 0))
    if isinstance(doc.get("train"), dict):
        return dict(doc["train"]), seed
    return overlay_defaults({k: v for k, v in doc.items() if k != "seed"}), seed
