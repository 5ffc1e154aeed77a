"""Tree rollouts vs independent episodes: prefill tokens and wall time (issue 17, item 2).

For each task (mini-suite train tasks), in one run and with one engine:

* **tree**: :func:`apollo.rl.tree.tree_rollout` — N initial episodes, then B branches chosen by
  APPO branch scores (current-policy logprobs recomputed by a forward pass of the HF policy);
* **independent** (the baseline): N + B ordinary episodes. The first N use the same seeds as the
  tree's initial episodes, so the two arms differ only in how the last B episodes are made.

What is measured, per generation call (every call the episode loop makes, summaries included):
``input`` = the prompt tokens the call sends (a branch also sends its prefix ``response[:t+1]``),
``cached`` = those the engine found in its prefix cache, ``prefill`` = input − cached: the tokens
the call actually had to process before sampling. Sources:

* ``--engine hf`` (default): :class:`~apollo.engines.hf.HFEngine` with its prefix KV cache on
  (``prefix_cache_tokens``): it reuses the longest cached prefix of every call, the way vLLM's
  automatic prefix caching does, and reports the reused length per call;
* ``--engine vllm_server``: a ``vllm serve`` with prefix caching; ``cached`` is the server's own
  per-request ``usage.prompt_tokens_details.cached_tokens``, cross-checked against the deltas of
  ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` on ``/metrics``.

The cache is on in **both** arms (multi-turn episodes reuse their own history in both; that is
the honest baseline) and emptied before each arm of each task, so neither arm inherits the other's
cache. ``input`` alone is also printed: it is what an engine without any prefix cache would
prefill. Wall time is per arm (episodes ``--concurrency`` in flight; the tree's includes the
scoring pass, also printed on its own). The done-when target is ≥ 40 % fewer prefill tokens for the
tree than for the baseline, summed over the tasks. The bench also prints the prefill of the first
N episodes of each arm (alike: same seeds) and of the B extra ones (branches vs independent
episodes): with the cache on in both arms the saving can never exceed the B extra episodes' share
of the baseline, so at N = B it stays under ~50 % however cheap the branches are.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_tree.py [--tasks 3] [--n-init 4] [--n-branch 4]
        [--max-steps 8] [--model data/models/base] [--engine hf|vllm_server] [--json out.json]

Without a model at ``--model`` the bench builds the ``micro`` preset (random weights: garbage
actions, but real token accounting) in a temporary folder.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apollo.agent.react import AgentConfig, arun_episode  # noqa: E402
from apollo.env.tasks import list_tasks  # noqa: E402
from apollo.rl.tree import HFPolicyScorer, atree_rollout  # noqa: E402

log = logging.getLogger("bench_tree")


class Counting:
    """The engine, counting every generation call's input / cached / prefill tokens (from the
    engine's own per-call report in ``Generation.meta``)."""

    def __init__(self, inner: Any):
        self._inner = inner
        self.reset()

    def reset(self) -> dict[str, int]:
        old = getattr(self, "counts", None)
        self.counts = {"calls": 0, "input": 0, "cached": 0, "prefill": 0, "generated": 0, "unreported": 0}
        return old

    def _count(self, gen: Any) -> Any:
        c = self.counts
        c["calls"] += 1
        c["input"] += gen.prompt_tokens
        cached = gen.meta.get("cached_tokens")
        if cached is None:
            c["unreported"] += 1
            cached = 0
        c["cached"] += int(cached)
        c["prefill"] += gen.prompt_tokens - int(cached)
        c["generated"] += len(gen.token_ids or [])
        return gen

    def generate(self, messages: Any, **kw: Any) -> Any:
        return self._count(self._inner.generate(messages, **kw))

    def __getattr__(self, name: str) -> Any:
        if name == "agenerate":
            inner = self._inner.agenerate  # AttributeError when the engine has none: the loop uses threads

            async def agenerate(messages: Any, **kw: Any) -> Any:
                return self._count(await inner(messages, **kw))

            return agenerate
        return getattr(self._inner, name)


def server_metrics(url: str) -> dict[str, float]:
    import httpx

    text = httpx.get(url + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total"):
        pattern = rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.eE+-]+)$"
        vals = [float(m.group(1)) for m in re.finditer(pattern, text, re.MULTILINE)]
        out[name] = sum(vals)
    return out


def clear_cache(engine: Any) -> None:
    inner = engine._inner
    if hasattr(inner, "clear_prefix_cache"):
        inner.clear_prefix_cache()
    else:  # vllm_server (dev mode, set by VLLMServer)
        import httpx

        httpx.post(inner.url + "/reset_prefix_cache", timeout=30).raise_for_status()


async def independent(task: Any, engine: Any, n: int, b: int, seed: int, cfg: AgentConfig,
                      concurrency: int) -> tuple[list, int]:
    """N + B episodes: the first N (the tree's initial seeds), then B more; also returns the
    prefill count after the first N (to compare the B extra episodes with the B branches)."""
    sem = asyncio.Semaphore(concurrency)

    async def one(e: int):
        async with sem:
            return await arun_episode(task, engine, config=cfg, seed=seed * 1000 + e)

    first = list(await asyncio.gather(*[one(e) for e in range(n)]))
    mid = engine.counts["prefill"]
    return first + list(await asyncio.gather(*[one(n + e) for e in range(b)])), mid


def run_arm(name: str, engine: Counting, fn: Any) -> dict[str, Any]:
    clear_cache(engine)
    engine.reset()
    url = getattr(engine._inner, "url", None)
    before = server_metrics(url) if url else None
    t0 = time.perf_counter()
    trajs, extra = fn()
    wall = time.perf_counter() - t0
    res = {"arm": name, **engine.counts, "wall_s": wall, "episodes": len(trajs),
           "steps": sum(len(t.steps) for t in trajs), **extra}
    if before is not None:
        after = server_metrics(url)
        res["metrics_queries"] = after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]
        res["metrics_hits"] = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    return res


def make_micro(root: Path) -> Path:
    from apollo.models.tiny import make_config, make_model, train_tokenizer

    tok = train_tokenizer(["list_files open_file run_command eval finish tool_call arguments path"] * 50,
                          vocab_size=400)
    make_model(make_config(tok, "micro"), seed=0).save_pretrained(root)
    tok.save_pretrained(root)
    return root


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="data/models/base")
    ap.add_argument("--engine", choices=["hf", "vllm_server"], default="hf")
    ap.add_argument("--tasks", type=int, default=3, help="first K train tasks, one of each family first")
    ap.add_argument("--n-init", type=int, default=4)
    ap.add_argument("--n-branch", type=int, default=4)
    ap.add_argument("--max-steps", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=192)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("apollo").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)

    model = Path(args.model)
    if not (model / "config.json").exists():
        model = make_micro(Path(tempfile.mkdtemp(prefix="bench-tree-micro-")))
        print(f"no model at {args.model}: using the micro preset (random weights) built at {model}")
    tasks = list_tasks(split="train")
    by_family: dict[str, Any] = {}
    for t in tasks:
        by_family.setdefault(t.domain, t)
    picked = (list(by_family.values()) + [t for t in tasks if t not in by_family.values()])[: args.tasks]
    cfg = AgentConfig(max_steps=args.max_steps)

    server = None
    if args.engine == "hf":
        from apollo.engines.hf import HFEngine

        inner = HFEngine(model, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                         prefix_cache_tokens=1_000_000)
        scorer = HFPolicyScorer.from_engine(inner)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from apollo.engines.vllm_server import ServerConfig, VLLMServer, VLLMServerEngine

        server = VLLMServer(model, ServerConfig(max_num_seqs=16)).start()
        inner = VLLMServerEngine(model, url=server.url, temperature=args.temperature,
                                 max_new_tokens=args.max_new_tokens)
        scorer = HFPolicyScorer(AutoModelForCausalLM.from_pretrained(model).eval(),
                                AutoTokenizer.from_pretrained(model), temperature=args.temperature)
    engine = Counting(inner)
    n, b = args.n_init, args.n_branch
    rows: list[dict[str, Any]] = []
    try:
        for task in picked:
            phases: dict[str, float] = {}

            def tree_fn(task=task, phases=phases):
                marks = {"t0": time.perf_counter()}

                def on_phase(name, trajs):
                    marks[name] = time.perf_counter()
                    marks[name + "_prefill"] = engine.counts["prefill"]

                timed_scorer_s = [0.0]

                def scored(traj):
                    t0 = time.perf_counter()
                    try:
                        return scorer(traj)
                    finally:
                        timed_scorer_s[0] += time.perf_counter() - t0

                trajs = asyncio.run(atree_rollout(task, engine, n, b, scorer=scored, config=cfg, seed=args.seed,
                                                  concurrency=args.concurrency, on_phase=on_phase))
                kinds = [t.meta["kind"] for t in trajs]
                strict = sum(bool(t.meta.get("branch_strict")) for t in trajs)
                return trajs, {"init_wall_s": marks["init"] - marks["t0"], "scoring_s": timed_scorer_s[0],
                               "init_prefill": marks["init_prefill"],
                               "branch_prefill": marks["branch_prefill"] - marks["init_prefill"],
                               "branches": kinds.count("branch"), "strict_branches": strict,
                               "branch_steps": [t.branch_step_index for t in trajs if t.parent_trajectory_id],
                               "mean_final_score": statistics.fmean(t.final_score or 0 for t in trajs)}

            def indep_fn(task=task):
                trajs, mid = asyncio.run(independent(task, engine, n, b, args.seed, cfg, args.concurrency))
                return trajs, {"mean_final_score": statistics.fmean(t.final_score or 0 for t in trajs),
                               "init_prefill": mid, "branch_prefill": engine.counts["prefill"] - mid}

            tree = run_arm("tree", engine, tree_fn)
            base = run_arm("independent", engine, indep_fn)
            for r in (tree, base):
                r["task"] = task.task_id
                rows.append(r)
            print(f"{task.task_id}: prefill tree {tree['prefill']} vs independent {base['prefill']} "
                  f"(ratio {tree['prefill'] / max(base['prefill'], 1):.3f}); wall {tree['wall_s']:.1f} s vs "
                  f"{base['wall_s']:.1f} s; branch steps {tree['branch_steps']}", flush=True)
    finally:
        if server is not None:
            engine._inner.close()
            server.stop()

    def total(arm: str, key: str) -> float:
        return sum(r[key] for r in rows if r["arm"] == arm)

    per_task = [r["prefill"] / max(o["prefill"], 1) for r, o in zip(rows[::2], rows[1::2])]
    summary = {
        "engine": args.engine, "model": str(model), "tasks": [t.task_id for t in picked], "n_init": n,
        "n_branch": b, "max_steps": args.max_steps, "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature, "seed": args.seed, "concurrency": args.concurrency,
        "prefill_tree": total("tree", "prefill"), "prefill_independent": total("independent", "prefill"),
        "input_tree": total("tree", "input"), "input_independent": total("independent", "input"),
        "wall_tree_s": total("tree", "wall_s"), "wall_independent_s": total("independent", "wall_s"),
        "scoring_s": total("tree", "scoring_s"), "per_task_prefill_ratio": per_task, "rows": rows,
    }
    ratio = summary["prefill_tree"] / max(summary["prefill_independent"], 1)
    summary["prefill_ratio"] = ratio
    summary["prefill_saved"] = 1 - ratio
    summary["target_met"] = 1 - ratio >= 0.40
    print()
    print(f"engine {args.engine}, model {model}, {len(picked)} tasks, N={n} initial + B={b} branches vs "
          f"{n + b} independent episodes, max_steps {args.max_steps}, seed {args.seed}")
    print("prefill tokens = input tokens of each generation call minus those served from the engine's "
          "prefix cache (cache on in both arms, emptied before each arm)")
    print(f"{'':14}{'prefill':>10}{'input':>10}{'cached':>10}{'generated':>11}{'calls':>7}{'wall s':>9}")
    for arm in ("tree", "independent"):
        print(f"{arm:14}{total(arm, 'prefill'):>10.0f}{total(arm, 'input'):>10.0f}{total(arm, 'cached'):>10.0f}"
              f"{total(arm, 'generated'):>11.0f}{total(arm, 'calls'):>7.0f}{total(arm, 'wall_s'):>9.1f}")
    print(f"prefill tokens, tree / independent: {ratio:.3f} -> {100 * (1 - ratio):.1f}% fewer "
          f"(target >= 40%: {'met' if summary['target_met'] else 'NOT met'}); per task "
          f"{', '.join(f'{x:.3f}' for x in per_task)}")
    tb, ib = total("tree", "branch_prefill"), total("independent", "branch_prefill")
    print(f"prefill of the first N episodes: tree {total('tree', 'init_prefill'):.0f}, independent "
          f"{total('independent', 'init_prefill'):.0f} (same seeds; they differ where tool output differs)")
    print(f"prefill of the B extra episodes: {tb:.0f} as branches ({total('tree', 'branches'):.0f}, "
          f"{total('tree', 'strict_branches'):.0f} strict) vs {ib:.0f} as independent episodes "
          f"({100 * (1 - tb / max(ib, 1)):.1f}% fewer)")
    print(f"input tokens (no prefix cache at all), tree / independent: "
          f"{summary['input_tree'] / max(summary['input_independent'], 1):.3f}")
    print(f"wall time, tree / independent: {summary['wall_tree_s'] / max(summary['wall_independent_s'], 1e-9):.3f} "
          f"(tree includes {summary['scoring_s']:.1f} s of policy scoring)")
    if args.engine == "vllm_server":
        for r in rows:
            print(f"  {r['task']} {r['arm']}: per-request cached {r['cached']} vs /metrics hits "
                  f"{r.get('metrics_hits')} of {r.get('metrics_queries')} queried")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2, default=str))
    return summary


if __name__ == "__main__":
    main()
