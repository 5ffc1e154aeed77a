"""Rollout throughput: the async runtime over ``vllm serve`` vs today's thread pool over ``HFEngine``.

Same model (the embedded base model by default), same mini-suite train tasks, seeds and budgets
(steps, new tokens, temperature, context) on both sides; for each agent count N (16 and 32 by
default) N episodes run with N in flight:

* baseline: a thread pool of N workers, each running the episode loop with the in-process
  ``HFEngine`` (what the rollout stage did before the runtime);
* runtime: :func:`apollo.runtime.run_episodes` (N coroutines on one event loop, tools in threads)
  with :class:`~apollo.engines.vllm_server.VLLMServerEngine` against one ``vllm serve``, which
  batches the requests in flight.

It prints steps/s and generated tokens/s of each and their ratio (runtime / baseline), then pure
generation (the N first-step prompts, N requests at once, no tools) tokens/s of both engines, and
the latency of an in-place weight update of the running server (reloading a checkpoint, 3 times).
The server's start-up time is reported on its own (paid once per stage, not per episode) and is not
in the throughput numbers. Results also go to ``--json``.

    .venv/bin/python benchmarks/bench_rollout.py [--agents 16 32] [--max-steps 6] [--model data/models/base]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apollo.agent.prompt import initial_messages  # noqa: E402
from apollo.agent.react import AgentConfig, arun_episode, run_episode  # noqa: E402
from apollo.engines.hf import HFEngine  # noqa: E402
from apollo.engines.vllm_server import EngineUnavailable, ServerConfig, VLLMServer, VLLMServerEngine  # noqa: E402
from apollo.env.tasks import list_tasks  # noqa: E402
from apollo.runtime import run_episodes, throughput  # noqa: E402


def jobs_for(n: int) -> list[tuple[object, int]]:
    tasks = list_tasks(split="train")
    return [(tasks[i % len(tasks)], 1000 + i) for i in range(n)]


def bench_hf(eng: HFEngine, n: int, cfg: AgentConfig) -> dict[str, float]:
    jobs = jobs_for(n)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n) as ex:
        trajs = list(ex.map(lambda j: run_episode(j[0], eng, config=cfg, seed=j[1]), jobs))
    return throughput(trajs, time.perf_counter() - t0)


def bench_runtime(eng: VLLMServerEngine, n: int, cfg: AgentConfig) -> dict[str, float]:
    jobs = jobs_for(n)

    async def one(j):
        return await arun_episode(j[0], eng, config=cfg, seed=j[1])

    t0 = time.perf_counter()
    trajs = run_episodes(jobs, one, concurrency=n, desc=f"runtime x{n}", on_loop_end=eng.aclose)
    return throughput(trajs, time.perf_counter() - t0)


def pure_generation(hf: HFEngine, served: VLLMServerEngine, n: int) -> dict[str, float]:
    prompts = [initial_messages(t.description) for t, _ in jobs_for(n)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n) as ex:
        hf_out = list(ex.map(lambda ps: hf.generate(ps[1], seed=ps[0]), enumerate(prompts)))
    hf_s = time.perf_counter() - t0

    async def all_served():
        try:
            return await asyncio.gather(*[served.agenerate(p, seed=i) for i, p in enumerate(prompts)])
        finally:
            await served.aclose()

    t0 = time.perf_counter()
    v_out = asyncio.run(all_served())
    v_s = time.perf_counter() - t0
    hf_tok = sum(len(g.token_ids) for g in hf_out)
    v_tok = sum(len(g.token_ids) for g in v_out)
    return {"hf_tokens": hf_tok, "hf_s": hf_s, "hf_tokens_per_s": hf_tok / hf_s,
            "vllm_tokens": v_tok, "vllm_s": v_s, "vllm_tokens_per_s": v_tok / v_s,
            "ratio": (v_tok / v_s) / (hf_tok / hf_s)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="data/models/base")
    ap.add_argument("--agents", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--max-steps", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--context-tokens", type=int, default=3800)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    model = Path(args.model)
    if not (model / "config.json").exists():
        print(f"no model at {model}: run `python -m apollo stage bootstrap` first or pass --model", file=sys.stderr)
        return 2
    cfg = AgentConfig(max_steps=args.max_steps, context_tokens=args.context_tokens)
    kw = dict(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    results: dict[str, object] = {"model": str(model), "max_steps": args.max_steps, "cpus": os.cpu_count(),
                                  "max_new_tokens": args.max_new_tokens, "temperature": args.temperature}
    print(f"model {model}, {os.cpu_count()} CPUs, max_steps {args.max_steps}, max_new_tokens "
          f"{args.max_new_tokens}, temperature {args.temperature}; seeds 1000..1000+N-1")
    hf = HFEngine(model, **kw)
    srv_cfg = ServerConfig(max_num_seqs=max(args.agents), max_model_len=4096)
    with VLLMServer(model, srv_cfg) as srv:
        served = VLLMServerEngine(model, url=srv.url, max_context=4096, **kw)
        results["server_startup_s"] = srv.startup_s
        print(f"vllm serve started in {srv.startup_s:.1f} s (once per stage; not counted below)")
        print("\n| agents | engine | episodes | steps | gen tokens | wall s | steps/s | tokens/s | gen s (sum) | tool s (sum) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for n in args.agents:
            row = {"hf_threads": bench_hf(hf, n, cfg), "runtime_vllm_serve": bench_runtime(served, n, cfg)}
            for name, r in row.items():
                print(f"| {n} | {name} | {r['episodes']:.0f} | {r['steps']:.0f} | {r['generated_tokens']:.0f} | "
                      f"{r['wall_s']:.1f} | {r['steps_per_s']:.2f} | {r['tokens_per_s']:.0f} | {r['gen_time_s']:.0f} | "
                      f"{r['tool_time_s']:.0f} |")
            b, v = row["hf_threads"], row["runtime_vllm_serve"]
            row["steps_per_s_ratio"] = v["steps_per_s"] / b["steps_per_s"]
            row["tokens_per_s_ratio"] = v["tokens_per_s"] / b["tokens_per_s"]
            results[f"agents_{n}"] = row
        for n in args.agents:
            r = results[f"agents_{n}"]
            print(f"{n} agents: runtime over vllm serve / thread pool over HFEngine = "
                  f"{r['steps_per_s_ratio']:.2f}x steps/s, {r['tokens_per_s_ratio']:.2f}x generated tokens/s")
        n = max(args.agents)
        g = pure_generation(hf, served, n)
        results["pure_generation"] = g
        print(f"pure generation, {n} first-step prompts at once: HFEngine (thread pool) {g['hf_tokens_per_s']:.0f} tok/s, "
              f"vllm serve {g['vllm_tokens_per_s']:.0f} tok/s: {g['ratio']:.2f}x")
        try:
            lat = [served.update_weights(model, version=v) for v in (1, 2, 3)]
            results["weight_update_s"] = lat
            print(f"weight update (reload {model} into the running server): median {statistics.median(lat):.2f} s "
                  f"(runs: {', '.join(f'{x:.2f}' for x in lat)})")
        except EngineUnavailable as e:  # e.g. a server without the worker extension: see VLLMServerEngine.update_weights
            results["weight_update_s"] = None
            print(f"weight update not measured: {e}")
        served.close()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
