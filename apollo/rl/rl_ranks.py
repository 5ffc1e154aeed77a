"""The APPO and SAO loops on DeepSpeed ranks: rank 0 runs the loop (rollouts, advantages, the
staleness queue, checkpoints, the saved policy), every other rank serves the updates
(:meth:`apollo.rl.distributed.DeepSpeedLearner.serve`).

Run by ``python -m apollo.rl.rl_ranks appo|sao --config run.json`` on every rank (the DeepSpeed
launcher or torchrun starts them; :func:`launch`). ``run.json``:

- ``appo``: ``{"params": {...}, "variant", "seed", "base_model", "out", "checkpoint_dir",
  "iterations"}`` — ``params["appo"]`` (with ``appo.learner.backend: deepspeed``) as
  :func:`apollo.rl.appo_loop.run_appo` reads it;
- ``sao``: ``{"loop": {... sao loop fields, learner ...}, "base_model", "out", "out_dir",
  "warm_start_steps", "n_tasks"}`` — :func:`apollo.rl.sao_loop.run_loop` on the countdown sanity
  tasks (the stability environment), the final policy saved to ``out``.

Rank 0 prints ``RESULT {json}`` (the loop's summary) as its last line.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)
MODULE = "apollo.rl.rl_ranks"


def run_rank(program: str, spec: dict[str, Any]) -> dict[str, Any] | None:
    """One rank of the ``appo`` or ``sao`` program; rank 0 returns (and prints) the loop's summary."""
    import torch.distributed as dist

    from apollo.rl.distributed import init_ranks

    rank, _ = init_ranks()
    if program == "appo":
        result = _appo(spec, rank)
    elif program == "sao":
        result = _sao(spec, rank)
    else:
        raise ValueError(f"unknown program {program!r}; known: appo, sao")
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("RESULT " + json.dumps(result, default=float), flush=True)
    return result


def _appo(spec: dict[str, Any], rank: int) -> dict[str, Any] | None:
    from transformers import AutoModelForCausalLM

    from apollo.rl.appo_loop import AppoConfig, appo_objective, run_appo
    from apollo.rl.distributed import DeepSpeedLearner, deepspeed_learner
    from apollo.train.config import loop_config

    cfg = AppoConfig.from_params(spec["params"], spec.get("variant"))
    seed = int(spec.get("seed", 0))
    opts = deepspeed_learner(cfg.learner, "appo.learner")
    if opts is None:
        raise ValueError("appo.learner.backend must be deepspeed to run on ranks")
    if rank == 0:
        return run_appo(cfg, base_model=Path(spec["base_model"]), out=Path(spec["out"]),
                        checkpoint_dir=Path(spec["checkpoint_dir"]), seed=seed,
                        variant=spec.get("variant") or "appo", iterations=spec.get("iterations"))
    # the same engine as rank 0's (rank 0's weights are broadcast at initialisation), then serve
    lm = AutoModelForCausalLM.from_pretrained(spec["base_model"], dtype=torch.float32)
    DeepSpeedLearner(lm, appo_objective(cfg), loop_config(cfg.train, seed), opts).serve()
    return None


def _sao(spec: dict[str, Any], rank: int) -> dict[str, Any] | None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from apollo.rl.distributed import DeepSpeedLearner, deepspeed_learner
    from apollo.rl.sao_loop import _train_cfg, loop_config, policy_objective, run_loop, warm_start

    cfg = loop_config(spec["loop"])
    opts = deepspeed_learner(cfg.learner, "sao.learner")
    if opts is None:
        raise ValueError("sao.learner.backend must be deepspeed to run on ranks")
    lm = AutoModelForCausalLM.from_pretrained(spec["base_model"], dtype=torch.float32)
    if rank != 0:
        DeepSpeedLearner(lm, policy_objective(cfg), _train_cfg(cfg.actor_lr, cfg), opts).serve()
        return None
    from apollo.env.sanity import make_tasks
    from apollo.models.bootstrap import _save_atomic

    tok = AutoTokenizer.from_pretrained(spec["base_model"])
    tasks = make_tasks(int(spec.get("n_tasks", cfg.n_tasks)), seed=cfg.seed)
    warm = {}
    out_dir = Path(spec["out_dir"])
    if int(spec.get("warm_start_steps", 0)) > 0 and not (out_dir / "state.pt").exists():
        warm = warm_start(lm, tok, tasks, steps=int(spec["warm_start_steps"]), seed=cfg.seed)
    result = run_loop(lm, tok, tasks, cfg, out_dir=out_dir, save_every=int(spec.get("save_every", 1)))
    _save_atomic(Path(spec["out"]), lm, tok)
    h = result["history"]
    return {"steps": result["steps"], "policy_version": result["policy_version"], "seconds": result["seconds"],
            "samples_per_s": result["samples_per_s"], "reward_first": h[0]["reward"] if h else 0.0,
            "reward_last": h[-1]["reward"] if h else 0.0, "warm_start": warm,
            "update_s_mean": sum(x["update_s"] for x in h) / max(1, len(h))}


def launch(program: str, spec: dict[str, Any], world_size: int, launcher: str, work: Path,
           timeout: float | None = None) -> dict[str, Any]:
    """Run ``program`` on ``world_size`` ranks of this node (``spec`` written to ``work``); the summary."""
    from apollo.rl.distributed import LearnerOptions, launch_command

    work.mkdir(parents=True, exist_ok=True)
    path = work / f"{program}.run.json"
    path.write_text(json.dumps(spec, default=str))
    args = [program, "--config", str(path)]
    cmd = ([sys.executable, "-m", MODULE, *args] if world_size == 1 else
           launch_command(LearnerOptions("deepspeed", world_size, 2, launcher, "", world_size), args, module=MODULE))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{program} on {world_size} ranks failed ({proc.returncode}):\n{proc.stdout[-6000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"{program}: no RESULT line:\n{proc.stdout[-4000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def main(argv: list[str] | None = None) -> int:
    import argparse

    from apollo.train.cli import setup_rank_logging

    setup_rank_logging()
    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("program", choices=("appo", "sao"))
    ap.add_argument("--config", required=True, help="JSON: the run's arguments (module docstring)")
    ap.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)  # launcher
    args = ap.parse_args(argv)
    run_rank(args.program, json.loads(Path(args.config).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
