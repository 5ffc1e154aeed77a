"""Per-command overhead of the rollout sandbox (bwrap) against the unsandboxed path (none).

The same tool calls run through ``Workspace(..., sandbox="bwrap")`` and ``Workspace(...,
sandbox="none")`` in one process, interleaved (bwrap, none, bwrap, none, ...) so that machine
load hits both alike; each figure is the median over ``--reps`` calls with its 10th-90th
percentile range. Also measured: starting an episode (workspace copy + sandbox start + close)
and a whole scripted reference episode of one task per backend.

    .venv/bin/python benchmarks/bench_sandbox.py [--reps 30] [--task df-test-01]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import os
import time
from pathlib import Path

from apollo.env import Workspace, load_task
from apollo.engines.scripted import run_scripted

CALLS = {
    "run_command true": ("run_command", {"command": "true"}),
    "run_command echo": ("run_command", {"command": "echo hello; ls scripts"}),
    "run_command python -c pass": ("run_command", {"command": "python -c pass"}),
    "run_command import numpy": ("run_command", {"command": "python -c 'import numpy'"}),
    "open_file": ("open_file", {"path": "SCRIPT"}),  # the task's first script
    "create_file": ("create_file", {"path": "output/bench.txt", "content": "x\n" * 100}),
    "list_files": ("list_files", {"path": "."}),
}


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--task", default="df-test-01")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    task = load_task(args.task)
    backends = ("bwrap", "none")
    root = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    times: dict[tuple[str, str], list[float]] = {}
    starts: dict[str, list[float]] = {b: [] for b in backends}
    rng = random.Random(args.seed)
    wss = {b: Workspace(task, root, sandbox=b) for b in backends}
    try:
        script = sorted((wss["none"].path / "scripts").iterdir())[0].name
        CALLS["open_file"] = ("open_file", {"path": f"scripts/{script}"})
        names = list(CALLS)
        for r in range(args.reps):
            rng.shuffle(names)
            for name in names:
                for b in backends if r % 2 == 0 else backends[::-1]:
                    tool, a = CALLS[name]
                    t0 = time.perf_counter()
                    obs = wss[b].call(tool, a, r).observation
                    times.setdefault((name, b), []).append(time.perf_counter() - t0)
                    assert not obs.error, (b, name, obs.text)
    finally:
        for w in wss.values():
            w.close()
    for r in range(max(5, args.reps // 3)):
        for b in backends if r % 2 == 0 else backends[::-1]:
            t0 = time.perf_counter()
            Workspace(task, root, sandbox=b).close()
            starts[b].append(time.perf_counter() - t0)
    episode = {}
    for b in backends:
        os.environ["APOLLO_SANDBOX"] = b  # the episode loop's workspaces use this backend
        t0 = time.perf_counter()
        ep, _ = run_scripted(task, noise=0.0, seed=0, root=root)
        episode[b] = (time.perf_counter() - t0, ep.final_score)

    print(f"task {task.task_id}, {args.reps} calls per tool and backend, interleaved; median ms [p10-p90]")
    print(f"{'call':32s} {'none (baseline)':>22s} {'bwrap':>22s} {'overhead':>10s} {'ratio':>7s}")
    overheads = []
    for name in CALLS:
        base, box = times[(name, "none")], times[(name, "bwrap")]
        mb, mx = statistics.median(base) * 1e3, statistics.median(box) * 1e3
        overheads.append(mx - mb)
        print(f"{name:32s} {mb:8.1f} [{_pct(base, .1)*1e3:5.1f}-{_pct(base, .9)*1e3:6.1f}] "
              f"{mx:8.1f} [{_pct(box, .1)*1e3:5.1f}-{_pct(box, .9)*1e3:6.1f}] {mx - mb:+8.1f}ms {mx / mb:6.2f}x")
    sb, sx = statistics.median(starts["none"]) * 1e3, statistics.median(starts["bwrap"]) * 1e3
    print(f"{'episode start + close':32s} {sb:8.1f} {'':14s} {sx:8.1f} {'':14s} {sx - sb:+8.1f}ms {sx / sb:6.2f}x")
    (eb, scb), (ex, scx) = episode["none"], episode["bwrap"]
    print(f"{'reference episode (wall s)':32s} {eb:8.2f} {'':14s} {ex:8.2f} {'':14s} {ex - eb:+8.2f}s  {ex / eb:6.2f}x"
          f"   (scores {scb:g} / {scx:g})")
    print(f"per-command overhead of the sandbox: median over calls {statistics.median(overheads):+.1f} ms")


if __name__ == "__main__":
    main()
