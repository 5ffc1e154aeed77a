"""Load test of the guidance service on loopback.

N simulated agents stream steps and M annotators post guidance for ``--duration`` seconds, then the
annotators stop and the agents keep stepping until every accepted message has reached them (at most
``--drain-s``). Reports lost and duplicated messages (both must be 0: the exit code is 1 otherwise)
and the p50/p95 latency of

* posting guidance (annotator call → answered),
* posting a step (agent enqueue → stored; over HTTP this runs in the background sender),
* delivery (message accepted → injected by the agent at a step boundary),
* what the agent itself waits in ``post_step`` and ``take_pending`` (over HTTP: only a queue/cache),

for the service (``apollo serve`` subprocess, HTTP, non-blocking client) and for a named baseline
measured in the same run with the same workload: **direct-store**, the agents and annotators calling
:class:`apollo.guidance.store.GuidanceStore` in-process on the same kind of database (no HTTP, no
background sender, no polling). Ratios are service / baseline.

    python benchmarks/bench_guidance_load.py                 # 50 agents, 10 annotators, 60 s (+60 s baseline)
    python benchmarks/bench_guidance_load.py --duration 15 --baseline-duration 15 --json out.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

TOK = {"annotator": "bench-annotator-token-9f8e7d", "agent": "bench-agent-token-1a2b3c",
       "viewer": "bench-viewer-token-4d5e6f"}


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))]


class Workload:
    """Shared bookkeeping of one phase (baseline or service)."""

    def __init__(self, n_agents: int, prefix: str):
        self.tids = [f"{prefix}-{i:03d}" for i in range(n_agents)]
        self.lock = threading.Lock()
        self.accepted: dict[str, list[str]] = defaultdict(list)
        self.taken: dict[str, list[tuple[int, str]]] = defaultdict(list)
        self.post_lat: list[float] = []
        self.step_lat: list[float] = []  # step stored (service: enqueue → confirmed by the service)
        self.step_call_lat: list[float] = []  # what the agent waits in post_step
        self.take_call_lat: list[float] = []  # what the agent waits in take_pending
        self.deliver_lat: list[float] = []
        self.errors: list[str] = []
        self.stop_ann = threading.Event()
        self.stop_agents = threading.Event()

    def behind(self, tid: str) -> bool:
        with self.lock:
            return len(self.taken[tid]) < len(self.accepted[tid])

    def verify(self, store_rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
        """Lost: accepted but never injected; duplicated: injected twice (or into a wrong trajectory);
        out of order: a trajectory's injection order differs from its posting (seq) order."""
        taken_all = Counter(g for tid in self.tids for _, g in self.taken[tid])
        owner = {g: tid for tid in self.tids for g in self.accepted[tid]}
        accepted = {g for tid in self.tids for g in self.accepted[tid]}
        lost = len(accepted - set(taken_all))
        dup = sum(n - 1 for n in taken_all.values() if n > 1)
        wrong = sum(1 for tid in self.tids for _, g in self.taken[tid] if owner.get(g, tid) != tid)
        order = not_acked = 0
        for tid in self.tids:
            rows = store_rows.get(tid, [])
            if [g for _, g in self.taken[tid]] != [r["guidance_id"] for r in rows]:
                order += 1
            not_acked += sum(1 for r in rows if r.get("acknowledged_at") is None)
        return {"accepted": len(accepted), "delivered": sum(taken_all.values()), "lost": lost, "duplicated": dup,
                "wrong_trajectory": wrong, "trajectories_out_of_order": order, "not_acknowledged": not_acked}


def annotator_loop(w: Workload, post: Any, rng: random.Random, post_s: float) -> None:
    n = 0
    while not w.stop_ann.is_set():
        tid = rng.choice(w.tids)
        t0 = time.perf_counter()
        try:
            gid = post(tid, f"guidance #{n} for {tid}: look at the logs before editing")
        except Exception as e:  # noqa: BLE001 - a failed post is reported, not fatal
            w.errors.append(f"post: {type(e).__name__}: {e}")
            continue
        dt = time.perf_counter() - t0
        with w.lock:
            w.accepted[tid].append(gid)
            w.post_lat.append(dt)
        n += 1
        w.stop_ann.wait(rng.uniform(0.5, 1.5) * post_s)


def agent_loop(w: Workload, channel: Any, tid: str, step_s: float, rng: random.Random, synchronous: bool,
               drain_deadline: list[float]) -> None:
    i = 0
    time.sleep(rng.uniform(0, step_s))  # desynchronize the agents
    while True:
        if w.stop_agents.is_set() and (not w.behind(tid) or time.monotonic() > drain_deadline[0]):
            break
        t0 = time.perf_counter()
        got = channel.take_pending(tid, i)
        now, dt = time.time(), time.perf_counter() - t0
        with w.lock:
            w.take_call_lat.append(dt)
            for g in got:
                w.taken[tid].append((i, g.guidance_id))
                w.deliver_lat.append(now - g.created_at)
        time.sleep(rng.uniform(0.5, 1.5) * step_s)  # "generation"
        obs = f"$ python train.py --step {i}\nloss={rng.random():.4f}\n[finished, exit code 0]"
        t0 = time.perf_counter()
        channel.post_step(tid, i, "run_command", {"command": f"python train.py --step {i}", "session_id": "main"}, obs)
        dt = time.perf_counter() - t0
        with w.lock:
            w.step_call_lat.append(dt)
            if synchronous:
                w.step_lat.append(dt)
        i += 1
    channel.end(tid)


def run_phase(name: str, args: argparse.Namespace, duration: float, make_channel: Any, make_post: Any,
              synchronous: bool) -> Workload:
    w = Workload(args.agents, f"{name}-{int(time.time())}")
    drain_deadline = [float("inf")]
    channels = {tid: make_channel(tid) for tid in w.tids}
    threads = [threading.Thread(target=agent_loop, args=(w, channels[tid], tid, args.step_s,
                                                         random.Random(hash((name, tid))), synchronous, drain_deadline),
                                daemon=True) for tid in w.tids]
    posts = [make_post(k) for k in range(args.annotators)]
    threads += [threading.Thread(target=annotator_loop, args=(w, posts[k], random.Random(k), args.post_s), daemon=True)
                for k in range(args.annotators)]
    print(f"[{name}] {args.agents} agents, {args.annotators} annotators, {duration:.0f} s …", flush=True)
    for th in threads:
        th.start()
    time.sleep(duration)
    w.stop_ann.set()
    for th in threads[args.agents:]:
        th.join(30)
    drain_deadline[0] = time.monotonic() + args.drain_s
    w.stop_agents.set()
    for th in threads[: args.agents]:
        th.join(args.drain_s + 30)
    return w


def summarize(w: Workload, v: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    out = dict(v)
    for key, xs in (("post_guidance", w.post_lat), ("post_step", w.step_lat), ("delivery", w.deliver_lat),
                    ("agent_wait_post_step", w.step_call_lat), ("agent_wait_take", w.take_call_lat)):
        out[f"{key}_p50_ms"] = pct(xs, 50) * 1000
        out[f"{key}_p95_ms"] = pct(xs, 95) * 1000
        out[f"{key}_n"] = len(xs)
    out["errors"] = len(w.errors)
    out.update(extra or {})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load on the service (default 60)")
    ap.add_argument("--baseline-duration", type=float, default=None, help="seconds of the baseline (default: --duration)")
    ap.add_argument("--agents", type=int, default=50)
    ap.add_argument("--annotators", type=int, default=10)
    ap.add_argument("--step-s", type=float, default=0.5, help="mean seconds per agent step (generation time)")
    ap.add_argument("--post-s", type=float, default=1.0, help="mean seconds between one annotator's messages")
    ap.add_argument("--poll-s", type=float, default=0.25, help="the HTTP client's guidance poll interval")
    ap.add_argument("--drain-s", type=float, default=30.0)
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--db", default=None, help="database URL for both phases (default: fresh SQLite files)")
    args = ap.parse_args(argv)

    from apollo.guidance.client import AnnotatorClient, GuidanceClient
    from apollo.guidance.harness import ServiceProcess
    from apollo.guidance.store import GuidanceStore

    tmp = Path(tempfile.mkdtemp(prefix="apollo-guidance-load-"))
    results: dict[str, Any] = {"config": vars(args)}

    # -- baseline: direct store access, no HTTP ---------------------------------------------------
    store = GuidanceStore(args.db or tmp / "baseline.sqlite")

    def direct(tid: str) -> GuidanceStore:
        store.register(tid, "bench")
        return store

    w = run_phase("direct-store", args, args.baseline_duration or args.duration, direct,
                  lambda k: (lambda tid, text: store.post_guidance(tid, text, author=f"ann{k}")), True)
    v = w.verify({tid: store.guidance(tid) for tid in w.tids})
    results["direct-store"] = summarize(w, v)
    store.close()

    # -- the service: apollo serve subprocess, HTTP clients -----------------------------------------
    db = args.db or str(tmp / "service.sqlite")
    svc = ServiceProcess(db, tmp / "service.log", tokens=TOK, access_log=False,
                         token_file=tmp / "tokens.json").start()
    clients: list[GuidanceClient] = []
    try:
        def make_channel(tid: str) -> GuidanceClient:
            c = GuidanceClient(svc.url, TOK["agent"], poll_s=args.poll_s)
            c.record_latency = True
            c.register(tid, "bench", meta={"max_steps": 10_000})
            c.flush(30)  # visible to the annotators before they start
            clients.append(c)
            return c

        anns = [AnnotatorClient(svc.url, TOK["annotator"]) for _ in range(args.annotators)]
        w = run_phase("service", args, args.duration, make_channel, lambda k: (lambda tid, text: anns[k].post_guidance(tid, text)),
                      False)
        for c in clients:
            c.close(30)
            w.step_lat += [dt for op, dt in c.stats["op_latency_s"] if op == "step"]
        reader = GuidanceStore(db)
        v = w.verify({tid: reader.guidance(tid) for tid in w.tids})
        reqs = sum(c.stats["requests"] for c in clients)
        results["service"] = summarize(w, v, {"agent_requests": reqs, "agent_retries": sum(c.stats["retries"] for c in clients),
                                              "steps": sum(len(reader.steps(t)) for t in w.tids)})
    finally:
        svc.stop()

    b, s = results["direct-store"], results["service"]
    print()
    print(f"{'metric':<28}{'service':>14}{'direct-store':>16}{'ratio':>10}")
    for key in ("post_guidance", "post_step", "delivery", "agent_wait_post_step", "agent_wait_take"):
        for q in ("p50", "p95"):
            k = f"{key}_{q}_ms"
            ratio = s[k] / b[k] if b[k] and b[k] == b[k] else float("nan")
            results.setdefault("ratio", {})[k] = ratio
            print(f"{key + ' ' + q:<28}{s[k]:>11.2f} ms{b[k]:>13.2f} ms{ratio:>9.2f}x")
    for key in ("accepted", "delivered", "lost", "duplicated", "wrong_trajectory", "trajectories_out_of_order",
                "not_acknowledged", "errors"):
        print(f"{key:<28}{s[key]:>14}{b[key]:>16}")
    print(f"(service: {s['steps']} steps, {s['agent_requests']} agent sync requests, {s['agent_retries']} retries; "
          f"ratio = service / direct-store baseline)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=float))
    bad = any(r[k] for r in (b, s) for k in ("lost", "duplicated", "wrong_trajectory", "trajectories_out_of_order",
                                              "not_acknowledged"))
    if bad:
        print("FAIL: messages were lost, duplicated or reordered", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
