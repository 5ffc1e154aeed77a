"""Does the train reward rise, per RL variant? The trend of every seed and pooled over seeds.

``python -m apollo.rl.trend_report appo appo_no_future …`` reads each cell's training history
(``data/models/<variant>/s<seed>/appo_history.json``, or the SAO family's ``sao_history.json``) and
prints, per variant: each seed's within-task slope of the train reward per iteration (update) with
its 95% interval (:func:`apollo.rl.trend.reward_trend`), the mean reward of the first and last third
of the iterations, and the slope **pooled over the seeds** ((seed, task) fixed effects, (seed,
iteration) resampled; :func:`apollo.rl.trend.pooled_points`): one seed's 20 iterations rarely
decide it, three seeds' 60 more often do. ``--against V`` adds, per other variant, its pooled slope
minus V's with a 95% interval (:func:`apollo.rl.trend.slope_difference`: does an ablation rise less). ``--together`` adds one slope over every run of the
variants given (e.g. APPO and its ablations: does the method family move the train reward). ``--plot PATH`` draws the per-iteration mean reward of
every seed (``--json PATH`` writes the numbers). Read-only: the histories are the rl stages' outputs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from statistics import mean

from apollo.rl.trend import pooled_points, reward_trend, slope_difference, task_points

HISTORIES = (("appo_history.json", "iteration"), ("sao_history.json", "step"))  # (file, x)


def mean_reward(entry: dict) -> float:
    """An entry's mean train reward: APPO's ``reward.mean``, the SAO family's ``reward``."""
    return float(entry["reward.mean"] if "reward.mean" in entry else entry.get("reward", math.nan))


def load_histories(models: Path, variant: str) -> tuple[dict[str, list[dict]], str]:
    """``({seed: history}, x)`` of one variant's finished cells (seed folders ``s<N>``)."""
    out: dict[str, list[dict]] = {}
    x = "iteration"
    for d in sorted(models.glob(f"{variant}/s*")):
        for name, key in HISTORIES:
            p = d / name
            if p.exists():
                try:
                    out[d.name] = json.loads(p.read_text())
                except json.JSONDecodeError as e:
                    raise ValueError(f"{p}: not valid JSON (line {e.lineno}): {e.msg}") from e
                x = key
                break
    return out, x


def _fmt(t: dict[str, float]) -> str:
    if not math.isfinite(t["slope"]):
        return "–"
    ci = f" [{t['low']:+.4f}, {t['high']:+.4f}]" if math.isfinite(t["low"]) else " (no interval)"
    return f"{t['slope']:+.4f}{ci}"


Runs = dict[str, tuple[dict[str, list[dict]], str]]  # variant -> ({seed: history}, x), read once


def load_runs(models: Path, variants: list[str]) -> Runs:
    """The histories of every variant that has any (:func:`load_histories`)."""
    return {v: hx for v in variants if (hx := load_histories(models, v))[0]}


def report(runs: Runs) -> dict[str, dict]:
    """Per variant: ``seeds`` {seed: {trend, first_third, last_third, iterations}} and ``pooled``."""
    out: dict[str, dict] = {}
    for v, (hists, x) in runs.items():
        seeds = {}
        for s, h in hists.items():
            r = [y for y in map(mean_reward, h) if math.isfinite(y)]
            third = max(1, len(r) // 3)
            seeds[s] = {"trend": reward_trend(task_points(h, x)), "iterations": len(h),
                        "first_third": mean(r[:third]) if r else math.nan,
                        "last_third": mean(r[-third:]) if r else math.nan}
        pts, clusters = pooled_points(hists, x)
        out[v] = {"seeds": seeds, "pooled": reward_trend(pts, clusters=clusters), "x": x}
    return out


def pooled_over_variants(runs: Runs) -> dict[str, float]:
    """One slope over every run of the variants ((variant, seed, task) fixed effects, (variant, seed,
    iteration) resampled): does the method family raise the train reward, whatever its ablation."""
    pts: list = []
    clusters: list = []
    for v, (h, x) in runs.items():  # each variant with its own x (APPO: iteration; SAO: step)
        p, c = pooled_points({f"{v}/{s}": hist for s, hist in h.items()}, x)
        pts += p
        clusters += c
    return {**reward_trend(pts, clusters=clusters), "runs": float(sum(len(h) for h, _ in runs.values()))}


def render(rep: dict[str, dict]) -> str:
    lines = ["variant             seed   iters  reward 1st→last third   within-task slope per iteration [95% CI]"]
    for v, r in rep.items():
        for s, t in r["seeds"].items():
            lines.append(f"{v:19s} {s:5s} {t['iterations']:6d}  {t['first_third']:.3f} → {t['last_third']:.3f}"
                         f"          {_fmt(t['trend'])}")
        lines.append(f"{v:19s} {'all':5s} {'':6s}  {'':20s}   {_fmt(r['pooled'])}  (pooled over {len(r['seeds'])} seeds)")
    return "\n".join(lines)


def plot(rep: dict[str, dict], runs: Runs, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(4 * len(runs), 3.2), sharey=True, squeeze=False)
    for ax, (v, (hists, x)) in zip(axes[0], runs.items()):
        r = rep[v]
        for s, h in hists.items():
            ax.plot([e[x] for e in h], [mean_reward(e) for e in h], marker=".", lw=1, label=s)
        ax.set_title(f"{v}\npooled slope {_fmt(r['pooled'])}", fontsize=8)
        ax.set_xlabel(x)
    axes[0][0].set_ylabel("mean train reward (drawn tasks)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp" + path.suffix)
    fig.savefig(tmp, dpi=110)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m apollo.rl.trend_report", description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="+", help="RL variants (folders under --models)")
    ap.add_argument("--models", default="data/models", help="default: data/models")
    ap.add_argument("--json", default=None, help="also write the numbers here")
    ap.add_argument("--plot", default=None, help="also draw the reward curves here (PNG)")
    ap.add_argument("--together", action="store_true",
                    help="also one slope pooled over every run of the variants given (a method family)")
    ap.add_argument("--against", default=None, metavar="VARIANT",
                    help="also each other variant's pooled slope minus this one's, with a 95%% interval")
    args = ap.parse_args(argv)
    models = Path(args.models)
    runs = load_runs(models, args.variants)
    rep = report(runs)
    missing = [v for v in args.variants if v not in rep]
    if missing:
        print(f"trend_report: no training history under {models}/<variant>/s*/ for: {', '.join(missing)}",
              file=sys.stderr)
    if not rep:
        return 1
    print(render(rep))
    if args.together and len(rep) > 1:
        t = pooled_over_variants(runs)
        print(f"{'together':19s} {'all':5s} {'':6s}  {'':20s}   {_fmt(t)}  (pooled over {int(t['runs'])} runs of "
              f"{', '.join(rep)})")
        rep["_together"] = {"pooled": t, "variants": list(rep)}
    if args.against:
        if args.against not in rep:
            print(f"trend_report: --against {args.against}: no training history", file=sys.stderr)
            return 1
        base_pc = pooled_points(*runs[args.against])
        diffs = {}
        for v in rep:
            if v.startswith("_") or v == args.against:
                continue
            diffs[v] = slope_difference(pooled_points(*runs[v]), base_pc)
            print(f"{v:19s} {'− ' + args.against:26s}   {_fmt(diffs[v])}  (pooled slope difference)")
        rep["_against"] = {"variant": args.against, "differences": diffs}
    if args.json:
        p = Path(args.json)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(rep, indent=1, default=float) + "\n")
        tmp.replace(p)
    if args.plot:
        plot(rep, runs, Path(args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
