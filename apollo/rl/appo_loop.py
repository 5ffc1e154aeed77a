"""The APPO iteration loop (arXiv 2606.12384) on agent tasks, with the one trainer.

One iteration, from the current policy ``π_k``:

1. **tree rollouts** (:func:`apollo.rl.tree.atree_rollout`) on ``tasks_per_iteration`` train
   tasks (drawn per iteration from ``seed``): ``n_init`` episodes per task, then ``n_branch``
   branches at tokens of high entropy × future value;
2. **reward** = final score / 100; **advantages**: :func:`~apollo.rl.appo.dual_group_advantages`
   (GRPO within (task, init|branch); ``single_group``: one group per task), then
   :func:`~apollo.rl.appo.branch_credit` onto the initial episodes' tokens (branch rows are not
   trained);
3. **rows** (:mod:`apollo.rl.rows`): the sampled tokens with their advantages and rollout
   logprobs; trajectories whose tokens all have advantage 0 carry no signal and are left out;
4. **one update** with the one loop (:func:`apollo.train.loop.train`) and the APPO objective
   (:class:`~apollo.rl.appo_objective.AppoObjective`: future-aware advantage inside the loss,
   dual-clip PPO, optional k3 KL to the reference policy). The optimizer (AdamW, torch engine)
   lives across iterations;
5. the updated weights become ``π_{k+1}``: the in-process ``hf`` engine shares the trained model
   (its prefix KV cache is cleared, its ``policy_version`` set); a served ``vllm_server`` engine
   gets ``update_weights`` from the checkpoint just written;
6. **checkpoint** (:class:`IterationCheckpoints`): policy, optimizer, RNG and the iteration's
   state, written to a temporary folder and renamed; ``latest`` names the last complete one.

Resume: a run started again with the same :func:`fingerprint` (config, base model, seed, variant)
continues after the last finished iteration; a changed run starts afresh.

``entropy_only`` (ablation): branch points by entropy alone. :func:`apollo.rl.tree.plan_branches`
scores ``Z(H)·Z(FV)``; the entropy-only scorer reports current-policy logprobs whose future value
is a monotone function of each token's entropy, so ``Z(FV)`` ranks tokens as ``Z(H)`` does, the
strict candidates are the tokens of above-mean entropy and they are taken by entropy.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from statistics import mean, pstdev
from typing import Any

import torch

from apollo.rl.tempered import tempered
from apollo.rl.trend import task_points, trend_metrics
from apollo.schema import Trajectory

log = logging.getLogger(__name__)


@dataclass
class AppoConfig:
    """``params.yaml: appo`` (every field set there; a variant's overrides in ``appo.variants``)."""

    iterations: int
    tasks_per_iteration: int
    tasks: list[str] | None  # restrict to these train tasks (null: every train task)
    n_init: int  # N: initial episodes per task
    n_branch: int  # B: branches per task (budget N + B)
    gamma: float  # branch score: future-value discount
    fv_clip: float  # branch score: FV clip
    decay_rate: float  # future-aware: half-life in tokens
    weight: float  # future-aware: Ã = A(1 + weight·f); 0 = plain dual-clip PPO
    future_eps: float  # future-aware: f ∈ [1, 1 + future_eps]
    clip_low: float  # dual-clip PPO
    clip_high: float
    clip_c: float
    single_group: bool  # one GRPO group per task (init and branch together) instead of dual groups
    entropy_only: bool  # branch points by entropy alone
    norm_by_std: bool  # GRPO: divide by the group std
    kl_coef: float  # k3 KL to the reference (base) policy; 0: off
    loss_agg: str  # token_mean (the reference's: every trained token weighs the same) | seq_mean (every episode)
    task_sampling: str  # uniform (the reference's) | mixed (tasks whose last group was all-equal drawn less)
    flat_task_weight: float  # task_sampling mixed: the draw weight of such a task (others 1)
    engine: str  # hf | vllm_server
    temperature: float
    max_new_tokens: int
    max_steps: int  # agent steps per episode
    context_tokens: int
    command_timeout_s: float
    max_output_chars: int
    concurrency: int  # episodes in flight per task
    prefix_cache_tokens: int  # hf engine: prefix KV cache (branches reuse their parent's prefill)
    max_batch: int  # hf engine: concurrent calls decoded together (apollo.engines.hf_batch; 1: each alone)
    keep_checkpoints: int
    train: dict[str, Any]  # the loop fields of apollo.train.config.TrainConfig (all of them)
    server: dict[str, Any] = field(default_factory=dict)  # engine vllm_server: as rollout.server
    learner: dict[str, Any] = field(default_factory=dict)  # where the update runs (apollo.rl.distributed); {}: torch

    @classmethod
    def from_params(cls, params: dict[str, Any], variant: str | None = None) -> AppoConfig:
        """``params['appo']`` with ``appo.variants[variant]`` overlaid; unknown keys are named."""
        from apollo.config import section

        p = dict(section(params, "appo"))
        variants = p.pop("variants", None) or {}
        if variant is not None and variant in variants:
            over = variants[variant] or {}
            unknown = sorted(set(over) - {f.name for f in fields(cls)})
            if unknown:
                raise ValueError(f"params.yaml: appo.variants.{variant}: unknown key(s) {unknown}")
            for k, v in over.items():  # a dict (train, server) is overlaid key by key, not replaced
                p[k] = {**p[k], **v} if isinstance(v, dict) and isinstance(p.get(k), dict) else v
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(p) - known)
        if unknown:
            raise ValueError(f"params.yaml: appo: unknown key(s) {unknown} (known: {sorted(known)})")
        missing = sorted(f.name for f in fields(cls) if f.name not in p and f.name not in ("server", "learner"))
        if missing:
            raise ValueError(f"params.yaml: appo: missing key(s) {missing} (there are no defaults in code)")
        cfg = cls(**p)
        if cfg.iterations < 1 or cfg.tasks_per_iteration < 1 or cfg.n_init < 2 or cfg.n_branch < 0:
            raise ValueError("params.yaml: appo: iterations ≥ 1, tasks_per_iteration ≥ 1, n_init ≥ 2 (a GRPO "
                             f"group needs two), n_branch ≥ 0; got {cfg.iterations}, {cfg.tasks_per_iteration}, "
                             f"{cfg.n_init}, {cfg.n_branch}")
        if cfg.loss_agg not in ("token_mean", "seq_mean"):
            raise ValueError(f"params.yaml: appo.loss_agg must be token_mean or seq_mean, not {cfg.loss_agg!r}")
        if cfg.task_sampling not in ("uniform", "mixed") or not 0.0 < cfg.flat_task_weight <= 1.0:
            raise ValueError("params.yaml: appo.task_sampling must be uniform or mixed and flat_task_weight in "
                             f"(0, 1]; got {cfg.task_sampling!r}, {cfg.flat_task_weight}")
        if cfg.engine not in ("hf", "vllm_server"):
            raise ValueError(f"params.yaml: appo.engine must be hf or vllm_server, not {cfg.engine!r}")
        return cfg


# --- advantages ------------------------------------------------------------------------------------


def equal_episode_weight(rows: list[dict[str, Any]]) -> None:
    """``loss_agg: seq_mean``: scale each row's advantages by ``L̄ / L_e`` (``L_e`` the trained tokens
    of its episode over the iteration's rows, ``L̄`` their mean over episodes), so the trainer's token
    mean weighs every episode the same. With the token mean a long failing episode outweighs a short
    successful one of the same group, and the update pushes the sampled tokens down on balance
    although the group's advantages sum to 0. Dual-clip PPO is positively homogeneous in the
    advantage, so the scaling is exactly a reweighting of tokens."""
    from apollo.train.batching import IGNORE_INDEX

    n: dict[str, int] = {}
    for r in rows:
        n[r["trajectory_id"]] = n.get(r["trajectory_id"], 0) + sum(1 for x in r["labels"] if x != IGNORE_INDEX)
    live = [v for v in n.values() if v > 0]
    if not live:
        return
    mean_len = sum(live) / len(live)
    for r in rows:
        k = n[r["trajectory_id"]]
        if k > 0:
            r["advantages"] = [a * mean_len / k for a in r["advantages"]]


def without_crashes(trajs: list[Trajectory]) -> list[Trajectory]:
    """``trajs`` less the crashed ones (``finish_reason == "error"``: a tool or the workspace failed,
    the final score says nothing of the policy) and the branches of a crashed initial episode."""
    crashed = {t.trajectory_id for t in trajs if t.finish_reason == "error"}
    return [t for t in trajs if t.trajectory_id not in crashed and t.parent_trajectory_id not in crashed]


def appo_token_advantages(trajs: list[Trajectory], *, single_group: bool = False,
                          norm_by_std: bool = True) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Per initial trajectory id, the token advantages of its flat response (dual-group GRPO +
    branch credit), and statistics. Branch trajectories get none (not trained)."""
    from apollo.rl.appo import branch_credit, dual_group_advantages
    from apollo.rl.tree import response_tokens, tree_batch

    batch = tree_batch(trajs)
    kinds = ["init"] * len(trajs) if single_group else batch["kinds"]
    seq = dual_group_advantages(batch["rewards"], batch["prompt_ids"], kinds, norm_by_std=norm_by_std)
    inits = [trajs[i] for i in batch["init_rows"]]
    lengths = [len(response_tokens(t)) for t in inits]
    width = max(lengths, default=0)
    mask = torch.zeros(len(inits), max(1, width))
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    ix_i = torch.tensor(batch["init_rows"], dtype=torch.long)
    ix_b = torch.tensor(batch["branch_rows"], dtype=torch.long)
    tok = branch_credit(seq[ix_i], seq[ix_b], batch["branch_parent"], batch["branch_split"], mask)
    out = {t.trajectory_id: tok[i, :n].tolist() for i, (t, n) in enumerate(zip(inits, lengths))}
    m = mask.bool()
    vals = tok[m]
    stats = {
        "adv.seq_mean": float(seq.mean()) if len(seq) else 0.0,
        "adv.seq_std": float(seq.std(correction=0)) if len(seq) > 1 else 0.0,
        "adv.token_mean": float(vals.mean()) if vals.numel() else 0.0,
        "adv.token_abs_mean": float(vals.abs().mean()) if vals.numel() else 0.0,
        "adv.token_pos_fraction": float((vals > 0).float().mean()) if vals.numel() else 0.0,
        "adv.token_zero_fraction": float((vals == 0).float().mean()) if vals.numel() else 0.0,
        "adv.branch_credit_abs_mean": float((tok - seq[ix_i][:, None] * mask)[m].abs().mean()) if vals.numel() else 0.0,
    }
    return out, stats


class EntropyOnlyScorer:
    """Wraps a scorer so that :func:`apollo.rl.tree.plan_branches` ranks by entropy alone (module
    docstring): the reported logprobs make ``FV_t = 1 + 0.1·z(H_t)/max|z(H)|`` (inside the clip)."""

    def __init__(self, scorer: Callable[[Trajectory], tuple[list[float], list[float]]], gamma: float):
        self.scorer, self.gamma = scorer, gamma

    def __call__(self, traj: Trajectory) -> tuple[list[float], list[float]]:
        from apollo.rl.tree import response_tokens

        lps, ents = self.scorer(traj)
        r = response_tokens(traj)
        h = torch.tensor(r.entropies if r.entropies is not None else ents, dtype=torch.float64)
        roll = torch.tensor(r.logprobs if r.logprobs is not None else lps, dtype=torch.float64)
        if len(h) == 0:
            return lps, ents
        z = (h - h.mean()) / (h.std(correction=0) + 1e-6)
        s = torch.log1p(0.1 * z / z.abs().max().clamp(min=1e-6))  # the wanted future sum S_t
        nxt = torch.cat([s[1:], torch.zeros(1, dtype=s.dtype)])
        d = s - self.gamma * nxt  # S_t = d_t + γ S_{t+1}
        return (roll + d).tolist(), ents


# --- checkpoints -----------------------------------------------------------------------------------


def fingerprint(cfg: AppoConfig, base: Path, seed: int, variant: str) -> str:
    """What must not change for a run to resume: config, base model files, seed, variant."""
    from apollo.train.checkpoint import _file_digest

    h = hashlib.sha256(json.dumps({"cfg": asdict(cfg), "seed": seed, "variant": variant}, sort_keys=True,
                                  default=str).encode())
    for p in sorted(Path(base).rglob("*")):
        if p.is_file():
            _file_digest(p, h)
    return h.hexdigest()[:16]


class IterationCheckpoints:
    """``root/iter-0003/`` = the state after iteration 3: ``policy/`` (HF), ``trainer.pt``
    (optimizer, schedule, RNG), ``state.json`` (iteration, history); ``root/latest`` names the
    last complete one, ``root/fingerprint.txt`` the run it belongs to."""

    def __init__(self, root: Path, fp: str, keep: int = 2):
        self.root, self.fp, self.keep = Path(root), fp, max(1, keep)

    def latest(self) -> Path | None:
        from apollo.train.checkpoint import write_atomic

        latest, fp_file = self.root / "latest", self.root / "fingerprint.txt"
        if latest.exists() and fp_file.exists() and fp_file.read_text().strip() == self.fp:
            d = self.root / latest.read_text().strip()
            if (d / "state.json").exists():
                return d
        if self.root.exists() and any(self.root.iterdir()):
            log.warning("checkpoints in %s are not this run's (fingerprint): starting afresh", self.root)
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        write_atomic(self.root / "fingerprint.txt", self.fp + "\n")
        return None

    def save(self, iteration: int, model: Any, tokenizer: Any, trainer_state: dict[str, Any],
             state: dict[str, Any]) -> Path:
        import tempfile

        from apollo.models.bootstrap import save_model
        from apollo.train.checkpoint import _rng_state, write_atomic

        name = f"iter-{iteration:04d}"
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=self.root))
        try:
            save_model(tmp / "policy", model, tokenizer)
            torch.save({**trainer_state, "rng": _rng_state()}, tmp / "trainer.pt")
            (tmp / "state.json").write_text(json.dumps(state, indent=1, default=float) + "\n")
            dst = self.root / name
            if dst.exists():
                shutil.rmtree(dst)
            tmp.rename(dst)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        write_atomic(self.root / "latest", name)  # only now is the iteration finished
        done = sorted(p.name for p in self.root.iterdir() if p.is_dir() and p.name.startswith("iter-"))
        for old in done[: -self.keep]:
            shutil.rmtree(self.root / old, ignore_errors=True)
        return dst

    @staticmethod
    def load(d: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        from apollo.train.checkpoint import _set_rng_state

        trainer = torch.load(d / "trainer.pt", weights_only=False)
        _set_rng_state(trainer.pop("rng"))
        return trainer, json.loads((d / "state.json").read_text())


# --- the loop --------------------------------------------------------------------------------------


def flat_tasks(history: list[dict[str, Any]]) -> set[str]:
    """Tasks whose latest draw gave every initial episode the same reward (``reward.spread.<id>`` 0):
    their GRPO group had no signal."""
    last: dict[str, float] = {}
    for h in history:
        for k, v in h.items():
            if k.startswith("reward.spread."):
                last[k[len("reward.spread."):]] = float(v)
    return {t for t, spread in last.items() if spread <= 1e-9}


def draw_tasks(task_ids: list[str], k: int, rng: random.Random, weights: dict[str, float] | None = None) -> list[str]:
    """``k`` distinct tasks: uniform (``random.sample``, the reference's) or, with ``weights``, weighted
    without replacement (Efraimidis–Spirakis keys ``u ** (1 / w)``). Pure: the same rng state gives the
    same draw, so a resumed run draws what the killed one would have."""
    k = min(k, len(task_ids))
    if weights is None:
        return rng.sample(task_ids, k)
    keyed = sorted(((rng.random() ** (1.0 / weights.get(t, 1.0)), t) for t in task_ids), reverse=True)
    return [t for _, t in keyed[:k]]


def _pick_tasks(cfg: AppoConfig, seed: int, iteration: int, history: list[dict[str, Any]] | None = None) -> list[Any]:
    """The iteration's train tasks: seeded by (seed, iteration); ``task_sampling: mixed`` draws a task
    whose latest group was all-equal (no GRPO signal: always solved or never) with weight
    ``flat_task_weight`` (DAPO's dynamic sampling, without the extra rollouts it costs)."""
    from apollo.env.tasks import list_tasks

    tasks = list_tasks(split="train")
    if cfg.tasks:
        unknown = sorted(set(cfg.tasks) - {t.task_id for t in tasks})
        if unknown:
            raise ValueError(f"params.yaml: appo.tasks: no train task {unknown}")
        tasks = [t for t in tasks if t.task_id in set(cfg.tasks)]
    rng = random.Random(seed * 1_000_003 + iteration)
    if cfg.task_sampling == "uniform":
        return rng.sample(tasks, min(cfg.tasks_per_iteration, len(tasks)))
    flat = flat_tasks(history or [])
    by_id = {t.task_id: t for t in tasks}
    ids = draw_tasks(sorted(by_id), cfg.tasks_per_iteration, rng,
                     {t: (cfg.flat_task_weight if t in flat else 1.0) for t in by_id})
    return [by_id[t] for t in ids]


def row_logprobs(model: torch.nn.Module, rows: list[dict[str, Any]], key: str) -> None:
    """``rows[i][key]``: ``model``'s log-probs of each row's tokens, as the trainer computes them
    (0 on untrained tokens; inside :func:`apollo.rl.tempered.tempered`, at that temperature)."""
    from apollo.train.batching import collate
    from apollo.train.objectives import token_logprobs

    dev = next(model.parameters()).device  # a DeepSpeed rank's module may sit on its GPU
    with torch.no_grad():
        for r in rows:
            b = {k: (v.to(dev) if isinstance(v, torch.Tensor) else v)
                 for k, v in collate([[(r["input_ids"], r["labels"])]]).items()}
            r[key] = token_logprobs(model, b).logp[0].tolist()


def rollout_stats(trajs: list[Trajectory], engine_stats: dict[str, int]) -> dict[str, float]:
    from apollo.rl.tree import tree_kind

    inits = [t for t in trajs if tree_kind(t) == "init"]
    branches = [t for t in trajs if tree_kind(t) == "branch"]
    r_init = [(t.final_score or 0.0) / 100 for t in inits]
    r_br = [(t.final_score or 0.0) / 100 for t in branches]
    ents = [e for t in inits for s in t.steps if s.tokens and s.tokens.entropies for e in s.tokens.entropies]
    per_task: dict[str, list[float]] = {}
    for t in inits:
        per_task.setdefault(t.task_id, []).append((t.final_score or 0.0) / 100)
    return {
        **{f"reward.task.{k}": mean(v) for k, v in sorted(per_task.items())},
        **{f"reward.spread.{k}": max(v) - min(v) for k, v in sorted(per_task.items())},
        "reward.mean": mean(r_init) if r_init else 0.0,
        "reward.std": pstdev(r_init) if len(r_init) > 1 else 0.0,
        "reward.branch_mean": mean(r_br) if r_br else 0.0,
        "reward.all_mean": mean(r_init + r_br) if trajs else 0.0,
        "branches": len(branches),
        "branches_strict": sum(bool(t.meta.get("branch_strict")) for t in branches),
        "episodes": len(trajs),
        "crashed": sum(t.finish_reason == "error" for t in trajs),
        "steps_mean": mean(len(t.steps) for t in trajs) if trajs else 0.0,
        "entropy.mean": mean(ents) if ents else 0.0,
        "prefill_tokens": engine_stats.get("prefill_tokens", 0),
        "prefill_tokens_saved": engine_stats.get("cached_tokens", 0),
        "generated_tokens": engine_stats.get("generated_tokens", 0),
    }


def run_appo(cfg: AppoConfig, *, base_model: Path, out: Path, checkpoint_dir: Path, seed: int = 0,
             variant: str = "appo", on_metrics: Callable[[int, dict[str, float]], None] | None = None,
             on_iteration: Callable[[int], None] | None = None, iterations: int | None = None,
             keep_checkpoints_after: bool = False) -> dict[str, Any]:
    """Run (or resume) ``cfg.iterations`` APPO iterations from ``base_model``; the final policy goes
    to ``out`` (HF, atomically) with ``appo_history.json`` and ``appo_stats.json``.

    ``on_metrics(iteration, metrics)`` after each iteration (MLflow: step = iteration);
    ``on_iteration(iteration)`` after its checkpoint (a test interrupts there). ``iterations``
    runs only up to that iteration (the Prefect subflow runs one per task). Returns the summary."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from apollo.agent.react import AgentConfig
    from apollo.engines.hf import HFEngine
    from apollo.models.bootstrap import _save_atomic
    from apollo.rl.tree import HFPolicyScorer, atree_rollout
    from apollo.rl.distributed import deepspeed_learner
    from apollo.rl.rows import trajectory_rows
    from apollo.schema import atomic_write_text
    from apollo.train.config import loop_config
    from apollo.train.engine import TorchEngine
    from apollo.train.loop import train

    base_model, out, checkpoint_dir = Path(base_model), Path(out), Path(checkpoint_dir)
    tcfg = loop_config(cfg.train, seed, where="params.yaml: appo.train")
    ds_opts = deepspeed_learner(cfg.learner, "params.yaml: appo.learner")
    if ds_opts is not None and not _in_rank_group():
        raise RuntimeError("params.yaml: appo.learner.backend is deepspeed: run the loop on its ranks with "
                           "`python -m apollo.rl.rl_ranks appo`, not in this process")
    ckpts = IterationCheckpoints(checkpoint_dir, fingerprint(cfg, base_model, seed, variant), cfg.keep_checkpoints)
    resume_dir = ckpts.latest()
    start_it, history = 0, []
    policy_dir = resume_dir / "policy" if resume_dir else base_model
    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    model = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).eval()
    objective = appo_objective(cfg)
    opt_engine, learner = None, None
    if ds_opts is not None:  # the update on the DeepSpeed ranks (apollo.rl.distributed), this is rank 0
        from apollo.rl.distributed import DeepSpeedLearner

        learner = DeepSpeedLearner(model, objective, tcfg, ds_opts)  # collective with the serving ranks
    else:
        opt_engine = TorchEngine(model, tcfg, total_steps=10**9)  # one optimizer for the whole run
    ds_dir = checkpoint_dir / "deepspeed"
    if resume_dir is not None:
        trainer, state = IterationCheckpoints.load(resume_dir)
        if learner is not None:
            if "deepspeed" not in trainer:
                raise RuntimeError(f"{resume_dir}: a torch-backend checkpoint; appo.learner changed (fingerprint?)")
            learner.load(ds_dir, trainer["deepspeed"])
        else:
            opt_engine.optimizer.load_state_dict(trainer["optimizer"])
            opt_engine.schedule.load_state_dict(trainer["schedule"])
        start_it, history = int(state["iteration"]), list(state["history"])
        log.info("appo: resuming after iteration %d from %s", start_it, resume_dir)
    ref = None
    if cfg.kl_coef > 0:
        ref = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32).eval()
    agent_cfg = AgentConfig(max_steps=cfg.max_steps, context_tokens=cfg.context_tokens,
                            command_timeout_s=cfg.command_timeout_s, max_output_chars=cfg.max_output_chars)
    served = None
    if cfg.engine == "vllm_server":
        served = _served_engine(cfg, policy_dir, checkpoint_dir)
        engine = served.__enter__()
    else:
        engine = HFEngine(policy_dir, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, model=model,
                          tokenizer=tokenizer, prefix_cache_tokens=cfg.prefix_cache_tokens, policy_version=start_it,
                          max_batch=cfg.max_batch)
    scorer: Any = HFPolicyScorer(model, tokenizer, temperature=cfg.temperature)
    if cfg.entropy_only:
        scorer = EntropyOnlyScorer(scorer, cfg.gamma)
    last = min(cfg.iterations, iterations) if iterations is not None else cfg.iterations
    try:
        for it in range(start_it, last):
            t0 = time.perf_counter()
            tasks = _pick_tasks(cfg, seed, it, history)
            if hasattr(engine, "reset_stats"):
                engine.reset_stats()

            async def rollouts() -> list[list[Trajectory]]:
                return await asyncio.gather(*[
                    atree_rollout(task, engine, cfg.n_init, cfg.n_branch, scorer=scorer, config=agent_cfg,
                                  seed=seed * 100_000 + it * 100 + i, gamma=cfg.gamma, fv_clip=cfg.fv_clip,
                                  concurrency=cfg.concurrency,
                                  meta={"stage": "rl", "method": "appo", "variant": variant, "iteration": it})
                    for i, task in enumerate(tasks)])

            trajs = [t for group in asyncio.run(rollouts()) for t in group]
            t_roll = time.perf_counter() - t0
            metrics = rollout_stats(trajs, dict(getattr(engine, "stats", {}) or {}))
            trainable = without_crashes(trajs)  # a crash is recorded, never trained on
            metrics["crashed_excluded"] = len(trajs) - len(trainable)
            token_adv, adv_stats = appo_token_advantages(trainable, single_group=cfg.single_group,
                                                         norm_by_std=cfg.norm_by_std)
            metrics.update(adv_stats)
            rows = []
            for t in trainable:
                adv = token_adv.get(t.trajectory_id)
                if adv is not None:
                    # a row whose advantages are all 0 (an episode with A = 0, or one whose branch
                    # credit covers only its first window) would only dilute the token mean
                    rows += [r for r in trajectory_rows(t, tokenizer, adv) if any(a != 0 for a in r["advantages"])]
            if rows and cfg.loss_agg == "seq_mean":
                equal_episode_weight(rows)
            if rows:
                # the ratio's denominator: π_k at the sampling temperature as the trainer computes it,
                # recomputed before the update (as verl recomputes old_log_prob); the trainer, the
                # reference and the ratio all use the tempered distribution the episodes were drawn
                # from (apollo.rl.tempered); the sampler's own logprobs stay in the records and feed
                # the branch scores
                with tempered(model, cfg.temperature):
                    row_logprobs(model, rows, "rollout_logprobs")
            if ref is not None and rows:
                with tempered(ref, cfg.temperature):
                    row_logprobs(ref, rows, "ref_logprobs")
            metrics.update({"rows": len(rows), "trained_trajectories": len({r["trajectory_id"] for r in rows}),
                            "rollout_s": t_roll})
            t1 = time.perf_counter()
            if rows and learner is not None:  # every rank trains its share of each optimizer step
                stats = learner.train(rows, replace(tcfg, seed=seed * 1000 + it), cfg.temperature)
            elif rows:
                with tempered(model, cfg.temperature):
                    stats = train(model, rows, replace(tcfg, seed=seed * 1000 + it), objective=objective,
                                  engine=opt_engine)
            if rows:
                hist = stats["history"]
                metrics["update.steps"] = stats["steps"]
                metrics["update.loss"] = float(stats["final_loss"])
                metrics["update.trained_tokens"] = stats["trained_tokens"]
                for k in ("clip_fraction", "clip_low_fraction", "clip_high_fraction", "dual_clip_fraction",
                          "approx_kl", "ratio_mean", "future_weight", "kl_ref"):
                    vals = [h[f"obj.{k}"] for h in hist if f"obj.{k}" in h]
                    if vals:
                        metrics[f"update.{k}"] = float(mean(vals))
            else:
                log.info("appo iteration %d: every advantage is 0 (equal rewards within each group): no update", it)
                metrics["update.steps"] = 0
            model.eval()
            metrics["update_s"] = time.perf_counter() - t1
            state = {"iteration": it + 1, "history": history + [{"iteration": it + 1, **metrics}]}
            if learner is not None:  # every rank's DeepSpeed state first, then the iteration is complete
                tag = f"iter-{it + 1:04d}"
                learner.save(ds_dir, tag)
                d = ckpts.save(it + 1, model, tokenizer, {"deepspeed": tag}, state)
                kept = {p.name for p in checkpoint_dir.iterdir() if p.name.startswith("iter-")}
                for old in ds_dir.iterdir():
                    if old.is_dir() and old.name not in kept:
                        shutil.rmtree(old, ignore_errors=True)
            else:
                d = ckpts.save(it + 1, model, tokenizer, {"optimizer": opt_engine.optimizer.state_dict(),
                                                          "schedule": opt_engine.schedule.state_dict()}, state)
            # the new weights are the next iteration's policy
            if hasattr(engine, "update_weights"):
                metrics["weight_update_s"] = engine.update_weights(d / "policy", it + 1)
            else:
                engine.clear_prefix_cache()
                engine.policy_version = it + 1
            metrics["seconds"] = time.perf_counter() - t0
            history = state["history"]
            history[-1] = {"iteration": it + 1, **metrics}
            log.info("appo iteration %d/%d: reward %.3f ± %.3f, %d branches, %d rows, %.1fs", it + 1, cfg.iterations,
                     metrics["reward.mean"], metrics["reward.std"], metrics["branches"], metrics["rows"],
                     metrics["seconds"])
            if on_metrics is not None:
                on_metrics(it + 1, metrics)
            if on_iteration is not None:
                on_iteration(it + 1)
    finally:
        if served is not None:
            served.__exit__(None, None, None)
        if learner is not None:
            learner.stop()  # the serving ranks leave
    summary = _summary(history)
    if last >= cfg.iterations:
        _save_atomic(out, model, tokenizer)
        atomic_write_text(out / "appo_history.json", json.dumps(history, indent=1) + "\n")
        atomic_write_text(out / "appo_stats.json", json.dumps(summary, indent=2) + "\n")
        if not keep_checkpoints_after:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
    return summary


def appo_objective(cfg: AppoConfig):
    """The update's objective (the same on every rank of a DeepSpeed update)."""
    from apollo.rl.appo_objective import AppoObjective

    return AppoObjective(clip_low=cfg.clip_low, clip_high=cfg.clip_high, clip_c=cfg.clip_c, decay_rate=cfg.decay_rate,
                         future_eps=cfg.future_eps, weight=cfg.weight, kl_coef=cfg.kl_coef)


def _in_rank_group() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _summary(history: list[dict[str, Any]]) -> dict[str, float]:
    """The run's summary: iterations, first/last reward, the plain least-squares slope of the
    per-iteration mean (with the first and last thirds), and ``appo.reward_trend`` (the within-task
    slope with its 95% interval, :func:`apollo.rl.trend.reward_trend`: the question "does the
    reward rise" with the drawn tasks' differences taken out)."""
    r = [h["reward.mean"] for h in history]
    out: dict[str, float] = {"appo.iterations": len(r)}
    if not r:
        return out
    n = len(r)
    xs = list(range(1, n + 1))
    mx, my = mean(xs), mean(r)
    var = sum((x - mx) ** 2 for x in xs)
    out.update({
        "appo.reward_first": r[0], "appo.reward_last": r[-1], "appo.reward_mean": my,
        "appo.reward_slope": sum((x - mx) * (y - my) for x, y in zip(xs, r)) / var if var else 0.0,
        "appo.reward_first_third": mean(r[: max(1, n // 3)]), "appo.reward_last_third": mean(r[-max(1, n // 3):]),
        # an iteration resumed from its checkpoint has no "seconds" (saved before the weight update)
        "appo.total_seconds": sum(h.get("seconds", h.get("rollout_s", 0.0) + h.get("update_s", 0.0)) for h in history),
    })
    out.update(trend_metrics(task_points(history), "appo"))  # within-task slope, 95% interval over iterations
    return {k: (v if math.isfinite(v) else 0.0) for k, v in out.items()}


def _served_engine(cfg: AppoConfig, policy_dir: Path, log_dir: Path):
    """A ``vllm serve`` session for the policy (weights updated in place each iteration)."""
    from apollo.stages.common import engine_session

    p = {"engine": "vllm_server", "temperature": cfg.temperature, "max_new_tokens": cfg.max_new_tokens,
         "server": dict(cfg.server)}
    return engine_session(p, policy_dir, log_dir=log_dir)
