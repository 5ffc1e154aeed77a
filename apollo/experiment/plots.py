"""The test-time-scaling figure: score vs step budget and vs wall-clock budget, one curve per
variant with its interval band. A PNG (matplotlib) and an interactive HTML page.

The HTML is self-contained (inline SVG drawn by a few lines of JavaScript from the embedded data;
no CDN, so it opens offline and as an MLflow/DVC artifact): choose the axis and best/final, click a
legend entry to hide a variant, hover a point for its value and interval. Plotly is not in the
pinned stack; this page needs nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

AXIS_LABEL = {"steps": "step budget (steps)", "wall_s": "wall-clock budget (s)"}


def _atomic_save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(path)


def tts_png(tts: dict[str, Any], path: Path, metric: str = "best") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes_names = [a for a in ("steps", "wall_s") if a in tts] + [a for a in tts if a not in ("steps", "wall_s")]
    fig, axes = plt.subplots(1, max(1, len(axes_names)), figsize=(5.5 * max(1, len(axes_names)), 3.8), squeeze=False)
    for ax, name in zip(axes[0], axes_names):
        a = tts[name]
        for v, curves in a["variants"].items():
            c = curves[metric]
            line, = ax.plot(a["budgets"], c["mean"], marker="o", ms=3, label=v)
            ax.fill_between(a["budgets"], [x[0] for x in c["ci"]], [x[1] for x in c["ci"]],
                            color=line.get_color(), alpha=0.18, linewidth=0)
        bs = [b for b in a["budgets"] if b > 0]
        if bs and max(bs) / min(bs) >= 20:  # budgets spanning decades (seconds): a log axis
            ax.set_xscale("log")
        ax.set_xlabel(AXIS_LABEL.get(name, name))
        ax.set_ylabel(f"{'best-so-far' if metric == 'best' else 'final-at-budget'} score")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Test-time scaling on the test tasks (mean over seeds and tasks, 95% interval)", fontsize=10)
    fig.tight_layout()
    _atomic_save(fig, path)
    plt.close(fig)


_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><title>Test-time scaling</title>
<style>body{font:14px sans-serif;margin:20px}svg text{font:11px sans-serif}.leg{cursor:pointer}
.off{opacity:.25}</style></head><body>
<h3>Test-time scaling: score vs budget (mean over seeds and tasks, 95% interval band)</h3>
<label>budget <select id="axis"></select></label>
<label>score <select id="metric"><option value="best">best-so-far</option>
<option value="final">final-at-budget</option></select></label>
<div id="plot"></div>
<script id="data" type="application/json">__DATA__</script>
<script>
const D = JSON.parse(document.getElementById('data').textContent);
const COLORS = ['#1f77b4','#ff7f0e','#2ca02c','#d62728','#9467bd','#8c564b','#e377c2','#7f7f7f'];
const LABEL = {steps: 'step budget (steps)', wall_s: 'wall-clock budget (s)'};
const hidden = new Set();
const axisSel = document.getElementById('axis'), metricSel = document.getElementById('metric');
for (const a of Object.keys(D)) axisSel.add(new Option(LABEL[a] || a, a));
function el(tag, attrs, parent) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}
function draw() {
  const a = D[axisSel.value], m = metricSel.value, W = 720, H = 380, L = 50, R = 150, T = 10, B = 40;
  const bs = a.budgets, x0 = Math.min(...bs), x1 = Math.max(...bs);
  const X = b => L + (x1 > x0 ? (b - x0) / (x1 - x0) : 0.5) * (W - L - R), Y = s => T + (1 - s / 100) * (H - T - B);
  const svg = el('svg', {width: W, height: H});
  for (let s = 0; s <= 100; s += 20) {
    el('line', {x1: L, x2: W - R, y1: Y(s), y2: Y(s), stroke: '#ddd'}, svg);
    el('text', {x: L - 28, y: Y(s) + 4}, svg).textContent = s;
  }
  for (const b of bs) el('text', {x: X(b) - 8, y: H - B + 16}, svg).textContent = b;
  el('text', {x: L + 150, y: H - 5}, svg).textContent = LABEL[axisSel.value] || axisSel.value;
  Object.entries(a.variants).forEach(([v, curves], i) => {
    const c = curves[m], col = COLORS[i % COLORS.length], g = el('g', {}, svg);
    if (hidden.has(v)) g.setAttribute('class', 'off');
    const up = bs.map((b, j) => X(b) + ',' + Y(c.ci[j][1])), lo = bs.map((b, j) => X(b) + ',' + Y(c.ci[j][0])).reverse();
    el('polygon', {points: up.concat(lo).join(' '), fill: col, 'fill-opacity': hidden.has(v) ? 0 : 0.18}, g);
    el('polyline', {points: bs.map((b, j) => X(b) + ',' + Y(c.mean[j])).join(' '), fill: 'none', stroke: col, 'stroke-width': 2}, g);
    bs.forEach((b, j) => {
      const p = el('circle', {cx: X(b), cy: Y(c.mean[j]), r: 4, fill: col}, g);
      el('title', {}, p).textContent = `${v} @ ${b}: ${c.mean[j].toFixed(2)} [${c.ci[j][0].toFixed(2)}, ${c.ci[j][1].toFixed(2)}]`;
    });
    const lg = el('g', {class: 'leg' + (hidden.has(v) ? ' off' : '')}, svg);
    el('rect', {x: W - R + 15, y: T + 20 * i, width: 12, height: 12, fill: col}, lg);
    el('text', {x: W - R + 32, y: T + 20 * i + 10}, lg).textContent = v;
    lg.onclick = () => { hidden.has(v) ? hidden.delete(v) : hidden.add(v); draw(); };
  });
  const plot = document.getElementById('plot'); plot.innerHTML = ''; plot.appendChild(svg);
}
axisSel.onchange = metricSel.onchange = draw; draw();
</script></body></html>
"""


def tts_html(tts: dict[str, Any], path: Path) -> None:
    """Write the interactive page (atomic: temp file then rename)."""
    data = json.dumps(tts).replace("</", "<\\/")  # a variant name cannot close the script element
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(_HTML.replace("__DATA__", data), encoding="utf-8")
    tmp.replace(path)
