"""Guidance lift during rollouts (issue 12, "the effect"): the same train tasks and seeds rolled out
with and without the simulated annotator, paired, so the annotator's choice of failing trajectories
cannot bias the comparison. Prints per seed the mean final score of both arms, the paired
difference with a 95% t-interval over (task, sample) pairs, and the fraction of guided trajectories.

    .venv/bin/python benchmarks/guidance_lift.py --seeds 0 1 2 [--samples 2] [--workers 10] [--model data/models/base]

Uses params.yaml's ``rollout`` section (engine, temperature, annotator timing) and the suite in
``data/suite`` (or ``$APOLLO_SUITE_ROOT``; generated into a temporary folder if missing).
Not part of ``make bench`` (it takes minutes). ``--dump DIR`` keeps both arms' trajectories
(``DIR/<guided|unguided>-s<seed>.jsonl``) to read what the advice said and what the policy did next.
``--report DIR`` prints the report of such a folder again, without rollouts. Besides the lift, the report
says which pairs the advice can explain: twins part ways by sampling too (the batched decoder's rows
differ in the last bits), so only a pair whose actions first differ at or after the first advice counts
as the advice's effect. ``--advice exact`` is a probe: the annotator's advice for a key command step
becomes the reference command itself (on a copy of the suite); edit steps keep their advice.
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


def exact_advice(root: Path) -> int:
    """Copy the suite at ``root`` and point ``$APOLLO_SUITE_ROOT`` at the copy, in which the advice of every
    key ``run_command`` step of a reference plan is that step's command (the information a human who
    knows the script's interface would type); returns how many steps were rewritten."""
    import os
    import shutil

    copy = Path(tempfile.mkdtemp(prefix="apollo-suite-exact-")) / "suite"
    shutil.copytree(root, copy, symlinks=True)
    n = 0
    for plan_path in sorted(copy.rglob("reference_plan.json")):
        plan = json.loads(plan_path.read_text())
        steps = plan["steps"] if isinstance(plan, dict) else plan
        for st in steps:
            if st.get("key") and st.get("tool") == "run_command" and st.get("advice"):
                cmd = st["arguments"]["command"]
                reason = st["advice"].split(";", 1)[1].strip() if ";" in st["advice"] else ""
                text = f"Run: {cmd}" + (f" ; {reason}" if reason else "")
                st["advice"] = text if len(text.split()) <= 30 else f"Run: {cmd}"
                n += 1
        plan_path.write_text(json.dumps(plan, indent=1))
    os.environ["APOLLO_SUITE_ROOT"] = str(copy)
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--samples", type=int, default=None, help="samples per task (default: rollout.samples_per_task)")
    ap.add_argument("--workers", type=int, default=None, help="episodes in flight (default: rollout.workers)")
    ap.add_argument("--model", default="data/models/base")
    ap.add_argument("--out", default=None, help="write the per-pair results as JSON here")
    ap.add_argument("--advice", choices=["as-written", "exact"], default="as-written",
                    help="exact: a probe: the annotator's advice for a key command step is the reference command itself "
                         "(`Run: python scripts/… --all --flags`), on a copy of the suite; edit steps keep their advice")
    ap.add_argument("--watchful", action="store_true",
                    help="the watchful annotator (rollout.annotator.watchful; apollo.env.scripted.check_deviation)")
    ap.add_argument("--dump", default=None, help="write both arms' trajectories (jsonl per arm and seed) into this folder")
    ap.add_argument("--report", default=None, help="no rollouts: print the report of a finished run's --dump folder")
    args = ap.parse_args()
    if args.report:
        report(*from_dump(Path(args.report)))
        return

    from apollo.config import load_params
    from apollo.guidance.annotator import AnnotatorConfig
    from apollo.guidance.runtime import guidance_session, settings_from
    from apollo.schema import write_trajectories
    from apollo.stages.common import aepisode, agent_config, engine_session, plan_jobs, run_jobs
    from benchmarks._suite import ensure_suite

    params = load_params()
    p = params["rollout"]
    if args.samples is not None:
        p["samples_per_task"] = args.samples
    root = ensure_suite(params)
    if args.advice == "exact":
        print(f"advice: exact commands ({exact_advice(root)} key command steps rewritten in a copy of the suite)", flush=True)
    from apollo.env.tasks import load_task

    cfg = agent_config(p)
    acfg = AnnotatorConfig.from_params({**(p.get("annotator") or {}), **({"watchful": True} if args.watchful else {})})
    t0 = time.perf_counter()
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
    if dump:
        for (seed, arm), ts in arms.items():
            write_trajectories(dump / f"{arm}-s{seed}.jsonl", list(ts.values()))
    pairs = report(arms, args.seeds)
    print(f"{time.perf_counter() - t0:.0f}s")
    if args.out:
        Path(args.out).write_text(json.dumps(pairs, indent=1) + "\n")


def from_dump(folder: Path) -> tuple[dict, list[int]]:
    """The arms of a finished run, read back from its ``--dump`` folder."""
    from apollo.schema import read_trajectories

    arms, seeds = {}, set()
    for f in sorted(folder.glob("*-s*.jsonl")):
        arm, seed = f.stem.rsplit("-s", 1)
        if arm in ("guided", "unguided"):
            arms[(int(seed), arm)] = {(t.task_id, t.seed): t for t in read_trajectories(f)}
            seeds.add(int(seed))
    if not arms:
        raise SystemExit(f"{folder}: no guided-s<seed>.jsonl / unguided-s<seed>.jsonl (a --dump folder)")
    return arms, sorted(seeds)


def divergence(g, u) -> int | None:
    """The first step at which the guided trajectory's action differs from its unguided twin's (None: never)."""
    for i, (a, b) in enumerate(zip(g.steps, u.steps)):
        if (a.action.tool, a.action.arguments) != (b.action.tool, b.action.arguments):
            return i
    return None if len(g.steps) == len(u.steps) else min(len(g.steps), len(u.steps))


def interval(d: list[float]) -> str:
    if len(d) < 2:
        return f"{d[0]:+.2f}" if d else "n/a"
    m, sd = statistics.mean(d), statistics.stdev(d)
    half = t95(len(d)) * sd / math.sqrt(len(d))
    return f"{m:+.2f} [{m - half:+.2f}, {m + half:+.2f}]"


def report(arms: dict, seeds: list[int]) -> list[dict]:
    """Per seed and over all seeds: both arms' means, the paired lift with a 95% t-interval over pairs,
    per task, and which pairs the advice can explain: twins that share the same seed part ways by
    sampling too (the batched decoder's rows differ in the last bits), so a pair whose actions differ
    before the first advice is sampling noise, whatever its scores."""
    pairs = []
    for seed in seeds:
        rows = []
        for key, u in arms[(seed, "unguided")].items():
            g = arms[(seed, "guided")][key]
            first = next((i for i, st in enumerate(g.steps) if st.guidance), None)
            div = divergence(g, u)
            rows.append({"seed": seed, "task_id": key[0], "rollout_seed": key[1], "unguided": u.final_score or 0.0,
                         "guided": g.final_score or 0.0, "guided_msgs": sum(len(st.guidance) for st in g.steps),
                         "unguided_steps": len(u.steps), "guided_steps": len(g.steps), "first_advice_step": first,
                         "diverged_at": div,
                         "advice_explains": first is not None and div is not None and div >= first})
        d = [r["guided"] - r["unguided"] for r in rows]
        print(f"seed {seed}: n={len(d)} unguided {statistics.mean(r['unguided'] for r in rows):.2f} "
              f"guided {statistics.mean(r['guided'] for r in rows):.2f} lift {interval(d)} guided trajectories "
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
    advised = [r for r in pairs if r["first_advice_step"] is not None]
    explained = [r for r in advised if r["advice_explains"]]
    noise = [r for r in pairs if r["diverged_at"] is not None and not r["advice_explains"]]
    print(f"all seeds {seeds}: n={len(d)} lift {interval(d)} (95% t-interval over pairs), guided trajectories "
          f"{len(advised) / len(pairs):.0%}")
    print(f"  pairs: {sum(r['diverged_at'] is None for r in pairs)} identical, {len(noise)} part ways before any advice "
          f"(sampling; score differences {sum(r['guided'] != r['unguided'] for r in noise)}), {len(explained)} part "
          f"ways at or after the first advice (score differences {sum(r['guided'] != r['unguided'] for r in explained)}, "
          f"lift over them {interval([r['guided'] - r['unguided'] for r in explained])})", flush=True)
    return pairs


if __name__ == "__main__":
    main()
