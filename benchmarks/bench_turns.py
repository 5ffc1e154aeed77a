"""The hf engine's batcher on a fixed multi-turn workload: what the rollout/evaluate stages ask of it,
without the sampling noise of real episodes.

Each of ``--episodes`` threads plays an agent: a first prompt of ``--prompt`` tokens (+ 40 per
episode: different lengths), then ``--turns`` turns, each generating exactly ``--gen`` tokens (no
end-of-sequence stop) and appending ``--obs`` tokens of tool output after a ``--tool-s`` pause; at
turn ``--window-turn`` the context is rebuilt (the first half of the prompt kept, ``--window`` new
tokens after it), as the agent's summarization does. Every arm runs the same token ids, so the arms
do the same work: the comparison is wall seconds (and input + generated tokens per second).

Arms (one process each, the same run):
* **lone** (the baseline): ``max_batch 1`` and the prefix KV cache, each call prefilling what the
  cache does not hold and decoding alone (transformers forward, ``DynamicCache``);
* **batched**: continuous batching, ``max_batch = episodes``, chunked prefill in the shared
  forwards, parked rows as the prefix cache (what the stages run);
* **batched_nocache**: the same without parked rows (every turn prefills its whole input).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_turns.py [--model data/models/base] [--episodes 8]
        [--turns 4] [--arms lone batched batched_nocache] [--dtype auto]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path


def workload(args, vocab: int, special: set[int]) -> list[list[tuple[list[int], int]]]:
    """Per episode, the list of (input ids, new tokens) of its calls; generated tokens are filled in
    as the run goes (they extend the next input), so only the random parts are fixed here."""
    import random

    rng = random.Random(0)
    pool = [i for i in range(vocab) if i not in special]
    return [[[rng.choice(pool) for _ in range(n)] for n in
             [args.prompt + 40 * e] + [args.obs] * args.turns + [args.window]] for e in range(args.episodes)]


def run_arm(args) -> dict:
    import torch

    from apollo.engines.hf import HFEngine
    from apollo.engines.hf_batch import DecodeRequest

    torch.manual_seed(0)
    batched = args.arm.startswith("batched")
    eng = HFEngine(args.model, temperature=1.0, max_new_tokens=args.gen, max_context=4096, dtype=args.dtype,
                   max_batch=args.episodes if batched else 1,
                   prefix_cache_tokens=0 if args.arm == "batched_nocache" else 60_000, decode_threads=args.threads)
    if not batched:
        torch.set_num_threads(args.threads)
    eng.eos_ids = []  # every call generates exactly --gen tokens: the arms do the same work
    if eng.batcher is not None:
        eng.batcher.eos = set()
    tok = eng.tokenizer
    parts = workload(args, len(tok), set(tok.all_special_ids))
    counts = {"input": 0, "prefilled": 0, "generated": 0}
    lock = threading.Lock()

    def call(ids: list[int], seed: int) -> list[int]:
        rng = torch.Generator().manual_seed(seed)
        if eng.batcher is not None:
            req = eng.batcher.submit(DecodeRequest(ids=list(ids), limit=args.gen, rng=rng))
            reused, new = req.reused, req.new
        else:
            reused, new = eng._decode(list(ids), args.gen, rng)[:2]
        with lock:
            counts["input"] += len(ids)
            counts["prefilled"] += len(ids) - reused
            counts["generated"] += len(new)
        return new

    def episode(e: int) -> None:
        first, *obs, window = parts[e]
        ids = list(first)
        for t in range(args.turns):
            if t == args.window_turn:
                ids = ids[: len(first) // 2] + window
            ids = ids + call(ids, 1000 * e + t)
            time.sleep(args.tool_s)
            ids = ids + obs[t]

    t0 = time.perf_counter()
    threads = [threading.Thread(target=episode, args=(e,)) for e in range(args.episodes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    out = {"arm": args.arm, "wall_s": round(wall, 1), **counts}
    if eng.batcher is not None:
        out["mean_decode_batch"] = round(eng.batcher.rows / max(eng.batcher.forwards, 1), 2)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="data/models/base")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=800)
    ap.add_argument("--obs", type=int, default=200)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--window", type=int, default=500)
    ap.add_argument("--window-turn", type=int, default=3)
    ap.add_argument("--tool-s", type=float, default=0.3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--arms", nargs="+", default=["lone", "batched", "batched_nocache"])
    ap.add_argument("--arm", default=None, help=argparse.SUPPRESS)  # one arm, in this process
    args = ap.parse_args(argv)
    if args.arm:
        print(json.dumps(run_arm(args)))
        return 0
    if not (Path(args.model) / "config.json").exists():
        raise SystemExit(f"{args.model}: no model (run the bootstrap stage, or pass --model)")
    rows = []
    for arm in args.arms:  # one process per arm: no arm inherits another's caches or threads
        cmd = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--arm", arm]
        p = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if p.returncode:
            raise SystemExit(f"arm {arm} failed:\n{p.stderr[-3000:]}")
        rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    base = next((r for r in rows if r["arm"] == "lone"), rows[0])
    print(f"\n{args.episodes} episodes x {args.turns} turns, {args.gen} tokens a turn, model {args.model} ({args.dtype})")
    print("| arm | wall s | input tokens | prefilled | generated | (input+gen)/s | vs " + base["arm"] + " |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['arm']} | {r['wall_s']} | {r['input']} | {r['prefilled']} | {r['generated']} | "
              f"{(r['input'] + r['generated']) / r['wall_s']:.0f} | {base['wall_s'] / r['wall_s']:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
