"""RL stage (``rl@<variant>-<seed>``): a policy trained by an RL method from the base policy →
``data/models/<variant>/s<seed>`` (evaluated by ``evaluate@<variant>-<seed>`` like any trained variant).

Methods: ``appo`` (:mod:`apollo.rl.appo_loop`; params ``appo``, a variant's overrides in
``appo.variants.<variant>``); ``sao``, ``grpo_async``, ``grpo_sync`` (the asynchronous loop of
:mod:`apollo.rl.sao_loop` on the mini suite's agent tasks, :mod:`apollo.rl.sao_agent`; params
``sao`` with ``sao.agent`` for the agent episodes and ``sao.variants.<variant>``, e.g. ``sao_guided``:
the simulated annotator guides the episodes and the action masks take dropped actions out of the
loss). The variant's row in ``experiment.variants`` is ``{policy: <method>}``
and the variant is listed in ``experiment.<method>``, in ``experiment.rl`` (the ``rl`` matrix of
``dvc.yaml``) and in ``experiment.evaluated``. Per-iteration checkpoints go to ``data/checkpoints/<variant>/s<seed>/``
(outside the DVC output, which DVC clears before a run), so a killed stage resumes after its last
finished iteration. MLflow: one metric per iteration (``appo.reward.mean`` …, step = iteration),
the summary (``appo.reward_slope`` …), the policy registered as ``apollo-policy-<variant>``.

Run: ``python -m apollo stage rl --method appo --variant appo --seed 0`` (what ``dvc.yaml``
runs), through :func:`apollo.stages.run_stage` (params guard, MLflow child run, provenance tags).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from apollo.config import Paths
from apollo.rl.trend import task_points, trend_metrics
from apollo.schema import atomic_write_text

log = logging.getLogger(__name__)
SAO_METHODS = ("sao", "grpo_async", "grpo_sync")
METHODS = ("appo", *SAO_METHODS)
# sao.agent / sao.variants keys that shape the agent episodes (the rest are the loop's, apollo.rl.sao_loop.LoopConfig)
AGENT_KEYS = ("tasks", "max_steps", "context_tokens", "command_timeout_s", "max_output_chars", "masks", "guided",
              "annotator", "guidance", "updates_per_task")


def resume_points(params: dict[str, Any], variant: str, method: str) -> list[int]:
    """Where the Prefect subflow (``flows/rl.py``) ends a task and the next resumes from the
    checkpoint: APPO after every iteration but the last; the SAO family every
    ``sao.agent.updates_per_task`` updates (default 4) before the last. The last segment runs
    through ``dvc repro``, so it is not listed."""
    if method == "appo":
        from apollo.rl.appo_loop import AppoConfig

        return list(range(1, AppoConfig.from_params(params, variant).iterations))
    if method not in SAO_METHODS:
        raise ValueError(f"rl: unknown method {method!r} (known: {', '.join(METHODS)})")
    cfg, agent = sao_config(params, variant, method)
    every = int(agent.get("updates_per_task", 4))
    if every < 1:
        raise ValueError(f"params.yaml: sao.agent.updates_per_task must be ≥ 1, got {every}")
    return list(range(every, cfg.steps, every))


def check_variant(params: dict[str, Any], variant: str, method: str) -> None:
    """The variant is a row ``{policy: <method>}`` of the table, listed in ``experiment.<method>``
    (the rl matrix) and ``experiment.evaluated``."""
    from apollo.experiment.variants import VariantTableError, check_table, experiment_section

    table = check_table(params)
    if variant not in table:
        raise VariantTableError(f"params.yaml: experiment.variants has no variant '{variant}'")
    if table[variant].policy != method:
        raise VariantTableError(f"params.yaml: experiment.variants.{variant}.policy is "
                                f"'{table[variant].policy}', not '{method}'")
    e = experiment_section(params)
    listed = e.get(method)
    want = sorted(v.name for v in table.values() if v.policy == method)
    if not isinstance(listed, list) or sorted(listed) != want:
        raise VariantTableError(f"params.yaml: experiment.{method} is {listed!r} but the variant table gives {want}; "
                                "list the same variants")
    rl = sorted(v.name for v in table.values() if v.policy in METHODS)
    if not isinstance(e.get("rl"), list) or sorted(e["rl"]) != rl:
        raise VariantTableError(f"params.yaml: experiment.rl is {e.get('rl')!r} but the variant table's RL variants "
                                f"are {rl}: dvc.yaml's rl matrix reads experiment.rl; list the same variants")


def run(params: dict[str, Any], tracker=None, paths: Paths | None = None, variant: str = "appo",
        method: str = "appo", iterations: int | None = None) -> dict[str, Any]:
    """Run (or resume) the method's iterations; ``iterations`` stops after that many (Prefect: one
    task per iteration). Returns the summary metrics."""
    from apollo.rl.appo_loop import AppoConfig, run_appo

    if method not in METHODS:
        raise ValueError(f"rl: unknown method {method!r} (known: {', '.join(METHODS)})")
    if "experiment" in params:
        check_variant(params, variant, method)
    paths = paths or Paths.default()
    if method in SAO_METHODS:
        return run_sao(params, tracker, paths, variant, method, iterations)
    cfg = AppoConfig.from_params(params, variant)
    seed = int(params.get("seed", 0))

    def on_metrics(it: int, m: dict[str, float]) -> None:
        if tracker is not None:
            tracker.log_metrics({f"appo.{k}": v for k, v in m.items()}, step=it)

    from apollo.rl.distributed import deepspeed_learner

    opts = deepspeed_learner(cfg.learner, "appo.learner")
    if opts is not None:  # the update on world_size DeepSpeed ranks, the loop on rank 0 (docs/training.md)
        summary = _appo_on_ranks(params, opts, paths, variant, seed, iterations, on_metrics)
    else:
        summary = run_appo(cfg, base_model=paths.base_model, out=paths.model(variant),
                           checkpoint_dir=paths.checkpoints(variant), seed=seed, variant=variant,
                           on_metrics=on_metrics, iterations=iterations)
    if tracker is not None:
        tracker.log_metrics(summary)
    if iterations is None or iterations >= cfg.iterations:
        from transformers import AutoModelForCausalLM

        AutoModelForCausalLM.from_pretrained(paths.model(variant))  # the policy must load
    return summary


def _appo_on_ranks(params: dict[str, Any], opts: Any, paths: Paths, variant: str, seed: int,
                   iterations: int | None, on_metrics: Any) -> dict[str, Any]:
    """``python -m apollo.rl.rl_ranks appo`` on ``opts.world_size`` ranks under ``opts.launcher`` (the
    pod's GPUs, or CPU gloo ranks): rank 0 runs the loop and saves the policy; the iterations it
    recorded go to MLflow afterwards (``appo_history.json`` once the run is finished)."""
    import json

    from apollo.rl.rl_ranks import launch

    out, ckpt = paths.model(variant), paths.checkpoints(variant)
    spec = {"params": params, "variant": variant, "seed": seed, "base_model": str(paths.base_model),
            "out": str(out), "checkpoint_dir": str(ckpt), "iterations": iterations}
    log.info("rl: APPO update on %d DeepSpeed rank(s) (ZeRO-%d, launcher %s)", opts.world_size, opts.zero_stage,
             opts.launcher)
    summary = launch("appo", spec, opts.world_size, opts.launcher, work=ckpt.parent / f"{ckpt.name}.ranks")
    hist = out / "appo_history.json"
    if hist.exists():
        for h in json.loads(hist.read_text()):
            on_metrics(int(h["iteration"]), {k: v for k, v in h.items() if k != "iteration" and isinstance(v, (int, float))})
    return summary


def run_cell(method: str | None, variant: str | None, seed: int | None, *, iterations: int | None = None,
             parent_run_id: str | None = None, register: bool = True) -> dict[str, Any]:
    """The stage as ``dvc repro`` runs it: :func:`apollo.stages.run_stage` with this module.
    ``method`` None: the variant's ``policy`` in ``experiment.variants``; ``variant`` None: the method."""
    import sys

    from apollo.stages import run_stage

    if variant is None and method is None:
        raise ValueError("rl: give --variant (its method comes from params.yaml experiment.variants) or --method")
    if variant is None:
        variant = method
    if method is None:
        from apollo.config import load_params
        from apollo.experiment.variants import variant as variant_row

        method = variant_row(load_params(), variant).policy

    mod = sys.modules[__name__]

    class _Bound:  # run_stage calls module.run(params, tracker, paths=..., variant=...)
        @staticmethod
        def run(params, tracker=None, paths=None, variant=variant):
            metrics = mod.run(params, tracker, paths, variant, method, iterations)
            finished = (iterations is None or metrics.get("sao.finished")
                        or metrics.get("appo.iterations", 0) >= int(params["appo"]["iterations"]))
            if register and tracker is not None and finished:
                from apollo.config import project_root
                from apollo.tracking import log_policy

                try:
                    log_policy(tracker, (paths or Paths(project_root())).model(variant), variant, seed=seed)
                except Exception as e:  # the registry is a view; the policy is the DVC output
                    log.warning("could not register the policy in MLflow: %s", e)
            return metrics

    return run_stage("rl", variant=variant, seed=seed, module=_Bound, parent_run_id=parent_run_id)


def sao_config(params: dict[str, Any], variant: str, method: str) -> tuple[Any, dict[str, Any]]:
    """(loop config, agent settings) of an SAO-family variant: ``sao`` without its ``stability``,
    ``agent`` and ``variants`` parts, then ``sao.agent.overrides``, then ``sao.variants.<variant>``;
    the mode is the method. Unknown keys are named."""
    from apollo.config import section
    from apollo.rl.sao_loop import loop_config, split_section

    p, subs = split_section(section(params, "sao"))
    agent, variants = subs["agent"], subs["variants"]
    over = {**(agent.pop("overrides", None) or {}), **(variants.get(variant) or {})}
    unknown = sorted(set(agent) - set(AGENT_KEYS))
    if unknown:
        raise ValueError(f"params.yaml: sao.agent: unknown key(s) {unknown} (agent keys {list(AGENT_KEYS)}, "
                         "loop keys under sao.agent.overrides)")
    for k, v in over.items():
        (agent if k in AGENT_KEYS else p)[k] = v
    if p.get("mode", method) != method:
        log.info("sao: variant %s runs mode %s (its method), not sao.mode %s", variant, method, p.get("mode"))
    p["mode"] = method
    p["seed"] = int(params.get("seed", 0))
    return loop_config(p), agent


def run_sao(params: dict[str, Any], tracker, paths: Paths, variant: str, method: str,
            steps: int | None = None) -> dict[str, Any]:
    """The asynchronous loop on agent tasks, resumable from ``data/checkpoints/<variant>/s<seed>/``
    (the persisted buffer and learner state); ``steps`` stops after that many updates."""
    import contextlib
    import dataclasses
    import shutil
    import tempfile

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from apollo.agent.react import AgentConfig
    from apollo.config import section
    from apollo.env.tasks import list_tasks
    from apollo.rl.sao_agent import AgentEpisodes
    from apollo.rl.sao_loop import run_loop

    cfg, agent = sao_config(params, variant, method)
    full_steps = cfg.steps
    if steps is not None:
        cfg = dataclasses.replace(cfg, steps=min(int(steps), cfg.steps))
    tasks = list_tasks(split="train")
    if agent.get("tasks"):
        unknown = sorted(set(agent["tasks"]) - {t.task_id for t in tasks})
        if unknown:
            raise ValueError(f"params.yaml: sao.agent.tasks: no train task {unknown}")
        tasks = [t for t in tasks if t.task_id in set(agent["tasks"])]
    context = int(agent.get("context_tokens", 3800))
    acfg = AgentConfig(max_steps=int(agent.get("max_steps", 12)), context_tokens=context,
                       command_timeout_s=float(agent.get("command_timeout_s", 20)),
                       max_output_chars=int(agent.get("max_output_chars", 1500)))
    masker = None
    if agent.get("masks"):
        from apollo.config import project_root
        from apollo.supervision.masker import Masker, MaskConfig

        masker = Masker(MaskConfig.from_params(section(params, "mask")), root=project_root())
    ckpt = paths.checkpoints(variant)
    ckpt.mkdir(parents=True, exist_ok=True)
    model = AutoModelForCausalLM.from_pretrained(paths.base_model)
    tok = AutoTokenizer.from_pretrained(paths.base_model)

    history = ckpt / "history.jsonl"  # every update's stats, across resumes

    def on_log(step: int, m: dict[str, float]) -> None:
        with open(history, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"step": step, **m}) + "\n")
        if tracker is not None:
            tracker.log_metrics({f"sao.{k}": v for k, v in m.items()}, step=step)

    with contextlib.ExitStack() as stack:
        if masker is not None:
            stack.callback(masker.close)
        channel = None
        if agent.get("guided"):
            from apollo.guidance.annotator import AnnotatorConfig
            from apollo.guidance.runtime import stage_session

            acfg_ann = AnnotatorConfig.from_params(agent.get("annotator"))
            db = paths.data / "store" / f"guidance-rl-{variant}-s{paths.seed or 0}.sqlite"  # kept after the run
            db.parent.mkdir(parents=True, exist_ok=True)
            channel = stack.enter_context(stage_session({"guidance": agent.get("guidance") or {}}, db, acfg_ann))
        episodes = AgentEpisodes(tasks, acfg, max_context=context + cfg.max_new_tokens + 64, guidance=channel,
                                 masker=masker)
        result = run_loop(model, tok, tasks, cfg, out_dir=ckpt, on_log=on_log, save_every=1,
                          episode=episodes.episode, max_context=episodes.max_context)
    hist = [json.loads(line) for line in history.read_text(encoding="utf-8").splitlines() if line.strip()] \
        if history.exists() else []
    third = max(1, len(hist) // 3)
    rewards = [h["reward"] for h in hist]
    # totals over the whole history (a cell runs as several resumed segments; `result` is this one's)
    trained = sum(h.get("rollouts", 0.0) for h in hist)
    loop_s = sum(h.get("wait_s", 0.0) + h.get("update_s", 0.0) for h in hist)
    summary = {"sao.steps": float(result["steps"]), "sao.policy_version": float(result["policy_version"]),
               "sao.trained_samples": float(trained), "sao.samples_per_s": trained / loop_s if loop_s else 0.0,
               "sao.dropped_stale": float(result["dropped_stale"]), "sao.seconds": loop_s,
               "sao.finished": float(result["steps"] >= full_steps),
               "sao.crashed_episodes": float(episodes.crashed)}  # this run's (a resumed segment: since it started)
    if rewards:
        summary.update({"sao.reward_first_third": sum(rewards[:third]) / len(rewards[:third]),
                        "sao.reward_last_third": sum(rewards[-third:]) / len(rewards[-third:])})
    # does the reward rise: the within-task slope per update with its 95% interval (apollo.rl.trend)
    summary.update(trend_metrics(task_points(hist, x="step"), "sao"))
    if tracker is not None:
        tracker.log_metrics(summary)
    if result["steps"] >= full_steps:  # finished: the policy goes where evaluate@<variant>-<seed> reads
        out = paths.model(variant)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        atomic_write_text(tmp / "sao_stats.json", json.dumps(summary, indent=2) + "\n")
        atomic_write_text(tmp / "sao_history.json", json.dumps(hist, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.replace(out)
        shutil.rmtree(ckpt)  # the policy is the DVC output now; a rerun starts afresh
    return summary
