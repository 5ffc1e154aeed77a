"""The hf engine on the evaluate stage's episodes: continuous batching and the prefix KV cache.

Three arms, one run, the same test-task jobs and seeds, each through the stage's own runtime
(:func:`apollo.stages.common.run_jobs`, episodes as coroutines, generation in worker threads):

* **lone** (the baseline, what the stages did before): ``max_batch 1``, no prefix cache, 2 episodes
  in flight — every call prefills its whole conversation and decodes on its own;
* **cache**: the same plus the prefix KV cache (a turn prefills only what is new since the last);
* **batched**: the prefix cache and ``max_batch = workers`` with ``--workers`` episodes in flight:
  concurrent calls decode together (:mod:`apollo.engines.hf_batch`).

Sampling diverges between arms (a different schedule, different tool timings), so the arms run
different numbers of steps: the comparison is steps/s and generated tokens/s, with the counts
printed. ``prefill`` = input tokens the engine had to process (input − prefix-cache hits).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_hf_batch.py [--model data/models/base]
        [--tasks 6] [--samples 1] [--max-steps 8] [--workers 6]
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path


def run_arm(model: Path, jobs, tasks, *, workers: int, max_batch: int, cache_tokens: int, max_steps: int,
            max_new_tokens: int) -> dict:
    from apollo.agent.react import AgentConfig
    from apollo.engines.hf import HFEngine
    from apollo.stages.common import aepisode, run_jobs

    eng = HFEngine(model, temperature=0.7, max_new_tokens=max_new_tokens, max_context=3800,
                   max_batch=max_batch, prefix_cache_tokens=cache_tokens)
    cfg = AgentConfig(max_steps=max_steps, context_tokens=3800, command_timeout_s=20.0, max_output_chars=1500)

    async def one(job):
        return await aepisode(tasks[job.task_id], eng, job, cfg)

    t0 = time.perf_counter()
    trajs = run_jobs(jobs, one, workers, f"bench[batch={max_batch} cache={cache_tokens > 0}]")
    wall = time.perf_counter() - t0
    steps = sum(len(t.steps) for t in trajs)
    gen = sum(len(s.tokens.token_ids or []) for t in trajs for s in t.steps if s.tokens)
    out = {"workers": workers, "max_batch": max_batch, "prefix_cache": cache_tokens > 0, "episodes": len(trajs),
           "steps": steps, "gen_tokens": gen, "wall_s": round(wall, 1), "steps_per_s": steps / wall,
           "gen_tokens_per_s": gen / wall, **{k: v for k, v in eng.stats.items()},
           "mean_score": sum(t.final_score for t in trajs) / len(trajs)}
    if eng.batcher is not None and eng.batcher.forwards:
        out["mean_batch"] = round(eng.batcher.rows / eng.batcher.forwards, 2)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="data/models/base")
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from apollo.env.tasks import list_tasks
    from apollo.stages.common import RolloutJob

    model = Path(args.model)
    if not (model / "config.json").exists():
        raise SystemExit(f"{model}: no model (run the bootstrap stage, or pass --model)")
    tasks = {t.task_id: t for t in list_tasks(split="test")[: args.tasks]}
    jobs = [RolloutJob(tid, s, 500_000 + i * 100 + s, "test") for i, tid in enumerate(tasks) for s in range(args.samples)]
    common = dict(max_steps=args.max_steps, max_new_tokens=args.max_new_tokens)
    arms = {
        "lone (baseline)": run_arm(model, jobs, tasks, workers=2, max_batch=1, cache_tokens=0, **common),
        "cache": run_arm(model, jobs, tasks, workers=2, max_batch=1, cache_tokens=200_000, **common),
        "batched": run_arm(model, jobs, tasks, workers=args.workers, max_batch=args.workers, cache_tokens=200_000,
                           **common),
    }
    base = arms["lone (baseline)"]
    print(f"\n{len(jobs)} episodes ({args.tasks} test tasks x {args.samples}), <= {args.max_steps} steps, model {model}")
    print("| arm | in flight | steps | gen tokens | prefill tokens | wall s | steps/s | tokens/s | vs baseline (steps/s) | mean batch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, a in arms.items():
        print(f"| {name} | {a['workers']} | {a['steps']} | {a['gen_tokens']} | {a['prefill_tokens']} | {a['wall_s']} | "
              f"{a['steps_per_s']:.2f} | {a['gen_tokens_per_s']:.0f} | {a['steps_per_s'] / base['steps_per_s']:.2f}x | "
              f"{a.get('mean_batch', '-')} |")
    if args.json:
        Path(args.json).write_text(json.dumps(arms, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
