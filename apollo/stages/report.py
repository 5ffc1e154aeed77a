"""Report stage: the results table of every evaluated variant side by side (+ a bar chart)."""

from __future__ import annotations

import json
from typing import Any

from apollo.config import Paths, section
from apollo.evaluation.report import DOMAIN_ABBR, action_table, markdown_table
from apollo.schema import atomic_write_text


def load_summaries(variants: list[str], paths: Paths) -> dict[str, dict[str, Any]]:
    out = {}
    for v in variants:
        f = paths.eval(v) / "results.json"
        if not f.exists():
            raise FileNotFoundError(f"{f}: missing; run the evaluate@{v} stage first")
        out[v] = json.loads(f.read_text())
    return out


def plot(summaries: dict[str, dict[str, Any]], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doms = sorted({d for s in summaries.values() for d in s["domains"]})
    labels = [DOMAIN_ABBR.get(d, d) for d in doms] + ["Avg"]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / max(1, len(summaries))
    for k, (name, s) in enumerate(summaries.items()):
        vals = [s["domains"].get(d, {}).get("final", 0.0) for d in doms] + [s["weighted"]["final"]]
        ax.bar([i + k * width for i in range(len(labels))], vals, width, label=name)
    ax.set_xticks([i + width * (len(summaries) - 1) / 2 for i in range(len(labels))], labels)
    ax.set_ylabel("final score (0-100)")
    ax.set_ylim(0, 100)
    ax.legend()
    ax.set_title("Test tasks: final score per domain")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def run(params: dict[str, Any], tracker=None, paths: Paths | None = None) -> dict[str, Any]:
    paths = paths or Paths.default()
    variants = list(section(params, "report").get("variants", ["reference", "base", "sft"]))
    summaries = load_summaries(variants, paths)
    table = markdown_table(summaries)
    out = paths.report
    actions = action_table({v: s.get("actions", {}) for v, s in summaries.items() if s.get("actions")})
    atomic_write_text(out / "results.md", "# Results on the test tasks\n\n" + table + "\n\n## Action quality\n\n"
                      + actions + "\n")
    atomic_write_text(out / "results.json", json.dumps(
        {v: {"weighted": s["weighted"], "domains": s["domains"], "actions": s.get("actions", {})}
         for v, s in summaries.items()}, indent=2) + "\n")
    plot(summaries, out / "scores.png")
    metrics = {f"report.{v}.weighted_final": s["weighted"]["final"] for v, s in summaries.items()}
    metrics.update({f"report.{v}.weighted_best": s["weighted"]["best"] for v, s in summaries.items()})
    metrics.update({f"report.{v}.valid_action_rate": s["actions"]["valid_action_rate"]
                    for v, s in summaries.items() if s.get("actions")})
    if tracker is not None:
        tracker.log_metrics(metrics)
        tracker.log_artifact(out / "results.md", "report")
        tracker.log_artifact(out / "scores.png", "report")
    return metrics
