"""The experiment's results: per variant means and 95% intervals over seeds and tasks, per domain,
the paired difference against the baseline variant (``untrained``), and test-time-scaling curves.

Input: the evaluation trajectories of every (variant, seed) cell. A cell's per-task score is the
mean over its k samples of that task; a variant's score is the mean over its (seed, task) matrix
(= the task-count-weighted domain average of InnovatorBench, averaged over seeds). Intervals:
:mod:`apollo.experiment.stats`. Every number here is a pure function of the trajectories and the
bootstrap seed, so a rerun on the same records prints the same table.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from apollo.evaluation.report import DOMAIN_ABBR, DOMAIN_ORDER
from apollo.experiment.stats import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, bootstrap_ci, paired_difference
from apollo.experiment.tts import trajectory_curve
from apollo.schema import Trajectory

Cells = Mapping[tuple[str, int], Sequence[Trajectory]]
RESULT_KEYS = ("final_mean", "final_ci", "best_mean", "best_ci", "seeds", "diff_vs_untrained")


class ExperimentDataError(ValueError):
    """Cells that cannot be compared (missing tasks, no trajectories): names the cell."""


def _tasks_of(cells: Cells) -> tuple[list[str], dict[str, str]]:
    """The common task list (sorted) and each task's domain; every cell must cover the same tasks."""
    ref_key, tasks, domains = None, None, {}
    for key, trajs in sorted(cells.items()):
        if not trajs:
            raise ExperimentDataError(f"cell variant={key[0]} seed={key[1]}: no trajectories")
        got = {t.task_id for t in trajs}
        for t in trajs:
            domains[t.task_id] = t.domain
        if tasks is None:
            ref_key, tasks = key, got
        elif got != tasks:
            missing, extra = sorted(tasks - got), sorted(got - tasks)
            raise ExperimentDataError(
                f"cell variant={key[0]} seed={key[1]} covers other tasks than variant={ref_key[0]} "
                f"seed={ref_key[1]}: missing {missing[:5]}, extra {extra[:5]}")
    return sorted(tasks or ()), domains


def score_matrix(cells: Cells, variant: str, seeds: Sequence[int], tasks: Sequence[str],
                 value: Callable[[Trajectory], float]) -> np.ndarray:
    """(seeds x tasks) matrix of the per-task mean of ``value`` over the samples of each cell."""
    m = np.zeros((len(seeds), len(tasks)))
    col = {t: j for j, t in enumerate(tasks)}
    for i, s in enumerate(seeds):
        acc: dict[str, list[float]] = defaultdict(list)
        for t in cells[(variant, s)]:
            acc[t.task_id].append(value(t))
        for task, vals in acc.items():
            m[i, col[task]] = float(np.mean(vals))
    return m


def _final(t: Trajectory) -> float:
    return float(t.final_score or 0.0)


def _best(t: Trajectory) -> float:
    return float(t.best_score or 0.0)


def _domain_order(domains: set[str]) -> list[str]:
    return [d for d in DOMAIN_ORDER if d in domains] + sorted(domains - set(DOMAIN_ORDER))


def experiment_results(cells: Cells, *, baseline: str = "untrained",
                       budgets: Mapping[str, Sequence[float]] | None = None,
                       confidence: float = DEFAULT_CONFIDENCE, resamples: int = DEFAULT_RESAMPLES,
                       rng_seed: int = 0) -> dict[str, Any]:
    """``{"variants": {v: row}, "tts": {...}, "meta": {...}}``; ``row`` carries RESULT_KEYS + domains."""
    if not cells:
        raise ExperimentDataError("no (variant, seed) cells to summarise")
    tasks, task_domain = _tasks_of(cells)
    variants = list(dict.fromkeys(v for v, _ in cells))  # first-seen order (params order)
    seeds_of = {v: sorted(s for vv, s in cells if vv == v) for v in variants}
    domains = _domain_order(set(task_domain.values()))
    ci = dict(confidence=confidence, resamples=resamples, rng_seed=rng_seed)
    mats = {v: {"final": score_matrix(cells, v, seeds_of[v], tasks, _final),
                "best": score_matrix(cells, v, seeds_of[v], tasks, _best)} for v in variants}
    out: dict[str, Any] = {}
    for v in variants:
        row: dict[str, Any] = {"seeds": seeds_of[v], "tasks": len(tasks),
                               "samples_per_task": _samples_per_task(cells, v, seeds_of[v])}
        for k in ("final", "best"):
            e = bootstrap_ci(mats[v][k], **ci)
            row[f"{k}_mean"], row[f"{k}_ci"] = e.mean, e.ci
        row["domains"] = {}
        for d in domains:
            cols = [j for j, t in enumerate(tasks) if task_domain[t] == d]
            dom: dict[str, Any] = {"tasks": len(cols)}
            for k in ("final", "best"):
                e = bootstrap_ci(mats[v][k][:, cols], **ci)
                dom[f"{k}_mean"], dom[f"{k}_ci"] = e.mean, e.ci
            row["domains"][d] = dom
        row["diff_vs_untrained"] = _paired(mats, seeds_of, v, baseline, ci)
        out[v] = row
    tts = tts_curves(cells, variants, seeds_of, tasks, budgets or {}, ci) if budgets else {}
    return {"variants": out, "tts": tts,
            "meta": {"baseline": baseline, "confidence": confidence, "resamples": resamples,
                     "bootstrap_seed": rng_seed, "tasks": tasks, "domains": domains,
                     "interval": "two-way percentile bootstrap over seeds and tasks"}}


def _samples_per_task(cells: Cells, v: str, seeds: Sequence[int]) -> float:
    n = [len(cells[(v, s)]) / max(1, len({t.task_id for t in cells[(v, s)]})) for s in seeds]
    return float(np.mean(n))


def _paired(mats, seeds_of, v: str, baseline: str, ci) -> dict[str, Any] | None:
    """Paired on (seed, task) over the seeds both variants ran; None without the baseline."""
    if baseline not in mats:
        return None
    common = sorted(set(seeds_of[v]) & set(seeds_of[baseline]))
    if not common:
        return None
    iv = [seeds_of[v].index(s) for s in common]
    ib = [seeds_of[baseline].index(s) for s in common]
    out: dict[str, Any] = {"seeds": common}
    for k in ("final", "best"):
        e = paired_difference(mats[v][k][iv], mats[baseline][k][ib], **ci)
        prefix = "" if k == "final" else "best_"
        out[f"{prefix}mean"], out[f"{prefix}ci"] = e.mean, e.ci
    return out


def tts_curves(cells: Cells, variants: Sequence[str], seeds_of: Mapping[str, Sequence[int]],
               tasks: Sequence[str], budgets: Mapping[str, Sequence[float]], ci) -> dict[str, Any]:
    """Per budget axis (``steps``, ``wall_s``) and variant: best-so-far and final-at-budget curves,
    each point the (seed x task) mean with its bootstrap interval."""
    col = {t: j for j, t in enumerate(tasks)}
    out: dict[str, Any] = {}
    for axis, bs in budgets.items():
        bs = [float(b) for b in bs]
        axis_out: dict[str, Any] = {"budgets": bs, "variants": {}}
        for v in variants:
            seeds = seeds_of[v]
            sums = {k: np.zeros((len(seeds), len(tasks), len(bs))) for k in ("best", "final")}
            counts = np.zeros((len(seeds), len(tasks), 1))
            for i, s in enumerate(seeds):
                for t in cells[(v, s)]:
                    c = trajectory_curve(t, bs, axis)
                    for k in sums:
                        sums[k][i, col[t.task_id]] += c[k]
                    counts[i, col[t.task_id]] += 1
            curves = {}
            for k, acc in sums.items():
                per = acc / np.maximum(counts, 1)
                ests = [bootstrap_ci(per[:, :, b], **ci) for b in range(len(bs))]
                curves[k] = {"mean": [e.mean for e in ests], "ci": [e.ci for e in ests]}
            axis_out["variants"][v] = curves
        out[axis] = axis_out
    return out


def _fmt(mean: float, ci: Sequence[float]) -> str:
    return f"{mean:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"


def markdown(results: dict[str, Any]) -> str:
    """The ablation table: weighted final/best with intervals, the paired difference, per domain."""
    rows, meta = results["variants"], results["meta"]
    pct = round(100 * meta["confidence"])
    head = ["variant", "seeds", "k", f"final [{pct}% CI]", f"best [{pct}% CI]",
            f"final − {meta['baseline']} [{pct}% CI]"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v, r in rows.items():
        d = r.get("diff_vs_untrained")
        diff = _fmt(d["mean"], d["ci"]) if d and v != meta["baseline"] else "–"
        lines.append(f"| {v} | {','.join(map(str, r['seeds']))} | {r['samples_per_task']:g} | "
                     f"**{_fmt(r['final_mean'], r['final_ci'])}** | {_fmt(r['best_mean'], r['best_ci'])} | {diff} |")
    doms = meta["domains"]
    lines += ["", "Final score per domain (mean over seeds and tasks, [interval]):", "",
              "| variant | " + " | ".join(f"{DOMAIN_ABBR.get(d, d)} ({rows[next(iter(rows))]['domains'][d]['tasks']})"
                                         for d in doms) + " |",
              "|---|" + "---|" * len(doms)]
    for v, r in rows.items():
        lines.append(f"| {v} | " + " | ".join(_fmt(r["domains"][d]["final_mean"], r["domains"][d]["final_ci"])
                                             for d in doms) + " |")
    lines += ["", f"{len(meta['tasks'])} test tasks; k = samples per task; intervals: {meta['interval']} "
              f"({meta['resamples']} resamples, bootstrap seed {meta['bootstrap_seed']}); the difference "
              f"is paired on (seed, task) against `{meta['baseline']}`."]
    return "\n".join(lines) + "\n"


def results_json(results: dict[str, Any]) -> dict[str, Any]:
    """What ``data/experiment/results.json`` holds: one object per variant (DVC metrics)."""
    return {v: {k: r[k] for k in (*RESULT_KEYS, "tasks", "samples_per_task", "domains")}
            for v, r in results["variants"].items()}


def tts_wide(results: dict[str, Any], axis: str, kind: str = "best") -> list[dict[str, float]]:
    """One row per budget, one column per variant (the mean): what DVC's linear plot reads with
    ``x: budget`` and ``y: [variants]``."""
    a = results.get("tts", {}).get(axis)
    if not a:
        return []
    return [{"budget": b, **{v: c[kind]["mean"][i] for v, c in a["variants"].items()}}
            for i, b in enumerate(a["budgets"])]


def tts_records(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The TTS curves as flat rows (DVC plots data): one per axis, variant, budget."""
    rows = []
    for axis, a in results.get("tts", {}).items():
        for v, curves in a["variants"].items():
            for i, b in enumerate(a["budgets"]):
                rows.append({"axis": axis, "variant": v, "budget": b,
                             "best": curves["best"]["mean"][i], "best_low": curves["best"]["ci"][i][0],
                             "best_high": curves["best"]["ci"][i][1], "final": curves["final"]["mean"][i],
                             "final_low": curves["final"]["ci"][i][0], "final_high": curves["final"]["ci"][i][1]})
    return rows
