"""Which train tasks give APPO a learning signal? Per train task, the final scores of ``--episodes``
sampled episodes of a policy at each ``--temperatures`` value, and whether its GRPO group would be
mixed (not every episode the same score: a flat group has zero advantage and trains nothing).

    .venv/bin/python benchmarks/appo_task_calibration.py [--model data/models/base] \
        [--temperatures 0.7 1.0] [--episodes 6] [--tasks dc-train-01 …]

The episodes use params.yaml's ``appo`` agent budget (``max_steps``, ``context_tokens``, …) and
``max_new_tokens``, on the hf engine; the seeds are fixed (episode e gets seed 777000 + e at every
temperature and task), so two runs print the same table. How the ``appo.temperature`` of 1.0 was
chosen (README "APPO"). Not part of ``make bench`` (about 3 min per temperature on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="data/models/base")
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.7, 1.0])
    ap.add_argument("--episodes", type=int, default=6)
    ap.add_argument("--tasks", nargs="*", default=None, help="train task ids (default: all)")
    ap.add_argument("--concurrency", type=int, default=6)
    args = ap.parse_args()

    from apollo.agent.react import AgentConfig, arun_episode
    from apollo.config import load_params
    from apollo.engines.hf import HFEngine
    from apollo.env.tasks import list_tasks
    from benchmarks._suite import ensure_suite

    params = load_params()
    appo = params["appo"]
    if not Path(args.model, "config.json").exists():
        sys.exit(f"--model {args.model}: no HF model there (run `make run` or `dvc repro bootstrap` first)")
    ensure_suite(params)
    tasks = list_tasks(split="train")
    if args.tasks:
        unknown = sorted(set(args.tasks) - {t.task_id for t in tasks})
        if unknown:
            sys.exit(f"--tasks: no train task {unknown}")
        tasks = [t for t in tasks if t.task_id in set(args.tasks)]
    cfg = AgentConfig(max_steps=appo["max_steps"], context_tokens=appo["context_tokens"],
                      command_timeout_s=appo["command_timeout_s"], max_output_chars=appo["max_output_chars"])
    scores: dict[float, dict[str, list[float]]] = {}
    for temp in args.temperatures:
        eng = HFEngine(Path(args.model), temperature=temp, max_new_tokens=appo["max_new_tokens"],
                       prefix_cache_tokens=appo["prefix_cache_tokens"], max_batch=appo["max_batch"])
        sem = asyncio.Semaphore(max(1, args.concurrency))

        async def one(task, e: int):
            async with sem:
                return task.task_id, await arun_episode(task, eng, config=cfg, seed=777000 + e)

        async def all_episodes():
            return await asyncio.gather(*[one(t, e) for t in tasks for e in range(args.episodes)])

        t0 = time.perf_counter()
        per: dict[str, list[float]] = {t.task_id: [] for t in tasks}
        for tid, traj in asyncio.run(all_episodes()):
            per[tid].append(round(float(traj.final_score), 1))
        scores[temp] = per
        print(f"temperature {temp}: {len(tasks) * args.episodes} episodes in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)

    pool = set(appo.get("tasks") or [])
    head = " | ".join(f"T={t}: mean · mixed" for t in args.temperatures)
    print(f"| task | in appo.tasks | {head} |")
    print("|---|---|" + "---|" * len(args.temperatures))
    for t in tasks:
        cells = []
        for temp in args.temperatures:
            s = scores[temp][t.task_id]
            cells.append(f"{sum(s) / len(s):.1f} · {'yes' if max(s) - min(s) > 1e-9 else 'no'}")
        print(f"| {t.task_id} | {'yes' if t.task_id in pool else ''} | " + " | ".join(cells) + " |")
    for temp in args.temperatures:
        sel = [scores[temp][t.task_id] for t in tasks if not pool or t.task_id in pool]
        mixed = sum(max(s) - min(s) > 1e-9 for s in sel)
        mean = sum(sum(s) / len(s) for s in sel) / max(1, len(sel))
        print(f"T={temp}: appo.tasks mean score {mean:.1f}, mixed groups {mixed}/{len(sel)}")


if __name__ == "__main__":
    main()
