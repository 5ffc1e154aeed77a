"""Masked SFT on DeepSpeed (CPU ranks through the DeepSpeed launcher): rank-count invariance,
kill + resume, ZeRO-3 gathered save, HF-format output, the train stage with MLflow.

Tolerances (measured on 2 CPU cores, micro model, fp32):
- 2 ranks × accum 1 vs 1 rank × accum 2, ZeRO-2, 40 steps: max |Δloss| ≈ 3e-7 (bit-identical for
  the first steps; tolerance 1e-5); vs the plain in-process PyTorch loop ≈1e-7 (tolerance 1e-4).
- SIGKILL after a checkpoint, then resume: identical to the uninterrupted run (tolerance 1e-6).
- ZeRO-3 vs ZeRO-2: another reduction order and grad-norm precision, ≈1e-6 (tolerance 1e-4).
How vLLM loads this output format is checked in tests/test_tiny_model.py (the same
``_save_atomic`` writes both).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from apollo.data.tokenize import render, tokenize_conversation
from apollo.models.bootstrap import save_model, synthetic_conversations
from apollo.models.tiny import make_config, make_model, train_tokenizer
from apollo.train.batching import collate
from apollo.train.config import overlay_defaults, resolve_config, train_config
from apollo.train.ds_config import build_ds_config, read_overlay
from apollo.train.launch import hostfile_slots, launch_command
from apollo.train.loop import train as train_sft
from tests.presets import TINY_TRAIN


def DSOptions(**overrides):  # noqa: N802 - the run options of params.yaml's train section, a few overridden
    return train_config(**{**TINY_TRAIN, **overrides})[1]


def SFTConfig(**overrides):  # noqa: N802 - the loop config of params.yaml's train section, a few overridden
    return train_config(**{**TINY_TRAIN, **overrides})[0]

ROOT = Path(__file__).resolve().parents[1]
STEPS = 40
BASE_CFG = {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 2, "max_steps": STEPS, "micro_batch_size": 1,
            "log_every": 1, "progress": False, "zero_stage": 2, "save_every": 5, "keep_checkpoints": 2,
            "max_length": 1024, "bf16": False}  # fp32: the tolerances above (params.yaml trains SmolLM2 in bf16 autocast)


# ------------------------------------------------------------------------------------- fast checks


def test_resolve_config_defaults_and_batch():
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    cfg, opts = resolve_config(params["train"], seed=3)  # the defaults are params.yaml's, nothing else
    assert (cfg.lr, cfg.min_lr, cfg.epochs, cfg.seed) == (params["train"]["lr"], params["train"]["min_lr"], 1.0, 3)
    assert cfg.grad_accum == params["train"]["grad_accum"] and opts.zero_stage == params["train"]["zero_stage"]
    cfg, opts = resolve_config(overlay_defaults({"global_batch_size": 64, "micro_batch_size": 2}), world_size=8)
    assert cfg.grad_accum == 4
    cfg, _ = resolve_config(overlay_defaults({"grad_accum": 8, "lr": 5e-6}))  # real-model values: kept as given
    assert (cfg.grad_accum, cfg.lr) == (8, 5e-6)
    with pytest.raises(ValueError, match="multiple"):
        resolve_config(overlay_defaults({"global_batch_size": 10}), world_size=4)
    with pytest.raises(ValueError, match="unknown"):
        resolve_config(overlay_defaults({"zero_stag": 2}))
    with pytest.raises(ValueError, match="0..3"):
        resolve_config(overlay_defaults({"zero_stage": 4}))
    with pytest.raises(ValueError, match=r"missing field\(s\) \['warmup_steps'\]"):  # no defaults in code
        resolve_config({k: v for k, v in params["train"].items() if k != "warmup_steps"})


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "infra" / "deepspeed").glob("*.json")))
def test_ds_config_templates(name):
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    overlay = read_overlay(ROOT / "infra" / "deepspeed" / name)
    stage = overlay["zero_optimization"]["stage"]
    cfg, opts = train_config(zero_stage=stage, grad_accum=4, lr=1e-5, bf16=True)
    conf = build_ds_config(cfg, opts, world_size=8, overlay=overlay)
    assert conf["train_batch_size"] == 32 and conf["bf16"]["enabled"] and "_comment" not in conf
    DeepSpeedZeroConfig(**conf["zero_optimization"])  # known keys, valid values
    if "optimizer" in conf:  # hyper-parameters filled in from the fields
        assert conf["optimizer"]["params"]["lr"] == 1e-5
    other = (stage + 1) % 4
    with pytest.raises(ValueError, match="stage"):
        build_ds_config(cfg, train_config(zero_stage=other, grad_accum=4)[1], 8, overlay)
    with pytest.raises(ValueError, match="train_batch_size"):
        build_ds_config(cfg, opts, 8, {**overlay, "train_batch_size": 7})


def test_launch_commands_and_manifests():
    py = sys.executable
    assert launch_command(DSOptions(), ["--x"]) == [py, "-m", "apollo.train", "--x"]
    cmd = launch_command(DSOptions(world_size=2), ["--x"], master_port=29999)
    assert cmd == [py, "-m", "deepspeed.launcher.runner", "--master_port", "29999", "--num_gpus", "2",
                   "--module", "apollo.train", "--x"]
    hostfile = ROOT / "infra" / "hostfile.example"
    assert hostfile_slots(hostfile) == 16
    cmd = launch_command(DSOptions(world_size=16, hostfile=str(hostfile)), [])
    assert "--hostfile" in cmd
    cmd = launch_command(DSOptions(world_size=2, launcher="torchrun"), ["--x"], master_port=29999)
    assert cmd[1:3] == ["-m", "torch.distributed.run"] and cmd[-3:] == ["-m", "apollo.train", "--x"]
    with pytest.raises(ValueError, match="slots"):
        launch_command(DSOptions(world_size=8, hostfile=str(hostfile)), [])
    for f in (ROOT / "infra" / "k8s").glob("*.yaml"):
        doc = yaml.safe_load(f.read_text())
        assert doc["kind"] in {"Job", "PyTorchJob"} and "apollo.train\n" in f.read_text()


def test_packed_sample_first_token_is_not_trained():
    a = ([5, 6, 7], [5, 6, 7])
    b = ([8, 9], [8, 9])  # a label on the first token would be "predicted" from the other sample
    batch = collate([[a, b]])
    assert batch["labels"][0].tolist() == [-100, 6, 7, -100, 9]


# ----------------------------------------------------------------------------- DeepSpeed launches


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A micro base model and a 16-conversation dataset."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path_factory.mktemp("ds")
    convs = synthetic_conversations(16, seed=3, steps=(3, 6))
    probe = train_tokenizer(["a b"], vocab_size=300)
    tok = train_tokenizer([render(probe, c) for c in convs], vocab_size=800)
    rows = [tokenize_conversation(tok, c) for c in convs]
    pq.write_table(pa.Table.from_pylist([{"input_ids": r["input_ids"], "labels": r["labels"]} for r in rows]),
                   d / "train.parquet")
    save_model(d / "base", make_model(make_config(tok, "micro"), seed=0), tok)
    return d


def _trainer_args(work: Path, name: str, cfg: dict) -> list[str]:
    (work / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    return ["--dataset", str(work / "train.parquet"), "--base", str(work / "base"), "--out", str(work / name),
            "--config", str(work / f"{name}.yaml"), "--no-mlflow"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APOLLO_", "MLFLOW_", "RANK", "LOCAL_RANK",
                                                                     "WORLD_SIZE", "MASTER_"))}
    env["TOKENIZERS_PARALLELISM"] = "false"
    env["PYTHONPATH"] = str(ROOT)  # the ranks import this checkout's apollo (the run's cwd is a temp dir)
    return env


def _train(work: Path, name: str, cfg: dict, world: int, launcher: str = "auto", timeout: float = 900) -> dict:
    cmd = launch_command(DSOptions(world_size=world, launcher=launcher), _trainer_args(work, name, cfg))
    proc = subprocess.Popen(cmd, cwd=work, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own process group: a timeout ends every rank
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out[-8000:]
    return json.loads((work / name / "train_stats.json").read_text())


def _history(work: Path, name: str) -> list[float]:
    return [h["loss"] for h in json.loads((work / name / "train_history.json").read_text())]


def _max_weight_diff(a: Path, b: Path) -> float:
    from transformers import AutoModelForCausalLM

    ma, mb = AutoModelForCausalLM.from_pretrained(a), AutoModelForCausalLM.from_pretrained(b)
    return max((x - y).abs().max().item() for x, y in zip(ma.state_dict().values(), mb.state_dict().values()))


@pytest.fixture(scope="module")
def ref2(work):
    """The reference: 2 ranks × accum 1, ZeRO-2, checkpoints every 5 steps (deleted at the end)."""
    stats = _train(work, "ref2", {**BASE_CFG, "grad_accum": 1}, world=2)
    assert stats["train.world_size"] == 2 and stats["train.steps"] == STEPS
    assert not (work / "ref2.checkpoints").exists()  # removed after success
    return work / "ref2"


@pytest.mark.slow
def test_two_ranks_match_one_rank(work, ref2):
    stats = _train(work, "one", {**BASE_CFG, "grad_accum": 2}, world=1)  # same global batch of 2 rows
    assert stats["train.world_size"] == 1 and stats["train.global_batch_size"] == 2
    one, two = _history(work, "one"), _history(work, "ref2")
    assert len(one) == len(two) == STEPS
    assert max(abs(a - b) for a, b in zip(one, two)) <= 1e-5
    assert two[-1] < two[0] - 1.0  # it learns
    assert _max_weight_diff(work / "one", ref2) <= 1e-5
    # and the same as the plain PyTorch loop (the loss code is shared; only the engine differs)
    from apollo.data.build import read_parquet
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(work / "base")
    keys = {"lr", "min_lr", "warmup_steps", "max_steps", "micro_batch_size", "log_every", "progress", "max_length"}
    st = train_sft(plain, read_parquet(work / "train.parquet"),
                   SFTConfig(**{k: v for k, v in BASE_CFG.items() if k in keys}, grad_accum=2))
    assert max(abs(h["loss"] - b) for h, b in zip(st["history"], two)) <= 1e-4


@pytest.mark.slow
def test_sigkill_then_resume_matches_uninterrupted(work, ref2):
    cfg = {**BASE_CFG, "grad_accum": 1}
    ckpt = work / "kill.checkpoints"
    cmd = launch_command(DSOptions(world_size=2), _trainer_args(work, "kill", cfg))
    log = open(work / "kill.log", "w")
    proc = subprocess.Popen(cmd, cwd=work, env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 900
    try:
        while not (ckpt / "latest").exists():
            assert proc.poll() is None, "the run ended before its first checkpoint"
            assert time.time() < deadline
            time.sleep(0.01)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and both ranks
        proc.wait()
    killed_at = int((ckpt / "latest").read_text().strip().removeprefix("step"))
    assert not (work / "kill").exists() and 5 <= killed_at < STEPS

    stats = _train(work, "kill", cfg, world=2)  # the same command again: resumes
    assert killed_at <= stats["train.resumed_from_step"] < STEPS
    assert stats["train.steps"] == STEPS
    ref, resumed = _history(work, "ref2"), _history(work, "kill")
    assert len(resumed) == STEPS and max(abs(a - b) for a, b in zip(ref, resumed)) <= 1e-6
    assert _max_weight_diff(work / "kill", ref2) <= 1e-6
    assert not ckpt.exists()


@pytest.mark.slow
def test_saved_model_loads_with_transformers(work, ref2):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from apollo.data.build import read_parquet
    from apollo.train.objectives import token_losses

    tok = AutoTokenizer.from_pretrained(ref2)
    model = AutoModelForCausalLM.from_pretrained(ref2).eval()
    base = AutoModelForCausalLM.from_pretrained(work / "base").eval()
    assert tok.chat_template and model.generation_config.eos_token_id == tok.eos_token_id
    row = read_parquet(work / "train.parquet")[0]
    batch = collate([[(row["input_ids"], row["labels"])]])
    with torch.no_grad():
        (trained, n), (untrained, _) = token_losses(model, batch), token_losses(base, batch)
        out = model.generate(torch.tensor([row["input_ids"][:64]]), max_new_tokens=4, do_sample=False)
    assert n > 0 and float(trained) < float(untrained)
    assert out.shape[1] > 64
    stats = json.loads((ref2 / "train_stats.json").read_text())
    assert stats["train.trained_tokens"] > 0 and stats["train.tokens_per_s"] > 0


@pytest.mark.slow
def test_zero3_gathered_save_and_resume(work, ref2):
    cfg = {**BASE_CFG, "grad_accum": 1, "zero_stage": 3, "ds_config": str(ROOT / "infra/deepspeed/zero3.json"),
           "keep_checkpoints_after": True}
    _train(work, "z3", cfg, world=2, launcher="torchrun")  # torchrun: the launcher of infra/k8s/sft-pytorchjob.yaml
    first = _history(work, "z3")
    assert max(abs(a - b) for a, b in zip(first, _history(work, "ref2"))) <= 1e-4
    assert _max_weight_diff(work / "z3", ref2) <= 1e-4  # the gathered ZeRO-3 weights are the model
    assert (work / "z3.checkpoints" / "latest").read_text() == f"step{STEPS - 5:08d}"
    stats = _train(work, "z3", cfg, world=2, launcher="torchrun")  # same run again: resumes from the kept checkpoint
    assert stats["train.resumed_from_step"] == STEPS - 5
    assert max(abs(a - b) for a, b in zip(first, _history(work, "z3"))) <= 1e-6


@pytest.mark.slow
def test_train_stage_runs_deepspeed_and_logs(work, tmp_path, monkeypatch):
    import shutil

    from apollo.config import Paths
    from apollo.stages import train as train_stage
    from apollo.tracking import stage_run

    paths = Paths(tmp_path)
    paths.dataset.mkdir(parents=True)
    shutil.copy(work / "train.parquet", paths.dataset / "train.parquet")
    shutil.copytree(work / "base", paths.base_model)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the stage's child imports this checkout's apollo (cwd: a temp dir)
    monkeypatch.delenv("APOLLO_PARENT_RUN_ID", raising=False)
    params = {"seed": 0, "train": overlay_defaults({  # the stage reads a complete train section
        "lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 1, "epochs": 1, "max_steps": 6, "micro_batch_size": 2,
        "grad_accum": 1, "max_length": 1024, "log_every": 2, "save_every": 3, "progress": False})}
    with stage_run("train@sft") as run:
        summary = train_stage.run(params, run, paths, variant="sft")
    assert summary["train.steps"] == 6 and summary["train.world_size"] == 1 and summary["train.zero_stage"] == 2
    assert (paths.model("sft") / "model.safetensors").exists()
    assert not (paths.data / "checkpoints" / "sft").exists()
    db = sqlite3.connect(tmp_path / "mlflow.db")
    rows = db.execute("select key, step from metrics where run_uuid=?", (run.run_id,)).fetchall()
    keys = {k for k, _ in rows}
    assert {"train.loss", "train.lr", "train.tokens_per_s", "train.trained_tokens", "train.final_loss"} <= keys
    assert sorted(s for k, s in rows if k == "train.loss") == [2, 4, 6]


@pytest.fixture(scope="module", autouse=True)
def _report(work):  # noqa: PT004 - prints the measured differences for the record (pytest -s)
    yield
    names = [n for n in ("ref2", "one", "kill", "z3") if (work / n / "train_history.json").exists()]
    if "ref2" in names:
        ref = _history(work, "ref2")
        for n in names[1:]:
            print(f"\n[deepspeed_sft] max |loss - ref2| {n}: {max(abs(a - b) for a, b in zip(ref, _history(work, n))):.3g}")


@pytest.mark.slow
def test_lora_deepspeed_rank(work):
    """LoRA on a DeepSpeed rank (ZeRO-2): the adapters train and merge before the save (a plain checkpoint
    whose only moved weights are the adapted projections), as the in-process loop trains them."""
    from apollo.data.build import read_parquet
    from transformers import AutoModelForCausalLM

    lora = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
    cfg = {**BASE_CFG, "grad_accum": 2, "max_steps": 10, "lr": 1e-2, "min_lr": 1e-2, "warmup_steps": 0, "lora": lora}
    stats = _train(work, "lora", cfg, world=1)
    assert stats["train.steps"] == 10
    base, out = (AutoModelForCausalLM.from_pretrained(work / p).state_dict() for p in ("base", "lora"))
    assert list(out) == list(base)
    moved = {k for k in out if not torch.equal(out[k], base[k])}
    assert moved and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in moved), sorted(moved)
    plain = AutoModelForCausalLM.from_pretrained(work / "base")
    keys = {"lr", "min_lr", "warmup_steps", "max_steps", "micro_batch_size", "log_every", "progress", "max_length",
            "lora"}
    st = train_sft(plain, read_parquet(work / "train.parquet"),
                   SFTConfig(**{k: v for k, v in cfg.items() if k in keys}, grad_accum=2))
    assert max(abs(h["loss"] - b) for h, b in zip(st["history"], _history(work, "lora"))) <= 1e-4
    assert st["history"][-1]["loss"] < st["history"][0]["loss"]
    assert max((v - out[k]).abs().max().item() for k, v in plain.state_dict().items()) <= 1e-4
