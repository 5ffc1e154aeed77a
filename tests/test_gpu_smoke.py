"""infra/gpu/smoke.sh --cpu end to end (2 CPU gloo ranks, the tiny preset, small counts), so the GPU
smoke script cannot rot before a GPU runs it: SFT on 2 ranks (ZeRO-2), APPO with its update on 2 ranks
(rollouts on rank 0, in-process hf engine), SAO with its policy step on 2 ranks and weight publishes.
~2.5 min on 2 cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_smoke_script_runs_on_two_cpu_ranks(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_",
                                                                     "MLFLOW_", "APOLLO_PARENT"))}
    env["PYTHON"] = sys.executable
    p = subprocess.run([str(ROOT / "infra" / "gpu" / "smoke.sh"), "--cpu", "--out", str(tmp_path)], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-6000:]
    rows = {r["step"]: r for r in json.loads((tmp_path / "smoke.json").read_text())}
    assert list(rows) == ["sft", "appo", "sao"] and all(r["ranks"] == 2 for r in rows.values())
    assert rows["sft"]["what"].startswith("4 steps ZeRO-2")
    assert json.loads((tmp_path / "sft" / "train_stats.json").read_text())["train.world_size"] == 2
    appo = rows["appo"]["summary"]
    assert appo["appo.iterations"] == 1 and (tmp_path / "appo" / "model.safetensors").exists()
    sao = rows["sao"]["summary"]
    assert sao["steps"] == 3 and sao["policy_version"] == 3  # every update published its weights
    assert (tmp_path / "sao" / "model.safetensors").exists()
    table = (tmp_path / "smoke.md").read_text()
    assert "| sft | 2 |" in table and "| appo | 2 |" in table and "| sao | 2 |" in table
    assert "FAILED" not in table
