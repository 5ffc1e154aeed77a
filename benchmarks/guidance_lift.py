"""Guidance lift during rollouts (issue 12, "the effect"): the same train tasks and seeds rolled out
with and without the simulated annotator, paired, so the annotator's choice of failing trajectories
cannot bias the comparison. Prints per seed the mean final score of both arms, the paired
difference with a 95% t-interval over (task, sample) pairs, and the fraction of guided trajectories.

    .venv/bin/python benchmarks/guidance_lift.py --seeds 0 1 2 [--samples 2] [--workers 10] [--model data/models/base]

Uses params.yaml's ``rollout`` section (engine, temperature, annotator timing) and the suite in
``data/suite`` (or ``$APOLLO_SUITE_ROOT``; generated into a temporary folder if missing).
Not part of ``make bench`` (it takes minutes). ``--dump DIR`` keeps both arms' trajectories
(``DIR/<guided|unguided>-s<seed>.jsonl``) to read what the advice said and what the policy did next.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042]


def t95(n: int) -> float:
    """Two-sided 95% Student t quantile for n samples (n-1 degrees of freedom)."""
    if n < 2:
        return float("nan")
    return _T975[n - 2] if n - 1 <= len(_T975) else 1.96 + 2.4 / (n - 1)  # close to t for df > 30


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--samples", type=int, default=None, help="samples per task (default: rollout.samples_per_task)")
    ap.add_argument("--workers", type=int, default=None, help="episodes in flight (default: rollout.workers)")
    ap.add_argument("--model", default="data/models/base")
    ap.add_argument("--out", default=None, help="write the per-pair results as JSON here")
    ap.add_argument("--dump", default=None, help="write both arms' trajectories (jsonl per arm and seed) into this folder")
    args = ap.parse_args()

    from apollo.config import load_params
    from benchmarks._suite import ensure_suite
    from apollo.guidance.annotator import AnnotatorConfig
    from apollo.guidance.runtime import guidance_session, settings_from
    from apollo.schema import write_trajectories
    from apollo.stages.common import aepisode, agent_config, engine_session, plan_jobs, run_jobs

    params = load_params()
    p = params["rollout"]
    if args.samples is not None:
        p["samples_per_task"] = args.samples
    ensure_suite(params)
    from apollo.env.tasks import load_task

    cfg = agent_config(p)
    a = p.get("annotator", {}) or {}
    acfg = AnnotatorConfig(delay_s=float(a.get("delay_s", 1.0)), poll_s=float(a.get("poll_s", 0.2)),
                           max_per_trajectory=int(a.get("max_per_trajectory", 3)))
    pairs, t0 = [], time.perf_counter()
    workers = args.workers or int(p.get("workers", 4))
    dump = Path(args.dump) if args.dump else None
    if dump:
        dump.mkdir(parents=True, exist_ok=True)
    def one_with(engine, channel):
        async def one(j):
            return await aepisode(load_task(j.task_id, view_hint=bool(p.get("view_hint", False))),
                                  engine, j, cfg, guidance=channel)
        return one

    # the rollout stage's engine (params.yaml rollout.engine) and its async episodes, as `rollout@` runs them.
    # Every seed and both arms go through one runtime, ``--workers`` episodes in flight: an arm's twin
    # shares its first prompt (the engine's prefix cache holds it once) and the batched decoder stays full.
    plan = [(seed, arm, j) for seed in args.seeds for j in plan_jobs({**params, "seed": seed}, "rollout", "train")
            for arm in ("unguided", "guided")]
    arms: dict[tuple[int, str], dict] = {}
    with tempfile.TemporaryDirectory(prefix="apollo-lift-") as wd, engine_session(p, args.model) as engine, \
            guidance_session(settings_from({"guidance": {"mode": "store"}}), Path(wd) / "guidance.sqlite", acfg) as channel:
        guided, unguided = one_with(engine, channel), one_with(engine, None)

        async def one(item):
            _, arm, j = item
            return await (guided if arm == "guided" else unguided)(j)

        trajs = run_jobs(plan, one, workers, f"seeds {args.seeds}, guided + unguided", engine=engine)
    for (seed, arm, j), t in zip(plan, trajs):
        arms.setdefault((seed, arm), {})[(t.task_id, t.seed)] = t
    for seed in args.seeds:
        if dump:
            for arm in ("unguided", "guided"):
                write_trajectories(dump / f"{arm}-s{seed}.jsonl", list(arms[(seed, arm)].values()))
        rows = []
        for key, u in arms[(seed, "unguided")].items():
            g = arms[(seed, "guided")][key]
            rows.append({"seed": seed, "task_id": key[0], "rollout_seed": key[1], "unguided": u.final_score or 0.0,
                         "guided": g.final_score or 0.0, "guided_msgs": sum(len(s.guidance) for s in g.steps),
                         "unguided_steps": len(u.steps), "guided_steps": len(g.steps)})
        d = [r["guided"] - r["unguided"] for r in rows]
        m, sd = statistics.mean(d), statistics.stdev(d) if len(d) > 1 else float("nan")
        half = t95(len(d)) * sd / math.sqrt(len(d))
        print(f"seed {seed}: n={len(d)} unguided {statistics.mean(r['unguided'] for r in rows):.2f} "
              f"guided {statistics.mean(r['guided'] for r in rows):.2f} lift {m:+.2f} "
              f"[{m - half:+.2f}, {m + half:+.2f}] guided trajectories "
              f"{sum(r['guided_msgs'] > 0 for r in rows) / len(rows):.0%}", flush=True)
        pairs += rows
    by_task: dict[str, list[dict]] = {}
    for r in pairs:
        by_task.setdefault(r["task_id"], []).append(r)
    for task_id, rs in sorted(by_task.items()):
        u = " ".join(f"{r['unguided']:.0f}" for r in rs)
        g = " ".join(f"{r['guided']:.0f}" for r in rs)
        print(f"  {task_id}: unguided {u} | guided {g} | advice messages {sum(r['guided_msgs'] for r in rs)}")
    d = [r["guided"] - r["unguided"] for r in pairs]
    m, sd = statistics.mean(d), statistics.stdev(d)
    half = t95(len(d)) * sd / math.sqrt(len(d))
    print(f"all seeds {args.seeds}: n={len(d)} lift {m:+.2f} [{m - half:+.2f}, {m + half:+.2f}] "
          f"(95% t-interval over pairs), guided trajectories {sum(r['guided_msgs'] > 0 for r in pairs) / len(pairs):.0%}, "
          f"{time.perf_counter() - t0:.0f}s")
    if args.out:
        Path(args.out).write_text(json.dumps(pairs, indent=1) + "\n")


if __name__ == "__main__":
    main()
