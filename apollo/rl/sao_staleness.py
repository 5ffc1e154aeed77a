"""SAO against asynchronous GRPO at controlled staleness (``make stability-staleness``): the
stability run (:mod:`apollo.rl.sao_stability`) repeated at staleness levels, each level a lag
distribution of the rollout workers (:mod:`apollo.rl.staleness`: the workers sample from the policy
``k`` versions ago), both modes, one or more seeds, judged by the collapse criterion of
:mod:`apollo.rl.collapse` (written down before the runs).

Params: ``sao`` (the loop) overlaid with ``sao.stability.overrides``, then
``sao.stability.staleness.overrides``, then the level's keys (``sao.stability.staleness.levels.<name>``:
loop keys, e.g. ``lag`` and ``max_staleness``), then the cell's seed. ``seeds.<level>``: the seeds
of each level. ``model``: a model directory, or ``preset:tiny`` / ``preset:micro`` — a fresh
preset model (:mod:`apollo.models.tiny`) with a byte-level BPE tokenizer trained on countdown text
(prompts, scripted actions, observations), so the run needs no bootstrap; either way it is first
cloned on scripted countdown episodes (``warm_start``), once, and every cell starts from that policy.

Cells run one at a time by default (``--jobs``), each in its own process with one CPU thread, in
the order seed-major, mode-minor (a seed's SAO and GRPO runs next to each other, so what finished
is paired); a cell whose ``result.json`` exists is skipped (``--force`` reruns it), so a grid can be
filled in over several sessions. Written to ``out``: ``<level>/s<seed>/<mode>.jsonl`` (the history)
and ``result.json`` per cell, and, over every finished cell on disk, ``summary.json``,
``table.md`` (per level and mode: reward first / last 50 updates, lowest 50-update mean from update
100 on, the criterion, measured staleness; means over seeds with a 95% t-interval) and
``staleness.png`` (reward, entropy, grad norm, masked / clipped fraction, value loss and measured
token staleness per level, a line per mode and seed). MLflow: parent run ``sao_staleness``, a child
``rl_staleness@<level>-<mode>-s<seed>`` per cell.

    python -m apollo.rl.sao_staleness                                  # params.yaml, every level
    python -m apollo.rl.sao_staleness --levels lag8 --seeds 0 1 2 --steps 400
    python -m apollo.rl.sao_staleness --report                         # table and plot only
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import multiprocessing as mp
import random
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from apollo.rl.collapse import HOLD, MARGIN, START, WINDOW, curve_summary

log = logging.getLogger(__name__)
CURVES = ("reward", "entropy", "grad_norm", "masked_fraction", "value_loss", "staleness.token_mean")
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def settings(params: dict[str, Any], *, steps: int | None = None, levels: list[str] | None = None,
             seeds: list[int] | None = None, out: str | None = None) -> dict[str, Any]:
    """The grid from params (see the module doc) and the command line; every cell's loop config
    is checked here, before any process starts."""
    from apollo.rl.sao_loop import loop_config
    from apollo.rl.sao_stability import settings as stability_settings

    base = stability_settings(params)
    stab = dict((params.get("sao") or {}).get("stability") or {})
    grid = dict(stab.get("staleness") or {})
    all_levels = dict(grid.get("levels") or {})
    if not all_levels:
        raise ValueError("params.yaml: sao.stability.staleness.levels is empty")
    names = levels or list(all_levels)
    bad = [n for n in names if n not in all_levels]
    if bad:
        raise ValueError(f"unknown staleness levels {bad}; params.yaml has {sorted(all_levels)}")
    loop = {**base["loop"], **dict(grid.get("overrides") or {})}
    seed_map = dict(grid.get("seeds") or {})
    cells: list[dict[str, Any]] = []
    modes = list(grid.get("modes") or base["modes"])
    for name in names:
        for seed in (seeds if seeds is not None else list(seed_map.get(name, [0]))):
            for mode in modes:
                cell_loop = {**loop, **dict(all_levels[name]), "seed": int(seed)}
                loop_config(cell_loop, mode=mode)  # names a bad key or an impossible lag at once
                cells.append({"level": name, "seed": int(seed), "mode": mode, "loop": cell_loop})
    return {"cells": cells, "levels": {n: dict(all_levels[n]) for n in names}, "loop": loop,
            "steps": int(steps or grid.get("steps", base["steps"])),
            "time_budget_s": grid.get("time_budget_s"),
            "model": grid.get("model", base["model"]), "out": out or grid.get("out", "data/rl/staleness"),
            "warm_start": {**base["warm_start"], **dict(grid.get("warm_start") or {})},
            "vocab_size": int(grid.get("vocab_size", 1024))}


def countdown_corpus(n_tasks: int, seed: int = 0, n_demos: int = 2000) -> list[str]:
    """Text a countdown tokenizer is trained on: the prompts, scripted actions, observations."""
    from apollo.env.sanity import SYSTEM_PROMPT, make_tasks
    from apollo.rl.sao_loop import demonstration

    rng = random.Random(f"{seed}:corpus")
    tasks = make_tasks(max(n_tasks, 200), seed=seed)
    texts = [SYSTEM_PROMPT] * 20 + [t.description for t in tasks]
    texts += [a for _ in range(n_demos) for a in demonstration(rng.choice(tasks), rng)]
    texts += [str(rng.randint(-200, 2000)) for _ in range(500)]
    texts += ["Submitted.", "Invalid action: no tool call.", "Error: answer must be a number.",
              "Unknown tool; tools: calc, submit."] * 20
    return texts


def build_preset_model(preset: str, dest: Path, *, vocab_size: int = 1024, seed: int = 0, n_tasks: int = 64) -> str:
    """A fresh ``preset`` model (random weights, ``seed``) with a countdown tokenizer, saved to ``dest``."""
    import shutil

    from apollo.models.tiny import count_parameters, make_config, make_model, train_tokenizer

    tok = train_tokenizer(countdown_corpus(n_tasks, seed), vocab_size=vocab_size)
    model = make_model(make_config(tok, preset), seed=seed)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    log.info("built the %s preset (%d parameters, %d tokens) in %s", preset, count_parameters(model), len(tok), dest)
    return str(dest)


def cell_dir(out: Path, cell: dict[str, Any]) -> Path:
    return out / cell["level"] / f"s{cell['seed']}"


def _ci(vals: list[float]) -> tuple[float, float, float]:
    """Mean and a 95% t-interval over seeds (n = 1: the value, no interval)."""
    vals = [v for v in vals if isinstance(v, (int, float)) and math.isfinite(v)]
    if not vals:
        return math.nan, math.nan, math.nan
    m = statistics.fmean(vals)
    if len(vals) < 2:
        return m, math.nan, math.nan
    h = T975.get(len(vals) - 1, 1.96) * statistics.stdev(vals) / math.sqrt(len(vals))
    return m, m - h, m + h


def _se_window(xs: list[float]) -> float:
    return 1.96 * statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else math.nan


def run_summary(history: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell's numbers: the criterion's (:func:`~apollo.rl.collapse.curve_summary`) and the
    measured staleness, lag, masked fraction, value loss, entropy."""
    s = curve_summary(history)
    rewards = [float(r["reward"]) for r in history]
    s["reward_first_hw"] = _se_window(rewards[:WINDOW])
    s["reward_last_hw"] = _se_window(rewards[-WINDOW:])

    def mean(k: str, rows: list[dict[str, Any]] = history) -> float:
        v = [r[k] for r in rows if isinstance(r.get(k), (int, float)) and math.isfinite(r[k])]
        return statistics.fmean(v) if v else math.nan

    for k in ("staleness.token_mean", "staleness.traj_mean", "lag.mean", "masked_fraction", "value_loss",
              "explained_variance", "loss.ratio_mean", "loss.approx_kl", "loss.low_fraction", "loss.high_fraction",
              "loss.clip_low_fraction", "loss.clip_high_fraction", "loss.dual_clip_fraction"):
        s[k] = mean(k)
    s["staleness.token_max"] = max((r.get("staleness.token_max", 0.0) for r in history), default=math.nan)
    s["entropy_first"], s["entropy_last"] = mean("entropy", history[:WINDOW]), mean("entropy", history[-WINDOW:])
    s["grad_norm_max"] = max((r.get("grad_norm", 0.0) for r in history), default=math.nan)
    s["dropped_stale"] = history[-1].get("dropped_stale", 0.0) if history else 0.0
    return s


def load_cells(out: Path) -> list[dict[str, Any]]:
    """Every finished cell on disk (``result.json`` beside its history)."""
    cells = []
    for res in sorted(out.glob("*/s*/*.result.json")):
        r = json.loads(res.read_text())
        hist = res.with_name(f"{r['mode']}.jsonl")
        r["history"] = [json.loads(x) for x in hist.read_text().splitlines()] if hist.exists() else []
        cells.append(r)
    return cells


def aggregate(cells: list[dict[str, Any]], level_order: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows per (level, mode) over the seeds found."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault((c["level"], c["mode"]), []).append(c)
    order = {n: i for i, n in enumerate(level_order or [])}
    rows = []
    for (level, mode), cs in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][0], kv[0][1] != "sao")):
        cs = sorted(cs, key=lambda c: c["seed"])
        sm = [c["summary"] for c in cs]
        row = {"level": level, "mode": mode, "seeds": [c["seed"] for c in cs],
               "updates": [s["updates"] for s in sm], "seconds": [c.get("seconds", math.nan) for c in cs],
               "fired": [s["collapse"]["fired"] for s in sm], "fired_at": [s["collapse"]["at"] for s in sm],
               "pending": [s["collapse"]["pending"] for s in sm], "per_seed": sm}
        for k in ("reward_first", "reward_last", "lowest_after_start", "drop_peak_to_last", "staleness.token_mean",
                  "staleness.token_max", "lag.mean", "masked_fraction", "value_loss", "entropy_first", "entropy_last",
                  "grad_norm_max"):
            row[k] = _ci([s.get(k, math.nan) for s in sm])
        rows.append(row)
    return rows


def _fmt(ci: tuple[float, float, float], d: int = 3) -> str:
    m, lo, hi = ci
    if not math.isfinite(m):
        return "–"
    return f"{m:.{d}f}" if not math.isfinite(lo) else f"{m:.{d}f} [{lo:.{d}f}, {hi:.{d}f}]"


def paired(cells: list[dict[str, Any]], key: str = "reward_last") -> dict[str, tuple[float, float, float]]:
    """Per level: SAO − GRPO (async) of ``key``, paired on the seed, mean and 95% t-interval."""
    by: dict[tuple[str, int], dict[str, float]] = {}
    for c in cells:
        by.setdefault((c["level"], c["seed"]), {})[c["mode"]] = c["summary"][key]
    out: dict[str, list[float]] = {}
    for (level, _), modes in by.items():
        if "sao" in modes and "grpo_async" in modes:
            out.setdefault(level, []).append(modes["sao"] - modes["grpo_async"])
    return {lv: _ci(v) for lv, v in out.items()}


def table(rows: list[dict[str, Any]], diffs: dict[str, tuple[float, float, float]] | None = None) -> str:
    head = ("| level | mode | seeds | updates | measured staleness, token mean (max) | reward, first 50 | "
            "reward, last 50 | lowest 50-update mean from 100 | criterion fired | masked / clipped | entropy first → last |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        fired = sum(r["fired"])
        when = ", ".join(str(a) for a in r["fired_at"] if a is not None)
        pend = sum(r["pending"])
        crit = f"{fired}/{len(r['seeds'])}" + (f" (at {when})" if when else "") + (f", {pend} pending" if pend else "")
        ups = sorted(set(r["updates"]))
        first, last = _fmt(r["reward_first"]), _fmt(r["reward_last"])
        if len(r["seeds"]) == 1:  # one seed: ± 1.96 standard errors over the window's updates instead
            s0 = r["per_seed"][0]
            first += f" ± {s0['reward_first_hw']:.3f}"
            last += f" ± {s0['reward_last_hw']:.3f}"
        lines.append(
            f"| {r['level']} | {r['mode']} | {','.join(map(str, r['seeds']))} | {'/'.join(map(str, ups))} | "
            f"{_fmt(r['staleness.token_mean'], 2)} ({max(s['staleness.token_max'] for s in r['per_seed']):.0f}) | "
            f"{first} | {last} | {_fmt(r['lowest_after_start'])} | {crit} | "
            f"{_fmt(r['masked_fraction'], 4)} | {_fmt(r['entropy_first'])} → {_fmt(r['entropy_last'])} |")
    text = head + "\n".join(lines) + "\n"
    if diffs:
        text += "\n| level | SAO − GRPO, reward last 50 (paired on seed) |\n|---|---|\n"
        text += "".join(f"| {lv} | {_fmt(ci)} |\n" for lv, ci in diffs.items())
    return text


def plot(cells: list[dict[str, Any]], path: Path, level_order: list[str] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = [lv for lv in (level_order or []) if any(c["level"] == lv for c in cells)]
    levels += sorted({c["level"] for c in cells} - set(levels))
    if not levels:
        return
    fig, axes = plt.subplots(len(CURVES), len(levels), figsize=(max(8, 5 * len(levels)), 2.4 * len(CURVES)), squeeze=False)
    colors = {"sao": "tab:blue", "grpo_async": "tab:red", "grpo_sync": "tab:green"}
    for j, lv in enumerate(levels):
        for c in sorted((c for c in cells if c["level"] == lv), key=lambda c: (c["mode"], c["seed"])):
            h = c["history"]
            for i, k in enumerate(CURVES):
                rows = [r for r in h if isinstance(r.get(k), (int, float)) and math.isfinite(r[k])]
                if not rows:
                    continue
                xs, ys = [r["step"] for r in rows], [r[k] for r in rows]
                win = 25
                sm = [statistics.fmean(ys[max(0, t - win + 1): t + 1]) for t in range(len(ys))]
                axes[i][j].plot(xs, sm, color=colors.get(c["mode"], "k"), alpha=0.85, linewidth=1,
                                label=f"{c['mode']} s{c['seed']}" if i == 0 else None)
        for i, k in enumerate(CURVES):
            axes[i][j].set_title(f"{lv}: {k}", fontsize=9)
            if i == len(CURVES) - 1:
                axes[i][j].set_xlabel("update")
        axes[0][j].legend(fontsize=7)
    fig.suptitle("SAO vs asynchronous GRPO at controlled staleness\n(countdown; 25-update moving means)", fontsize=10)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=70)
    plt.close(fig)
    tmp.replace(path)


def report(out: Path, level_order: list[str] | None = None) -> tuple[list[dict[str, Any]], str]:
    cells = load_cells(out)
    rows = aggregate(cells, level_order)
    diffs = paired(cells)
    text = table(rows, diffs)
    crit = (f"Collapse criterion (apollo/rl/collapse.py): the {WINDOW}-update mean reward falls more than {MARGIN} below "
            f"the first {WINDOW} updates' mean at an update ≥ {START} and stays below for {HOLD} updates, or a "
            "non-finite reward / loss / grad norm. Intervals: 95% t over seeds; with one seed, ± 1.96 standard "
            "errors over the window's 50 updates.\n")
    (out / "table.md").write_text(text + "\n" + crit)
    summary = {"rows": [{k: v for k, v in r.items() if k != "per_seed"} | {"per_seed": [
        {k: v for k, v in s.items()} for s in r["per_seed"]]} for r in rows],
        "paired_sao_minus_grpo_reward_last": diffs}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    plot(cells, out / "staleness.png", level_order)
    return rows, text


def _cell(cell: dict[str, Any], model_path: str, out: str, steps: int, budget: float | None,
          parent_run_id: str | None) -> dict[str, Any]:
    from apollo.rl.sao_stability import _run_mode

    d = Path(out) / cell["level"] / f"s{cell['seed']}"
    t0 = time.time()
    res = _run_mode(cell["mode"], cell["loop"], model_path, str(d), steps, budget, parent_run_id,
                    run_name=f"rl_staleness@{cell['level']}-{cell['mode']}-s{cell['seed']}")
    history = [json.loads(x) for x in (d / f"{cell['mode']}.jsonl").read_text().splitlines()]
    res.pop("episode_seconds", None)
    result = {"level": cell["level"], "seed": cell["seed"], "mode": cell["mode"], "lag": cell["loop"].get("lag"),
              "max_staleness": cell["loop"].get("max_staleness"), "steps_asked": steps, "seconds": res["seconds"],
              "wall_s": time.time() - t0, "stopped_early": res["stopped_early"], "dropped_stale": res["dropped_stale"],
              "summary": run_summary(history)}
    (d / f"{cell['mode']}.result.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    from apollo import tracking
    from apollo.config import load_params, project_root
    from apollo.rl.sao_stability import warm_start_model

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--levels", nargs="*", default=None)
    ap.add_argument("--seeds", nargs="*", type=int, default=None)
    ap.add_argument("--modes", nargs="*", default=None)
    ap.add_argument("--time-budget-s", type=float, default=None, help="per cell")
    ap.add_argument("--jobs", type=int, default=1, help="cells at a time (one process, one CPU thread each)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--force", action="store_true", help="rerun cells that have a result")
    ap.add_argument("--report", action="store_true", help="only rebuild table.md, summary.json, staleness.png")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(processName)s %(message)s")
    params = load_params(args.params)
    st = settings(params, steps=args.steps, levels=args.levels, seeds=args.seeds, out=args.out)
    all_levels = list(((params.get("sao") or {}).get("stability") or {}).get("staleness", {}).get("levels", {}))
    out = project_root() / st["out"]
    out.mkdir(parents=True, exist_ok=True)
    if args.report:
        print(report(out, all_levels)[1])
        return 0
    cells = [c for c in st["cells"] if not args.modes or c["mode"] in args.modes]
    todo = [c for c in cells if args.force or not (cell_dir(out, c) / f"{c['mode']}.result.json").exists()]
    order = list(st["levels"])  # the levels in the order asked (--levels lag8 lag4: the highest first)
    todo.sort(key=lambda c: (order.index(c["level"]), c["seed"]))
    budget = args.time_budget_s if args.time_budget_s is not None else st["time_budget_s"]
    parent = tracking.start_parent_run("sao_staleness", params={"steps": st["steps"], "levels": st["levels"],
                                                                "warm_start": st["warm_start"], "model": st["model"]})
    try:
        model = str(st["model"])
        warm_dir = out / "warm_start"
        if (warm_dir / "config.json").exists():
            model_path = str(warm_dir)
            log.info("warm start: reusing %s", warm_dir)
        else:
            if model.startswith("preset:"):
                base = build_preset_model(model.split(":", 1)[1], out / "base", vocab_size=st["vocab_size"],
                                          seed=int(st["loop"].get("seed", 0)), n_tasks=int(st["loop"].get("n_tasks", 64)))
            else:
                base = str(project_root() / model)
                if not Path(base, "config.json").exists():
                    raise SystemExit(f"{base}: no model (build it with `python -m apollo stage bootstrap`)")
            if int(st["warm_start"]["steps"]) > 0:
                model_path, warm = warm_start_model(base, out, st["warm_start"], st["loop"])
                parent.log_metrics({f"warm_start.{k}": v for k, v in warm.items()})
                (out / "warm_start.json").write_text(json.dumps(warm, indent=2) + "\n")
            else:
                model_path = base
        log.info("%d cells to run (%d finished on disk), %d updates each", len(todo), len(cells) - len(todo), st["steps"])
        ctx = mp.get_context("spawn")
        with ProcessPoolExecutor(max(1, args.jobs), mp_context=ctx) as pool:
            futs = [(c, pool.submit(_cell, c, model_path, str(out), st["steps"], budget, parent.run_id)) for c in todo]
            for c, f in futs:
                r = f.result()
                s = r["summary"]
                print(f"{c['level']} s{c['seed']} {c['mode']}: {s['updates']} updates in {r['seconds']:.0f} s; reward "
                      f"{s['reward_first']:.3f} -> {s['reward_last']:.3f}, lowest from {START} "
                      f"{s['lowest_after_start']:.3f}, staleness {s['staleness.token_mean']:.2f}, "
                      f"collapse {s['collapse']['fired']} at {s['collapse']['at']}", flush=True)
                report(out, all_levels)
        _, text = report(out, all_levels)
        parent.log_artifact(out / "table.md")
        parent.log_artifact(out / "staleness.png")
        parent.log_artifact(out / "summary.json")
    except BaseException:
        tracking.end_run(parent, "FAILED")
        raise
    tracking.end_run(parent)
    print(text)
    print(f"curves: {out / 'staleness.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
