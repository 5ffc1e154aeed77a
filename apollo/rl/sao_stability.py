"""The SAO stability run (``make stability``): asynchronous SAO next to asynchronous GRPO on the
countdown sanity environment, the same number of updates, the same policy, tasks and staleness.

Params: section ``sao`` of ``params.yaml`` (the loop, :class:`~apollo.rl.sao_loop.LoopConfig`) with
its subsection ``stability`` (``steps``, ``modes``, ``model``, ``time_budget_s``, ``out``, and
``overrides``: loop keys that differ for this run). The two modes run side by side in two processes
(one CPU thread each). Each mode is an MLflow child run under one parent run ``sao_stability``;
metrics per update: reward, entropy, grad_norm, value_loss, explained_variance, masked_fraction,
staleness (trajectory / token, mean / max), samples/s. Written to ``out``: ``<mode>.jsonl`` (the
history), ``summary.json`` and ``stability.png`` (both modes' curves), the PNG also logged to MLflow.

    python -m apollo.rl.sao_stability                  # params.yaml
    python -m apollo.rl.sao_stability --steps 50 --time-budget-s 600
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import multiprocessing as mp
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
CURVES = ("reward", "entropy", "grad_norm", "value_loss", "explained_variance", "masked_fraction",
          "staleness.token_mean", "samples_per_s")


def _run_mode(mode: str, loop: dict[str, Any], model_path: str, out: str, steps: int, time_budget_s: float | None,
              parent_run_id: str | None, run_name: str | None = None, hist_name: str | None = None) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from apollo import tracking
    from apollo.env.sanity import make_tasks
    from apollo.rl.sao_loop import loop_config, run_loop

    torch.set_num_threads(1)
    cfg = loop_config(loop, mode=mode, steps=steps, num_threads=1)
    model = AutoModelForCausalLM.from_pretrained(model_path).eval()
    tok = AutoTokenizer.from_pretrained(model_path)
    tasks = make_tasks(cfg.n_tasks, seed=cfg.seed)
    hist_path = Path(out) / (hist_name or f"{mode}.jsonl")
    hist_path.parent.mkdir(parents=True, exist_ok=True)
    hist_path.unlink(missing_ok=True)
    with tracking.stage_run(run_name or f"rl_stability@{mode}", params={"sao": {**cfg.__dict__}, "model": model_path},
                            parent_run_id=parent_run_id, tags={"apollo.variant": mode}) as run, \
            open(hist_path, "a", encoding="utf-8") as fh:
        def on_log(step: int, st: dict[str, float]) -> None:
            fh.write(json.dumps({"step": step, **st}) + "\n")
            fh.flush()
            # per-task rewards (64 countdown tasks) stay in the history file, out of MLflow
            run.log_metrics({k: v for k, v in st.items() if not k.startswith(("loss.", "reward.task."))}, step=step)
            if step % 25 == 0:
                log.info("%s step %d reward %.3f entropy %.3f grad_norm %.3f staleness %.2f", run_name or mode, step,
                         st["reward"], st["entropy"], st["grad_norm"], st["staleness.token_mean"])

        res = run_loop(model, tok, tasks, cfg, on_log=on_log, time_budget_s=time_budget_s)
        run.log_metrics({"final_steps": res["steps"], "final_samples_per_s": res["samples_per_s"]})
    res.pop("history")
    return res


def summarize(history: list[dict[str, float]], window: int = 50) -> dict[str, float]:
    """First / last window means of the curves (what the README reports)."""
    def mean(rows: list[dict[str, float]], k: str) -> float:
        vals = [r[k] for r in rows if k in r and isinstance(r[k], (int, float)) and math.isfinite(r[k])]
        return statistics.fmean(vals) if vals else math.nan

    w = min(window, max(1, len(history) // 2))
    first, last = history[:w], history[-w:]
    out: dict[str, float] = {"steps": float(len(history))}
    for k in CURVES:
        out[f"{k}.first"] = mean(first, k)
        out[f"{k}.last"] = mean(last, k)
    return out


def plot(histories: dict[str, list[dict[str, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(18, 7))
    for ax, k in zip(axes.flat, CURVES):
        for mode, h in histories.items():
            rows = [r for r in h if isinstance(r.get(k), (int, float)) and math.isfinite(r[k])]
            xs = [r["step"] for r in rows]
            ys = [r[k] for r in rows]
            if not xs:
                continue
            win = max(1, len(ys) // 40)  # a light moving average; the raw curve faint underneath
            smooth = [statistics.fmean(ys[max(0, i - win + 1): i + 1]) for i in range(len(ys))]
            (line,) = ax.plot(xs, smooth, label=mode)
            ax.plot(xs, ys, color=line.get_color(), alpha=0.2, linewidth=0.5)
        if k == "explained_variance":  # near-constant returns of a small batch give huge negative values
            ax.set_ylim(-1.05, 1.05)
        ax.set_title(k)
        ax.set_xlabel("update")
    axes.flat[0].legend()
    fig.suptitle("Asynchronous SAO vs asynchronous GRPO on the countdown sanity environment")
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=80)
    plt.close(fig)
    tmp.replace(path)


def settings(params: dict[str, Any], *, steps: int | None = None, time_budget_s: float | None = None,
             out: str | None = None) -> dict[str, Any]:
    """The run's settings from params (``sao`` minus its subsections, overlaid with
    ``sao.stability.overrides``) and the command line; the loop config is checked here, before any
    process starts, so a bad key is named at once."""
    from apollo.rl.sao_loop import loop_config, split_section

    loop, subs = split_section(dict(params.get("sao") or {}))
    stab = subs["stability"]
    loop = {**loop, **dict(stab.get("overrides") or {})}
    loop_config(loop)  # names unknown keys
    return {"loop": loop, "steps": int(steps or stab.get("steps", 1000)),
            "time_budget_s": time_budget_s if time_budget_s is not None else stab.get("time_budget_s"),
            "modes": list(stab.get("modes", ["sao", "grpo_async"])),
            "model": stab.get("model", "data/models/base"), "out": out or stab.get("out", "data/rl/stability"),
            "warm_start": {"steps": 0, "lr": 1e-3, "batch_size": 8, **dict(stab.get("warm_start") or {})}}


def warm_start_model(model_path: str, out: Path, spec: dict[str, Any], loop: dict[str, Any]) -> tuple[str, dict[str, float]]:
    """Clone the scripted countdown episodes into ``model_path``'s policy once (both modes start
    from it); written to ``out/warm_start`` through a temporary directory. Returns its path and stats."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from apollo.env.sanity import make_tasks
    from apollo.rl.sao_loop import loop_config, warm_start

    cfg = loop_config(loop)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    tok = AutoTokenizer.from_pretrained(model_path)
    log.info("warm start: %d steps of behaviour cloning on scripted countdown episodes", spec["steps"])
    stats = warm_start(model, tok, make_tasks(cfg.n_tasks, seed=cfg.seed), steps=int(spec["steps"]),
                       lr=float(spec["lr"]), batch_size=int(spec["batch_size"]), seed=cfg.seed,
                       num_threads=torch.get_num_threads())
    dest, tmp = out / "warm_start", out / "warm_start.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    log.info("warm start: demo reward %.3f, loss %.3f -> %.3f", stats["demo_reward"], stats["loss_first"],
             stats["loss_last"])
    return str(dest), stats


def main(argv: list[str] | None = None) -> int:
    from apollo import tracking
    from apollo.config import load_params, project_root

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--time-budget-s", type=float, default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(processName)s %(message)s")
    st = settings(load_params(args.params), steps=args.steps, time_budget_s=args.time_budget_s, out=args.out)
    loop, steps, budget, modes = st["loop"], st["steps"], st["time_budget_s"], st["modes"]
    model_path = str(project_root() / st["model"])
    if not Path(model_path, "config.json").exists():
        raise SystemExit(f"{model_path}: no model (build it with `python -m apollo stage bootstrap`)")
    out = project_root() / st["out"]
    out.mkdir(parents=True, exist_ok=True)
    parent = tracking.start_parent_run("sao_stability", params={"steps": steps, "modes": modes,
                                                                "warm_start": st["warm_start"]})
    ctx = mp.get_context("spawn")
    results: dict[str, Any] = {}
    try:
        warm: dict[str, float] = {}
        if int(st["warm_start"]["steps"]) > 0:
            model_path, warm = warm_start_model(model_path, out, st["warm_start"], loop)
            parent.log_metrics({f"warm_start.{k}": v for k, v in warm.items()})
        with ProcessPoolExecutor(len(modes), mp_context=ctx) as pool:
            futs = {m: pool.submit(_run_mode, m, loop, model_path, str(out), steps, budget, parent.run_id)
                    for m in modes}
            for m, f in futs.items():
                results[m] = f.result()
        histories = {m: [json.loads(line) for line in (out / f"{m}.jsonl").read_text().splitlines()] for m in modes}
        plot(histories, out / "stability.png")
        summary = {m: {**summarize(histories[m]), "samples_per_s": results[m]["samples_per_s"],
                       "seconds": results[m]["seconds"], "dropped_stale": results[m]["dropped_stale"]}
                   for m in modes}
        summary["warm_start"] = warm
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        parent.log_artifact(out / "stability.png")
        parent.log_artifact(out / "summary.json")
    except BaseException:
        tracking.end_run(parent, "FAILED")
        raise
    tracking.end_run(parent)
    if warm:
        print(f"warm start: {int(warm['steps'])} steps, demo reward {warm['demo_reward']:.3f}, "
              f"loss {warm['loss_first']:.3f} -> {warm['loss_last']:.3f}")
    for m in modes:
        s = summary[m]
        print(f"{m}: {int(s['steps'])} updates in {s['seconds']:.0f} s; reward {s['reward.first']:.3f} -> "
              f"{s['reward.last']:.3f}, entropy {s['entropy.first']:.3f} -> {s['entropy.last']:.3f}, "
              f"grad_norm {s['grad_norm.first']:.3f} -> {s['grad_norm.last']:.3f}")
    print(f"curves: {out / 'stability.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
