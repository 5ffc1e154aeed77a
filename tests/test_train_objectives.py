"""The trainer's pluggable objectives: a policy-gradient step through the one loop moves the
log-probs of positive-advantage tokens up and of negative ones down (dual-clip PPO and SAO), the
SFT objective is the masked cross-entropy, rows without the objective's fields are refused, and the
DeepSpeed rank runs the PG objective from a Parquet dataset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from apollo.data.tokenize import render, tokenize_conversation
from apollo.models.bootstrap import save_model, synthetic_conversations
from apollo.models.tiny import make_config, make_model, train_tokenizer
from apollo.train.batching import collate
from apollo.train.config import train_config
from apollo.train.launch import launch_command
from apollo.train.loop import train
from apollo.train.objectives import PolicyGradientObjective, SFTObjective, make_objective, token_logprobs, token_losses

ROOT = Path(__file__).resolve().parents[1]
CONVS = synthetic_conversations(4, seed=5, steps=(2, 3))


@pytest.fixture(scope="module")
def tok():
    probe = train_tokenizer(["a b"], vocab_size=300)
    return train_tokenizer([render(probe, c) for c in CONVS], vocab_size=600)


@pytest.fixture(scope="module")
def rows(tok):
    """Examples with per-token advantages (+1 on the first half of each row's trained tokens, −1 on
    the second) and rollout log-probs = the initial model's (on-policy)."""
    model = make_model(make_config(tok, "micro"), seed=0).eval()
    out = []
    for c in CONVS:
        ex = tokenize_conversation(tok, c)
        ids, labs = ex["input_ids"], ex["labels"]
        with torch.no_grad():
            lp = token_logprobs(model, collate([[(ids, labs)]]))
        trained = lp.mask[0].nonzero().flatten().tolist()
        adv = [0.0] * len(ids)
        for k, pos in enumerate(trained):
            adv[pos] = 1.0 if k < len(trained) // 2 else -1.0
        out.append({"input_ids": ids, "labels": labs, "advantages": adv, "rollout_logprobs": lp.logp[0].tolist()})
    return out


def _mean_logp(model, rows, sign: float) -> float:
    total = n = 0
    with torch.no_grad():
        for r in rows:
            out = token_logprobs(model.eval(), collate([[(r["input_ids"], r["labels"])]]))
            sel = out.mask[0] & (torch.tensor(r["advantages"]) * sign > 0)
            total, n = total + float(out.logp[0][sel].sum()), n + int(sel.sum())
    return total / n


@pytest.mark.parametrize("loss,args", [("dual_clip_ppo", {}), ("sao", {"eps_low": 0.3, "eps_high": 5.0}),
                                       ("policy_gradient", {})])
def test_pg_step_moves_positive_tokens_up(tok, rows, loss, args):
    model = make_model(make_config(tok, "micro"), seed=0)
    pos0, neg0 = _mean_logp(model, rows, +1), _mean_logp(model, rows, -1)
    cfg, _ = train_config(max_steps=2, grad_accum=len(rows), lr=1e-3, min_lr=1e-3, warmup_steps=0, progress=False,
                          log_every=1)
    stats = train(model, rows, cfg, objective=PolicyGradientObjective(loss, args))
    pos1, neg1 = _mean_logp(model, rows, +1), _mean_logp(model, rows, -1)
    assert pos1 > pos0 + 0.05 and neg1 < neg0 - 0.05, (pos0, pos1, neg0, neg1)
    assert stats["objective"] == "pg" and stats["steps"] == 2
    first = stats["history"][0]
    if loss == "dual_clip_ppo":  # on-policy first step: ratio 1, nothing clipped
        assert first["obj.clip_fraction"] == 0.0 and abs(first["obj.ratio_mean"] - 1.0) < 1e-4
    if loss == "sao":
        assert first["obj.masked_fraction"] == 0.0


def test_sft_objective_is_masked_cross_entropy(tok, rows):
    model = make_model(make_config(tok, "micro"), seed=1).eval()
    r = rows[0]
    batch = collate([[(r["input_ids"], r["labels"])]])
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"]).logits[0, :-1]
        tgt = batch["labels"][0, 1:]
        keep = tgt != -100
        ref = torch.nn.functional.cross_entropy(logits[keep].float(), tgt[keep], reduction="sum")
        loss, _ = SFTObjective()(batch, token_logprobs(model, batch))
        summed, n = token_losses(model, batch)
    assert abs(float(loss) - float(ref)) < 1e-3 * float(ref) and n == int(keep.sum())
    assert float(summed) == float(loss)


def test_objective_fields_are_required(tok, rows):
    model = make_model(make_config(tok, "micro"), seed=0)
    cfg, _ = train_config(max_steps=1, progress=False)
    bare = [{"input_ids": r["input_ids"], "labels": r["labels"]} for r in rows]
    with pytest.raises(ValueError, match="advantages"):
        train(model, bare, cfg, objective=make_objective("pg"))
    with pytest.raises(ValueError, match="unknown policy loss 'ppo'"):
        make_objective("pg", "ppo")
    with pytest.raises(ValueError, match="policy_loss"):
        train_config(objective="pg", policy_loss="ppo")
    with pytest.raises(ValueError, match="policy_loss_args"):  # sao needs eps_low and eps_high
        train_config(objective="pg", policy_loss="sao", policy_loss_args={"eps_low": 0.3})
    _, opts = train_config(objective="pg", policy_loss="sao", policy_loss_args={"eps_low": 0.3, "eps_high": 5.0})
    assert opts.policy_loss_args == {"eps_low": 0.3, "eps_high": 5.0}


@pytest.mark.slow
def test_deepspeed_rank_runs_the_pg_objective(tok, rows, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    save_model(tmp_path / "base", make_model(make_config(tok, "micro"), seed=0), tok)
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({
        "objective": "pg", "policy_loss": "dual_clip_ppo", "policy_loss_args": {"clip_c": 3.0}, "max_steps": 2,
        "grad_accum": 2, "lr": 1e-3, "warmup_steps": 0, "log_every": 1, "progress": False, "save_every": 0}))
    _, opts = train_config()
    cmd = launch_command(opts, ["--dataset", str(tmp_path / "train.parquet"), "--base", str(tmp_path / "base"),
                                "--out", str(tmp_path / "out"), "--config", str(tmp_path / "cfg.yaml"), "--no-mlflow"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APOLLO_", "MLFLOW_", "RANK", "WORLD_SIZE"))}
    env["PYTHONPATH"] = str(ROOT)  # this checkout's apollo, not an installed one
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert cmd[:3] == [sys.executable, "-m", "apollo.train"]
    hist = json.loads((tmp_path / "out" / "train_history.json").read_text())
    assert len(hist) == 2 and hist[0]["obj.clip_fraction"] == 0.0 and "obj.dual_clip_fraction" in hist[1]
    stats = json.loads((tmp_path / "out" / "train_stats.json").read_text())
    assert stats["train.steps"] == 2 and Path(tmp_path / "out" / "model.safetensors").exists()
