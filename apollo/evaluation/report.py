"""InnovatorBench-style scoring tables: per task final/best, per domain, weighted average.

The weighted average is the task-count-weighted mean of the domain means, which equals the plain
mean over tasks. The table layout follows the paper's main result table: one row per model,
one column pair (final / best) per domain, then the weighted average.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from statistics import mean
from typing import Any

from apollo.env.tasks import DOMAINS
from apollo.schema import Trajectory

DOMAIN_ORDER = list(DOMAINS)  # the paper's column order
DOMAIN_ABBR = {
    "data_construction": "DC",
    "data_filtering": "DF",
    "data_augmentation": "DA",
    "loss_design": "LD",
    "reward_design": "RD",
    "scaffold_construction": "SC",
}


def per_task(trajectories: Iterable[Trajectory]) -> list[dict[str, Any]]:
    """Mean final and best score per task over its samples."""
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        groups[t.task_id].append(t)
    rows = []
    for task_id in sorted(groups):
        ts = groups[task_id]
        rows.append({
            "task_id": task_id,
            "domain": ts[0].domain,
            "samples": len(ts),
            "final": mean(t.final_score or 0.0 for t in ts),
            "best": mean(t.best_score or 0.0 for t in ts),
            "steps": mean(len(t.steps) for t in ts),
        })
    return rows


def summarize(task_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-domain means and the weighted average (task-count weights)."""
    by_dom: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in task_rows:
        by_dom[r["domain"]].append(r)
    domains = {
        d: {
            "tasks": len(rs),
            "final": mean(r["final"] for r in rs),
            "best": mean(r["best"] for r in rs),
        }
        for d, rs in by_dom.items()
    }
    n = sum(v["tasks"] for v in domains.values())
    weighted = {
        k: (sum(v[k] * v["tasks"] for v in domains.values()) / n if n else 0.0) for k in ("final", "best")
    }
    return {"domains": domains, "weighted": weighted, "tasks": n}


def _ordered_domains(summaries: dict[str, dict[str, Any]]) -> list[str]:
    present = {d for s in summaries.values() for d in s["domains"]}
    return [d for d in DOMAIN_ORDER if d in present] + sorted(present - set(DOMAIN_ORDER))


def markdown_table(summaries: dict[str, dict[str, Any]]) -> str:
    """Rows = models (variants), columns = domain final/best, then the weighted average."""
    doms = _ordered_domains(summaries)
    head = ["model"] + [f"{DOMAIN_ABBR.get(d, d)} final/best" for d in doms] + ["weighted avg final/best"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, s in summaries.items():
        cells = [name]
        for d in doms:
            v = s["domains"].get(d)
            cells.append(f"{v['final']:.2f} / {v['best']:.2f}" if v else "–")
        w = s["weighted"]
        cells.append(f"**{w['final']:.2f} / {w['best']:.2f}**")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def task_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| task | domain | samples | final | best | steps |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['task_id']} | {r['domain']} | {r['samples']} | {r['final']:.2f} | {r['best']:.2f} | {r['steps']:.1f} |"
        )
    return "\n".join(lines)


def action_stats(trajectories: Iterable[Trajectory]) -> dict[str, float]:
    """How well-formed and how successful the actions were (a signal below the task score)."""
    trajs = list(trajectories)
    steps = [s for t in trajs for s in t.steps]
    n = max(1, len(steps))
    return {
        "valid_action_rate": sum(s.action.valid for s in steps) / n,
        "tool_error_rate": sum(s.observation.error or s.observation.refused for s in steps) / n,
        "steps_per_trajectory": len(steps) / max(1, len(trajs)),
        "agent_evals_per_trajectory": sum(sum(not e.forced for e in t.evals) for t in trajs) / max(1, len(trajs)),
        "finished_rate": sum(t.finish_reason == "finish" for t in trajs) / max(1, len(trajs)),
    }


def action_table(stats: dict[str, dict[str, float]]) -> str:
    lines = ["| model | valid actions | tool errors | steps / traj | agent evals / traj | called finish |",
             "|---|---|---|---|---|---|"]
    for name, s in stats.items():
        lines.append(
            f"| {name} | {100 * s['valid_action_rate']:.1f}% | {100 * s['tool_error_rate']:.1f}% | "
            f"{s['steps_per_trajectory']:.1f} | {s['agent_evals_per_trajectory']:.2f} | {100 * s['finished_rate']:.0f}% |"
        )
    return "\n".join(lines)
