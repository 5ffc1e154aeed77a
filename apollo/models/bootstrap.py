"""Bootstrap the embedded tiny model: tokenizer + Qwen2 model, behaviour-cloned on trajectories.

Behaviour cloning goes through the dataset builder (:mod:`apollo.data.build`), the same data path as
masked SFT: one sample per context window the agent saw (with its summary and guidance), loss only
on trainable actions, one sample per kept summarization call, upsampled ×7 / ×10.

:func:`bootstrap_model` writes a complete HF model directory (``model.safetensors``,
``config.json``, ``generation_config.json`` with ``eos = <|im_end|>``, tokenizer files and
``chat_template.jinja``) atomically: everything goes to a temporary directory beside ``out_dir``
which then replaces it by rename, so a reader never sees a half-written model.

:func:`synthetic_conversations` makes agent-like conversations (system prompt listing the tools,
a task description, assistant tool calls, tool observations, occasional ``<real_user>`` guidance)
for tokenizer/trainer tests and benchmarks; the behaviour-cloning data are scripted-agent trajectories.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from apollo.agent.actions import format_action
from apollo.data.build import BuildConfig, build_dataset, sample_conversations
from apollo.data.tokenize import render
from apollo.schema import atomic_write_dir
from apollo.models.tiny import count_parameters, make_config, make_model, train_tokenizer
from apollo.train.config import TrainConfig, loop_config, read_yaml, repo_params_path
from apollo.train.loop import train


def bootstrap_model(
    out_dir: Path | str,
    trajectories: Sequence[Any],
    build: BuildConfig | None = None,
    corpus_texts: Sequence[str] = (),
    preset: str = "tiny",
    sft: TrainConfig | None = None,
    seed: int = 0,
    vocab_size: int = 4096,
    on_log: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Train a tokenizer, make a ``preset`` model, behaviour-clone it on ``trajectories``, save it.

    The training rows are the dataset builder's (``build``, default :class:`BuildConfig` with
    ``max_length = sft.max_length``); the tokenizer is trained on ``corpus_texts`` plus the rendered
    builder samples. ``sft=None`` uses :func:`default_bc_config`.

    Returns stats: ``params``, ``vocab_size``, ``final_loss``, ``first_loss``, ``tokens`` (seen in
    training), ``trained_tokens``, ``examples`` (rows), ``truncated``, ``seconds`` (total),
    ``train_seconds``, ``tokens_per_s``, ``out_dir``, the builder's ``build.*`` counts — and the SFT
    ``history``.
    """
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    trajectories = list(trajectories)
    samples = [s for t in trajectories for s in sample_conversations(t)]
    if not samples:
        raise ValueError(f"bootstrap: no trainable sample in {len(trajectories)} trajectories")

    # The template does not depend on the tokenizer: render with a throwaway one first.
    probe = train_tokenizer(["a b"], vocab_size=300)
    rendered = [render(probe, s.messages) for s in samples]
    tokenizer = train_tokenizer(list(corpus_texts) + rendered, vocab_size=vocab_size)
    t_tok = time.perf_counter() - t0

    build = build or BuildConfig(max_length=sft.max_length if sft is not None else bc_defaults(seed).max_length)
    examples, build_stats = build_dataset(trajectories, tokenizer, build)
    sft = sft or default_bc_config(examples, seed=seed)

    config = make_config(tokenizer, preset)
    model = make_model(config, seed=seed)
    stats = train(model, examples, sft, on_log=on_log)  # the one trainer's loop, torch backend, SFT objective

    _save_atomic(out_dir, model, tokenizer)
    return {
        "params": count_parameters(model),
        "vocab_size": len(tokenizer),
        "preset": preset,
        "first_loss": stats["first_loss"],
        "final_loss": stats["final_loss"],
        "last_epoch_loss": stats["last_epoch_loss"],
        "tokens": stats["tokens"],
        "trained_tokens": stats["trained_tokens"],
        "steps": stats["steps"],
        "stopped_early": stats["stopped_early"],
        "examples": len(examples),
        "truncated": build_stats["build.truncated"],
        **build_stats,
        "tokenizer_seconds": t_tok,
        "train_seconds": stats["seconds"],
        "tokens_per_s": stats["tokens_per_s"],
        "seconds": time.perf_counter() - t0,
        "out_dir": str(out_dir),
        "history": stats["history"],
    }


def bc_defaults(seed: int = 0) -> TrainConfig:
    """The behaviour-cloning loop config of the repository's ``params.yaml`` (``bootstrap.sft``)."""
    doc = read_yaml(repo_params_path())
    return loop_config(doc["bootstrap"]["sft"], seed, where="params.yaml: bootstrap.sft")


def default_bc_config(
    examples: Sequence[dict[str, Any]],
    seed: int = 0,
    target_steps: int = 500,
    token_budget: int = 1_000_000,
    time_budget_s: float | None = None,
    **overrides: Any,
) -> TrainConfig:
    """Behaviour-cloning hyper-parameters for the tiny preset, sized to finish in < 3 min on 2 cores.

    ``params.yaml`` ``bootstrap.sft`` (one conversation per optimizer step, lr 3e-3 → 3e-4, cosine)
    with about ``target_steps`` steps, fewer when that would exceed ``token_budget`` tokens (~10 k
    tokens/s on 2 idle cores for the tiny preset, so ≈100 s), but at least one epoch.
    ``time_budget_s`` is a safety net for a busy machine: training stops there (``stopped_early`` in
    the stats; the run is then no longer reproducible step for step).
    """
    n = len(examples)
    mean_len = sum(len(e["input_ids"]) for e in examples) / max(1, n)
    steps = max(n, min(target_steps, int(token_budget / max(1.0, mean_len))))
    return dataclasses.replace(bc_defaults(seed), **{"max_steps": steps, "time_budget_s": time_budget_s, **overrides})


def save_model(directory: Path | str, model: torch.nn.Module, tokenizer: Any) -> None:
    """Save model (safetensors), config, generation config and tokenizer (with chat template)."""
    directory = Path(directory)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)


def _save_atomic(out_dir: Path, model: torch.nn.Module, tokenizer: Any) -> None:
    atomic_write_dir(out_dir, lambda tmp: save_model(tmp, model, tokenizer))


# ------------------------------------------------------------------------ synthetic conversations

_TOOLS = {
    "create_session": "Create a shell session. Arguments: session_name (str).",
    "run_command": "Run a shell command in a session. Arguments: session_name, command, wait_for_completion (bool).",
    "get_session_output": "Read the latest output of a session (at most 30000 characters). Arguments: session_name.",
    "check_session_idle": "Whether the session's command has finished. Arguments: session_name.",
    "kill_session_processes": "Stop the processes of a session. Arguments: session_name.",
    "open_file": "Show a file with line numbers. Arguments: path, start_line, end_line.",
    "edit_file": "Replace a line range of a file. Arguments: path, start_line, end_line, content.",
    "create_file": "Create a file. Arguments: path, content.",
    "search_dir": "Search a directory for a term. Arguments: term, dir.",
    "list_files": "List the files of a directory. Arguments: path.",
    "think": "Write down a thought. Arguments: thought.",
    "sleep": "Wait (at most 1800 s). Arguments: seconds.",
    "eval": "Evaluate the current output; returns the score and per-metric details.",
    "view_hint": "Show the task hint.",
    "finish": "End the task.",
}
_WORDS = (
    "data filter quality score model token dataset sample threshold metric loss reward script output "
    "training evaluation baseline reference pipeline json line column length duplicate language "
    "perplexity classifier heuristic batch epoch learning rate gradient validation split augment "
    "prompt response answer question instruction format file directory result improve check run"
).split()
_FILES = ["scripts/filter.py", "scripts/train.py", "scripts/eval.sh", "data/train.jsonl", "scripts/augment.py",
          "scripts/reward.py", "README.md", "data/raw/part-0.jsonl", "scripts/config.yaml", "scripts/utils.py"]
_THOUGHTS = [
    "Open the {f} first to see what it does.",
    "Let me look at the data directory.",
    "I will run the script to check the baseline output.",
    "The threshold is too strict; edit {f}.",
    "Check whether the job has finished.",
    "Evaluate the current output.",
    "Search for the scoring function.",
    "Read the session output.",
    "The score improved; finish the task.",
]


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n)).capitalize() + "."


def _paragraph(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    while sum(len(s) + 1 for s in out) < chars:
        out.append(_sentence(rng, rng.randint(5, 14)))
    return " ".join(out)


def _observation(rng: random.Random, chars: int) -> str:
    lines: list[str] = []
    kind = rng.choice(["code", "log", "listing"])
    while sum(len(s) + 1 for s in lines) < chars:
        if kind == "code":
            lines.append(f"{len(lines) + 1}: {rng.choice(['def', 'return', 'if', 'for'])} "
                         f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}({rng.choice(_WORDS)})")
        elif kind == "log":
            lines.append(f"[step {len(lines) * 10}] {rng.choice(_WORDS)}={rng.random():.4f} "
                         f"{rng.choice(_WORDS)}={rng.randint(0, 999)}")
        else:
            lines.append(rng.choice(_FILES))
    return "\n".join(lines)


def _action(rng: random.Random, k: int, last: bool) -> tuple[str, dict[str, Any]]:
    f = rng.choice(_FILES)
    if last:
        return "finish", {}
    tool = rng.choice(["open_file", "run_command", "list_files", "edit_file", "get_session_output",
                       "search_dir", "eval", "create_session", "think"])
    args: dict[str, Any] = {
        "open_file": {"path": f, "start_line": 1, "end_line": rng.choice([40, 80, 120])},
        "run_command": {"session_name": "main", "command": f"python {f} --{rng.choice(_WORDS)} {rng.randint(1, 9)}",
                        "wait_for_completion": rng.random() < 0.5},
        "list_files": {"path": rng.choice(["data", "scripts", "."])},
        "edit_file": {"path": f, "start_line": rng.randint(1, 50), "end_line": rng.randint(51, 60),
                      "content": f"    {rng.choice(_WORDS)} = {rng.random():.2f}\n"},
        "get_session_output": {"session_name": "main"},
        "search_dir": {"term": rng.choice(_WORDS), "dir": "scripts"},
        "eval": {},
        "create_session": {"session_name": "main"},
        "think": {"thought": _sentence(rng, 8)},
    }[tool]
    return tool, args


def synthetic_conversations(
    n: int, seed: int = 0, steps: tuple[int, int] = (6, 12), guidance_prob: float = 0.15
) -> list[list[dict[str, Any]]]:
    """``n`` agent-like conversations shaped like scripted-agent trajectories (for tests/benchmarks).

    System prompt listing the tools (~1.4 k chars), user task (~800 chars), ``steps`` assistant
    turns (thought + ``<tool_call>``), tool observations of 100–600 chars, and with probability
    ``guidance_prob`` per step a ``<real_user>…</real_user>`` user message. The last action is
    ``finish``.
    """
    rng = random.Random(seed)
    tool_list = "\n".join(f"- {name}: {doc}" for name, doc in _TOOLS.items())
    system = (
        "You are a research agent working in a workspace. Think briefly, then call exactly one tool "
        "per turn as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.\n"
        f"Tools:\n{tool_list}"
    )
    convs = []
    for _ in range(n):
        msgs: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": "# Task\n" + _paragraph(rng, 800)},
        ]
        n_steps = rng.randint(*steps)
        for k in range(n_steps):
            last = k == n_steps - 1
            tool, args = _action(rng, k, last)
            thought = rng.choice(_THOUGHTS).format(f=args.get("path", "script"))
            msgs.append({"role": "assistant", "content": format_action(thought, tool, args)})
            if last:
                break
            msgs.append({"role": "tool", "content": _observation(rng, rng.randint(100, 600))})
            if rng.random() < guidance_prob:
                msgs.append({"role": "user", "content": f"<real_user>{_sentence(rng, 10)}</real_user>"})
        convs.append(msgs)
    return convs




def warm_up_model(
    model_dir: Path | str,
    trajectories: Sequence[Any],
    build: BuildConfig,
    sft: TrainConfig,
    on_log: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Behaviour-clone a pretrained HF checkpoint (``model_dir``, e.g. the converted SmolLM2) on
    ``trajectories`` through the dataset builder and the one trainer's loop, in place: the model
    keeps its tokenizer and chat template; the other files of ``model_dir`` (model card,
    ``source.json``) are kept; the directory is replaced atomically.

    Returns the loop's stats (``first_loss``, ``final_loss``, ``steps``, ``tokens``, ``seconds`` …)
    and the builder's ``build.*`` counts.
    """
    import shutil

    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    model_dir = Path(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    examples, build_stats = build_dataset(list(trajectories), tokenizer, build)
    if not examples:
        raise ValueError(f"bootstrap warm-up: no trainable sample in {len(trajectories)} trajectories")
    stats = train(model, examples, sft, on_log=on_log)
    model.eval()

    def fill(tmp: Path) -> None:
        save_model(tmp, model, tokenizer)
        for f in model_dir.iterdir():  # the model card, source.json …: what the conversion wrote
            if f.is_file() and not (tmp / f.name).exists():
                shutil.copy2(f, tmp / f.name)

    atomic_write_dir(model_dir, fill)
    keep = ("first_loss", "final_loss", "last_epoch_loss", "tokens", "trained_tokens", "steps", "stopped_early",
            "tokens_per_s", "history")
    return {**{k: stats[k] for k in keep}, **build_stats, "examples": len(examples),
            "train_seconds": stats["seconds"], "seconds": time.perf_counter() - t0}
