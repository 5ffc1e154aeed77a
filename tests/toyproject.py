"""A small DVC project (tests/toy: four stages, one foreach) in a git repo under tmp, run with the
real flow code (flows/, tasks/ copied in, apollo from this checkout)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "tests" / "toy"


def make_toy(tmp: Path) -> tuple[Path, dict[str, str]]:
    proj = tmp / "toy"
    proj.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("flows", "tasks", "infra"):
        shutil.copytree(ROOT / name, proj / name, ignore=ignore)
    for f in ("toy_stage.py", "dvc.yaml", "params.yaml"):
        shutil.copy(TOY / f, proj / f)
    shutil.copy(TOY / "gitignore.txt", proj / ".gitignore")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "APOLLO_", "PREFECT_", "DVC_"))}
    env.update(PYTHONPATH=str(ROOT), PREFECT_HOME=str(tmp / "prefect"), TOKENIZERS_PARALLELISM="false",
               MLFLOW_TRACKING_URI=f"sqlite:///{proj / 'mlflow' / 'mlflow.db'}",
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
               GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1",
               PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120")
    run(["git", "init", "-q", "-b", "main"], proj, env)
    run([sys.executable, "-m", "dvc", "init", "-q"], proj, env)
    run([sys.executable, "-m", "dvc", "config", "core.analytics", "false"], proj, env)
    run(["git", "add", "-A"], proj, env)
    run(["git", "commit", "-qm", "toy"], proj, env)
    return proj, env


def run(cmd, cwd, env, timeout=600, check=True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert p.returncode == 0, f"{cmd} failed ({p.returncode}):\n{p.stdout[-4000:]}\n{p.stderr[-6000:]}"
    return p


def set_param(proj: Path, key: str, value) -> None:
    f = proj / "params.yaml"
    params = yaml.safe_load(f.read_text())
    node = params
    parts = key.split(".")
    for p in parts[:-1]:
        node = node[p]
    node[parts[-1]] = value
    f.write_text(yaml.safe_dump(params, sort_keys=False))


def lock_params(proj: Path, stage: str) -> dict:
    lock = yaml.safe_load((proj / "dvc.lock").read_text())
    return lock["stages"][stage]["params"]["params.yaml"]
