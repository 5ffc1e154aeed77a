"""Asynchronous SAO vs synchronous GRPO: trained samples per second with long-tailed episode times.

Same compute for both: the same policy, the same number of rollout workers (``--workers``), the same
trainer and batch size, the same countdown sanity tasks; every tool call sleeps a Pareto-distributed
time (``--latency-scale`` × Pareto(``--latency-shape``), capped at ``--latency-cap`` seconds), the
long tail real research tools have. The baseline, **synchronous GRPO** (G rollouts per prompt,
``batch/G`` prompts per step, the learner waits for all of them, the workers idle while it trains),
and **asynchronous SAO** (workers never wait; the learner takes the first ``batch`` finished
rollouts within the staleness bound) run the same number of updates in the same process, one after
the other. Printed: each one's trained samples/s (trained rollouts / wall seconds of the loop, model
load excluded), the ratio SAO / sync GRPO (goal ≥ 2.5×), and the staleness SAO paid for it.

Also printed: the *ideal* ratio for the measured episode durations (:func:`ideal_ratio`: workers /
mean duration over batch / mean makespan of a synchronous batch, list-scheduled; no generation
contention, free updates). It grows with the batch: the slowest of 32 episodes is much further from
the mean than the slowest of 8.

    python benchmarks/bench_async.py                      # data/models/base if built, else a micro model
    python benchmarks/bench_async.py --batch 8 --workers 8 --json out.json
"""

from __future__ import annotations

import argparse
import copy
import heapq
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from apollo.env.sanity import make_tasks
from apollo.rl.sao_loop import LoopConfig, run_loop


def load_policy(path: str):
    """The bootstrapped embedded model when present, else a random micro model (throughput only)."""
    if Path(path, "config.json").exists():
        from transformers import AutoModelForCausalLM, AutoTokenizer

        return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path), path
    from apollo.agent.actions import format_action
    from apollo.models.tiny import make_config, make_model, train_tokenizer

    texts = [t.description for t in make_tasks(50)] + [format_action("", "calc", {"expression": "1+2"})]
    tok = train_tokenizer(texts * 4, vocab_size=500)
    return make_model(make_config(tok, "micro"), seed=0).eval(), tok, "micro (random init)"


def ideal_ratio(durations: list[float], *, workers: int, batch: int, draws: int = 4000, seed: int = 0) -> float:
    """The speed-up asynchrony can give at most for these episode durations: (workers / mean duration)
    over (batch / mean makespan of a synchronous batch), episodes resampled from ``durations`` and the
    batch list-scheduled onto the workers. It ignores generation contention and update time, so the
    measured ratio is below it; a ratio near it means the loop wastes little."""
    if not durations:
        return float("nan")
    rng = random.Random(seed)
    makespans = []
    for _ in range(draws):
        free = [0.0] * workers
        for _ in range(batch):
            t = heapq.heappop(free)
            heapq.heappush(free, t + rng.choice(durations))
        makespans.append(max(free))
    return (workers / statistics.fmean(durations)) / (batch / statistics.fmean(makespans))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="data/models/base")
    ap.add_argument("--steps", type=int, default=10)
    # batch 32 (8 prompts x G = 4): a synchronous step waits for the slowest of 32 episodes, as RL
    # batches of hundreds do; at batch 8 the ideal ratio for this latency tail is only ~2.5x
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--group", type=int, default=4, help="GRPO's G")
    ap.add_argument("--workers", type=int, default=32)
    ap.add_argument("--max-staleness", type=int, default=4)
    ap.add_argument("--latency-scale", type=float, default=0.5)
    ap.add_argument("--latency-shape", type=float, default=1.1)
    ap.add_argument("--latency-cap", type=float, default=20.0)
    ap.add_argument("--max-new-tokens", type=int, default=8,
                    help="per turn; short, so that tool time dominates as it does in research tasks")
    ap.add_argument("--max-batch", type=int, default=None,
                    help="turns decoded together by the policy copy (default: --workers; 1: one turn at a time)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    model, tok, name = load_policy(args.model)
    tasks = make_tasks(64, seed=args.seed)
    base = dict(steps=args.steps, batch_size=args.batch, group_size=args.group, workers=args.workers,
                max_staleness=args.max_staleness, buffer_capacity=args.batch, critic_warmup_steps=0,
                max_new_tokens=args.max_new_tokens, max_turns=3, seed=args.seed, num_threads=1,
                max_batch=args.max_batch or args.workers,
                latency={"dist": "pareto", "scale": args.latency_scale, "shape": args.latency_shape,
                         "cap": args.latency_cap})
    results = {}
    for mode in ("grpo_sync", "sao"):
        res = run_loop(copy.deepcopy(model), tok, tasks, LoopConfig(mode=mode, **base))
        h = res["history"]
        results[mode] = {
            "samples_per_s": res["samples_per_s"], "seconds": res["seconds"], "trained": res["trained_samples"],
            "episode_s_mean": statistics.fmean(s["episode_s"] for s in h),
            "wait_s_mean": statistics.fmean(s["wait_s"] for s in h),
            "update_s_mean": statistics.fmean(s["update_s"] for s in h),
            "staleness_traj_mean": statistics.fmean(s["staleness.traj_mean"] for s in h),
            "staleness_token_max": max(s["staleness.token_max"] for s in h),
            "dropped_stale": res["dropped_stale"], "episode_seconds": res["episode_seconds"],
        }
        print(f"{mode:10s} {res['trained_samples']} rollouts in {res['seconds']:.1f} s = "
              f"{res['samples_per_s']:.3f} samples/s (episode {results[mode]['episode_s_mean']:.2f} s mean, "
              f"learner waited {results[mode]['wait_s_mean']:.2f} s/step, update {results[mode]['update_s_mean']:.2f} s)",
              flush=True)
    ratio = results["sao"]["samples_per_s"] / results["grpo_sync"]["samples_per_s"]
    durations = [d for mode in results for d in results[mode].pop("episode_seconds")]
    ceiling = ideal_ratio(durations, workers=args.workers, batch=args.batch, seed=args.seed)
    print(f"model: {name}; seed {args.seed}; {args.workers} workers, batch {args.batch}, G={args.group}, "
          f"tool latency {args.latency_scale}×Pareto({args.latency_shape}) capped {args.latency_cap} s")
    print(f"SAO async staleness: trajectory mean {results['sao']['staleness_traj_mean']:.2f}, "
          f"token max {results['sao']['staleness_token_max']:.0f}, dropped {results['sao']['dropped_stale']}")
    print(f"trained samples/s, SAO async / synchronous GRPO: {ratio:.2f}x (goal >= 2.5x); the ideal for these "
          f"{len(durations)} episode durations (no contention, free updates): {ceiling:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"ratio": ratio, "ideal_ratio": ceiling, "args": vars(args), "model": name, **results},
                                              indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
