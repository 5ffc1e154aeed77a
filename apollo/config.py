"""Parameters (``params.yaml``) and the artifact layout, relative to the project root.

The root is the current directory (where ``dvc.yaml`` lives), or ``APOLLO_ROOT``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


def project_root() -> Path:
    return Path(os.environ.get("APOLLO_ROOT") or Path.cwd()).resolve()


class ParamsError(ValueError):
    pass


def fast_bf16(device: str | None = None) -> bool:
    """Whether bfloat16 arithmetic is native on ``device`` (``cuda``/``cpu``; default: CUDA when there is
    one): a CUDA GPU that supports it, or a CPU with AVX512-BF16 or AMX-BF16 instructions.

    Elsewhere PyTorch emulates bf16, and it is much slower than fp32. Measured on a 2-core AMD EPYC with
    AVX2 only (2026-12-03): a 512-token SmolLM2-135M prefill 12 s in bf16 against 2.3 s in fp32, and a
    warm-up SFT step under bf16 autocast 354 s (about 10 s on the avx512_bf16 cores where bf16 was made
    the default). ``dtype: auto`` / ``bf16: auto`` in ``params.yaml`` use this."""
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if str(device).startswith("cuda"):
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:  # not Linux: trust PyTorch's own dispatch level
        return torch.backends.cpu.get_cpu_capability() in ("AVX512_BF16", "AMX")
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_dtype(name: str, device: str | None = None) -> str:
    """A weights' dtype name from ``params.yaml``: ``auto`` → ``bfloat16`` where bf16 is native
    (:func:`fast_bf16`), else ``float32``; any other name is returned as is."""
    return ("bfloat16" if fast_bf16(device) else "float32") if name == "auto" else name


def load_params(path: str | Path | None = None) -> dict[str, Any]:
    path = Path(path) if path else project_root() / "params.yaml"
    try:
        with open(path, encoding="utf-8") as fh:
            params = yaml.safe_load(fh) or {}
    except FileNotFoundError as e:
        raise ParamsError(f"{path}: no such params file") from e
    except yaml.YAMLError as e:
        raise ParamsError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(params, dict):
        raise ParamsError(f"{path}: the top level must be a mapping")
    if "sandbox" in params:  # every episode of this process (and its workers) uses these settings
        from apollo.sandbox import configure

        try:
            configure(params["sandbox"])
        except (TypeError, ValueError) as e:
            raise ParamsError(f"{path}: {e}") from e
    return params


def section(params: dict[str, Any], name: str) -> dict[str, Any]:
    if name not in params or not isinstance(params[name], dict):
        raise ParamsError(f"params.yaml: missing section '{name}'")
    return params[name]


def from_section(cls: type[T], d: dict[str, Any] | None, where: str) -> T:
    """The dataclass ``cls`` built from a params mapping ``d``; a key ``cls`` has no field for is an
    error naming ``where`` (e.g. ``"params.yaml: sandbox"``) and the known keys."""
    d = dict(d or {})
    check_keys(d, cls, where)
    return cls(**d)


def check_keys(d: dict[str, Any], cls: type, where: str) -> None:
    """Refuse the keys of ``d`` that the dataclass ``cls`` has no field for (see :func:`from_section`)."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown} (known: {sorted(known)})")


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


@dataclass(frozen=True)
class Paths:
    """Where each artifact lives. Without a cell (``seed`` None) the single-run layout
    (``data/rollouts/train.jsonl`` …); in an experiment cell (:meth:`cell`) every per-seed artifact
    gets its own directory, so DVC caches each (variant, seed) cell on its own:
    ``data/rollouts/<guided|unguided>/s<seed>``, same for ``guidance`` and ``masked``;
    ``data/dataset/<variant>/s<seed>``, ``data/models/<variant>/s<seed>``, ``data/eval/<variant>/s<seed>``.
    The base model (``data/models/base``) is shared by every cell."""

    root: Path
    seed: int | None = None
    rollouts_kind: str = "guided"  # which rollouts this cell reads: guided | unguided
    variant: str | None = None

    @classmethod
    def default(cls) -> Paths:
        return cls(project_root())

    def cell(self, seed: int | None, rollouts_kind: str = "guided", variant: str | None = None) -> Paths:
        return Paths(self.root, seed, rollouts_kind, variant)

    def _per_seed(self, base: Path, kind: str | None) -> Path:
        if self.seed is None:
            return base
        return (base / kind if kind else base) / f"s{self.seed}"

    @property
    def data(self) -> Path: return self.root / "data"
    @property
    def base_model(self) -> Path: return self.data / "models" / "base"
    def model(self, variant: str) -> Path:
        if variant == "base":
            return self.base_model
        d = self.data / "models" / variant
        return d / f"s{self.seed}" if self.seed is not None else d
    @property
    def rollouts(self) -> Path: return self._per_seed(self.data / "rollouts", self.rollouts_kind)
    @property
    def guidance(self) -> Path: return self._per_seed(self.data / "guidance", self.rollouts_kind)
    @property
    def guidance_store(self) -> Path: return self.data / "store" / "guidance.sqlite"
    @property
    def masked(self) -> Path: return self._per_seed(self.data / "masked", self.rollouts_kind)
    @property
    def dataset(self) -> Path:
        return self._per_seed(self.data / "dataset", self.variant) if self.variant else self.data / "dataset"
    def eval(self, variant: str) -> Path:
        d = self.data / "eval" / variant
        return d / f"s{self.seed}" if self.seed is not None else d
    def checkpoints(self, variant: str) -> Path:
        d = self.data / "checkpoints" / variant
        return d / f"s{self.seed}" if self.seed is not None else d
    @property
    def quality(self) -> Path: return self.data / "quality"
    @property
    def experiment(self) -> Path: return self.data / "experiment"
