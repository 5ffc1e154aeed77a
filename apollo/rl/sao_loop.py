"""The asynchronous RL loop of SAO (arXiv 2607.07508) and its GRPO baselines, one switch apart.

``mode`` (params ``sao.mode``):

- ``sao``: one rollout per prompt; rollout workers run continuously with the served policy
  (:class:`~apollo.rl.sao_rollout.PolicyServer`) and put finished episodes into a bounded buffer
  with a maximum staleness (:class:`~apollo.rl.sao_rollout.RolloutBuffer`); the learner updates as
  soon as ``batch_size`` rollouts are there and publishes the new weights to the workers. Advantages
  come from a separate value model (:class:`~apollo.rl.value.ValueModel`, attention frozen) through
  :func:`~apollo.rl.sao.skip_observation_gae` (reward on the last action token; critic λ = 1, policy
  λ = :func:`~apollo.rl.sao.policy_lambda` of the trajectory's action tokens); ``critic_updates``
  (K = 2) critic steps per policy step; during the first ``critic_warmup_steps`` only the critic
  learns (the actor is frozen and no weights are published). Policy loss: ``sao`` (the strict
  double-sided importance mask).
- ``grpo_async``: the same workers, buffer and staleness; G = ``group_size`` rollouts per prompt,
  GRPO advantages, dual-clip PPO against the rollout logprobs (no SAO mask, no critic).
- ``grpo_sync``: G rollouts per prompt for ``batch_size / G`` prompts, run by the same number of
  workers, the learner waits for all of them, trains, publishes; the workers idle meanwhile.

The policy step is the one trainer's (:mod:`apollo.train`): its batch layout, token log-probs (:func:`~apollo.train.objectives.token_logprobs`),
policy-gradient objective over :mod:`apollo.rl.losses` and its optimizer engine
(:class:`~apollo.train.engine.TorchEngine`).

Logged per step: reward, entropy (of the rollout's sampling distributions), grad norm, policy loss,
masked-token fraction, value loss, explained variance, staleness per trajectory (mean, max) and per
token (mean, max), dropped-as-stale rollouts, trained samples/s.
"""

from __future__ import annotations

import logging
import math
import random
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from apollo.agent.actions import format_action
from apollo.env.sanity import CountdownEnv, CountdownTask, safe_eval
from apollo.rl.losses import grpo_advantages, token_advantages
from apollo.rl.sao import policy_lambda, skip_observation_gae
from apollo.rl.sao_rollout import PolicyServer, Rollout, RolloutBuffer, observation_ids, prompt_ids, run_episode
from apollo.rl.staleness import LaggedPolicyServer, lag_depth, lag_stats, lagged, make_lag
from apollo.rl.tempered import tempered
from apollo.rl.value import ValueModel, explained_variance, value_loss
from apollo.train.batching import IGNORE_INDEX
from apollo.train.config import TrainConfig
from apollo.train.engine import TorchEngine
from apollo.train.objectives import PolicyGradientObjective, token_logprobs

log = logging.getLogger(__name__)
MODES = ("sao", "grpo_async", "grpo_sync")
EMPTY_LIMIT = 8  # per worker: groups in a row without a trainable token before the loop gives up


@dataclass
class LoopConfig:
    """Params section ``sao`` (every field; unknown keys are refused by :func:`loop_config`)."""

    mode: str = "sao"
    steps: int = 100  # policy updates (the critic warm-up steps count)
    batch_size: int = 8  # rollouts per update
    group_size: int = 4  # GRPO's G (SAO uses 1 whatever this says)
    workers: int = 4  # rollout workers (episodes in flight)
    max_staleness: int = 4  # policy versions; staler rollouts are dropped
    buffer_capacity: int = 16  # groups waiting in the buffer
    actor_lr: float = 1e-6
    critic_lr: float = 5e-6
    critic_updates: int = 2  # K (≥ 1)
    critic_warmup_steps: int = 10
    eps_low: float = 0.3
    eps_high: float = 5.0
    clip_low: float = 0.2  # GRPO's dual-clip PPO
    clip_high: float = 0.28
    clip_c: float = 3.0
    lambda_alpha: float = 1.5
    gamma: float = 1.0
    max_grad_norm: float = 1.0
    temperature: float = 1.0
    max_new_tokens: int = 32
    max_turns: int = 3
    n_tasks: int = 64
    seed: int = 0
    latency: dict[str, Any] = field(default_factory=lambda: {"dist": "none"})
    # staleness control: workers sample from the policy k versions ago (apollo.rl.staleness):
    # {dist: none} | {dist: fixed, k} | {dist: pareto, scale, shape, cap} (k drawn per rollout group)
    lag: dict[str, Any] = field(default_factory=lambda: {"dist": "none"})
    num_threads: int | None = None
    max_batch: int = 1  # workers' turns decoded together (PolicyServer; 1: one turn at a time)
    learner: dict[str, Any] = field(default_factory=dict)  # where the policy update runs (apollo.rl.distributed); {}: torch

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"sao.mode: {self.mode!r} is not one of {MODES}")
        if self.critic_updates < 1:
            raise ValueError(f"sao.critic_updates must be ≥ 1, got {self.critic_updates}")
        if self.mode != "sao" and self.batch_size % self.group_size:
            raise ValueError(f"sao.batch_size ({self.batch_size}) must be a multiple of group_size ({self.group_size})")
        if lag_depth(self.lag) > self.max_staleness:  # every lagged group would be dropped as stale
            raise ValueError(f"sao.lag can draw {lag_depth(self.lag)} versions, more than sao.max_staleness "
                             f"({self.max_staleness}): raise max_staleness")

    @property
    def group(self) -> int:
        return 1 if self.mode == "sao" else self.group_size


# Subsections of params ``sao`` that are not loop fields: the stability run's, the agent stages' and
# the per-variant overlays (read by apollo.rl.sao_stability and apollo.stages.rl.sao_config).
SUBSECTIONS = ("stability", "agent", "variants")


def split_section(section: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(loop keys, subsections)`` of params ``sao``."""
    loop = {k: v for k, v in section.items() if k not in SUBSECTIONS}
    return loop, {k: dict(section.get(k) or {}) for k in SUBSECTIONS}


def loop_config(section: Mapping[str, Any], **overrides: Any) -> LoopConfig:
    known = {f.name for f in fields(LoopConfig)}
    merged = {**dict(section), **overrides}
    bad = sorted(set(merged) - known)
    if bad:
        raise ValueError(f"params.yaml: sao: unknown keys {bad}; known: {sorted(known)}")
    return LoopConfig(**merged)


def make_latency(spec: Mapping[str, Any], seed: int) -> Callable[[], float] | None:
    """Seconds per tool call: ``{"dist": "none"}``, ``{"dist": "pareto", "scale": s, "shape": a, "cap": c}``
    (long-tailed: ``s·(Pareto(a))``, capped) or ``{"dist": "fixed", "seconds": s}``."""
    kind = spec.get("dist", "none")
    rng = random.Random(seed)
    if kind == "none":
        return None
    if kind == "fixed":
        s = float(spec["seconds"])
        return lambda: s
    if kind == "pareto":
        scale, shape, cap = float(spec["scale"]), float(spec["shape"]), float(spec.get("cap", 1e9))
        return lambda: min(cap, scale * rng.paretovariate(shape))
    raise ValueError(f"sao.latency.dist: unknown {kind!r} (none, fixed, pareto)")


def rollout_batch(rollouts: Sequence[Rollout], pad_id: int = 0) -> dict[str, Any]:
    """The trainer's batch layout (:func:`~apollo.train.batching.collate`: ``input_ids``, ``labels``
    = the action tokens, ``position_ids``, per-token ``rollout_logprobs``), one rollout per row,
    right-padded without an attention mask: under causal attention a real token never sees the
    padding after it, and the plain causal kernel is several times faster than a dense mask."""
    width = max(len(r.input_ids) for r in rollouts)
    b = len(rollouts)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    labels = torch.full((b, width), IGNORE_INDEX, dtype=torch.long)
    lps = torch.zeros((b, width), dtype=torch.float32)
    for i, r in enumerate(rollouts):
        n = len(r.input_ids)
        ids[i, :n] = torch.tensor(r.input_ids)
        m = torch.tensor(r.action_mask, dtype=torch.bool)
        labels[i, :n] = torch.where(m, ids[i, :n], IGNORE_INDEX)
        lps[i, :n] = torch.tensor(r.logprobs, dtype=torch.float32)
    labels[:, 0] = IGNORE_INDEX
    pos = torch.arange(width).expand(b, width).contiguous()
    return {"input_ids": ids, "labels": labels, "position_ids": pos, "attention_mask": None,
            "rollout_logprobs": lps}


class Learner:
    """The trainer side: the policy (trained in place), the critic (SAO) and their optimizer engines."""

    def __init__(self, model: torch.nn.Module, cfg: LoopConfig):
        from apollo.rl.distributed import deepspeed_learner

        self.cfg = cfg
        self.model = model
        self.step = 0  # updates done (warm-up included)
        self.version = 0  # policy versions published
        self.objective = policy_objective(cfg)
        # sao.learner.backend deepspeed: the policy step on the DeepSpeed ranks (apollo.rl.distributed;
        # this is rank 0, the critic stays here); torch: in this process
        ds_opts = deepspeed_learner(cfg.learner, "params.yaml: sao.learner")
        self.dist: Any = None
        self.ds_dir: Path | None = None  # the ranks' DeepSpeed checkpoints (run_loop: out_dir/deepspeed)
        self.engine: TorchEngine | None = None
        if ds_opts is not None:
            import torch.distributed as dist

            from apollo.rl.distributed import DeepSpeedLearner

            if not (dist.is_available() and dist.is_initialized()):
                raise RuntimeError("params.yaml: sao.learner.backend is deepspeed: run the loop on its ranks with "
                                   "`python -m apollo.rl.rl_ranks sao`, not in this process")
            self.dist = DeepSpeedLearner(model, self.objective, _train_cfg(cfg.actor_lr, cfg), ds_opts)
        else:
            self.engine = TorchEngine(model, _train_cfg(cfg.actor_lr, cfg), cfg.steps)
        if cfg.mode == "sao":
            self.critic: ValueModel | None = ValueModel(model).to(next(model.parameters()).device)
            self.critic_engine: TorchEngine | None = TorchEngine(self.critic, _train_cfg(cfg.critic_lr, cfg),
                                                                 cfg.steps * cfg.critic_updates)
        else:
            self.critic = self.critic_engine = None
        self.pad_id = int(getattr(model.config, "pad_token_id", None) or 0)

    @property
    def actor_frozen(self) -> bool:
        return self.critic is not None and self.step < self.cfg.critic_warmup_steps

    def batch(self, rollouts: Sequence[Rollout]) -> dict[str, Any]:
        return rollout_batch(rollouts, self.pad_id)

    def update(self, rollouts: Sequence[Rollout]) -> dict[str, float]:
        """One policy update (or, during warm-up, critic updates only) on ``rollouts``; returns stats."""
        cfg = self.cfg
        b = self.batch(rollouts)
        am = b["labels"] != IGNORE_INDEX
        rewards_seq = torch.tensor([r.reward for r in rollouts], dtype=torch.float32)
        stats: dict[str, float] = {}
        if self.critic is not None:
            last = am.shape[1] - 1 - torch.flip(am.int(), [1]).argmax(1)  # last action token per row
            rew = torch.zeros(am.shape, dtype=torch.float32)
            rew[torch.arange(len(rollouts)), last] = rewards_seq
            vl = []
            for k in range(cfg.critic_updates):
                dev = next(self.critic.parameters()).device  # the policy's (a DeepSpeed rank's GPU) or CPU
                v = self.critic(b["input_ids"].to(dev), None if b["attention_mask"] is None else
                                b["attention_mask"].to(dev), b["position_ids"].to(dev)).cpu()
                if k == 0:  # the first pass's values (before any critic step) give returns and advantages
                    v_old = v.detach()
                    _, returns = skip_observation_gae(rew, v_old, am, gamma=cfg.gamma, lam=1.0)
                    lam = policy_lambda(am.sum(1).float(), alpha=cfg.lambda_alpha)
                    adv, _ = skip_observation_gae(rew, v_old, am, gamma=cfg.gamma, lam=lam)
                    stats["explained_variance"] = explained_variance(v_old, returns, am)
                loss_v = value_loss(v, returns, am)
                self.critic_engine.backward(loss_v)
                self.critic_engine.step()
                vl.append(float(loss_v.detach()))
            stats["value_loss"] = sum(vl) / len(vl)
            stats["value_mean"] = float(v_old[am].mean())
        else:
            adv = token_advantages(episode_grpo_advantages(rollouts), am)
        b["advantages"] = adv
        stats["adv_mean"] = float(adv[am].mean()) if bool(am.any()) else 0.0
        if self.actor_frozen:
            stats.update(actor_updated=0.0, grad_norm=0.0, policy_loss=0.0)
            dev = next(self.model.parameters()).device
            bd = {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in b.items()}
            with torch.no_grad(), tempered(self.model, cfg.temperature):
                out = token_logprobs(self.model, bd)
                _, pst = self.objective(bd, out)
        elif self.dist is not None:  # one optimizer step on the ranks, each its chunks of the batch
            rows = []
            for i, r in enumerate(rollouts):
                n = len(r.input_ids)
                rows.append({"input_ids": b["input_ids"][i, :n].tolist(), "labels": b["labels"][i, :n].tolist(),
                             "advantages": adv[i, :n].tolist(), "rollout_logprobs": b["rollout_logprobs"][i, :n].tolist()})
            st = self.dist.step(rows, cfg.temperature)
            pst = {k.removeprefix("loss."): v for k, v in st.items() if k.startswith("loss.")}
            stats.update(actor_updated=1.0, grad_norm=st["grad_norm"], policy_loss=st["policy_loss"])
        else:
            self.model.train()
            with tempered(self.model, cfg.temperature):  # the distribution the workers sample from
                out = token_logprobs(self.model, b)
            loss_sum, pst = self.objective(b, out)
            n = max(1, int(out.mask.sum()))
            self.engine.backward(loss_sum / n)
            self.engine.step()
            self.model.eval()
            stats.update(actor_updated=1.0, grad_norm=float(self.engine.last_grad_norm),
                         policy_loss=float(loss_sum.detach()) / n)
        for k, v in pst.items():
            stats[f"loss.{k}"] = float(v)
        stats["masked_fraction"] = stats.get("loss.masked_fraction", stats.get("loss.clip_fraction", 0.0))
        self.step += 1
        return stats

    def state_dict(self) -> dict[str, Any]:
        if self.engine is None:  # DeepSpeed: the optimizer lives in the ranks' checkpoint (save_dist)
            return {"step": self.step, "version": self.version, "model": self.model.state_dict(),
                    "deepspeed": f"step-{self.step:06d}",
                    "critic": self.critic.state_dict() if self.critic is not None else None,
                    "critic_optimizer": self.critic_engine.optimizer.state_dict() if self.critic_engine else None}
        return {"step": self.step, "version": self.version, "model": self.model.state_dict(),
                "optimizer": self.engine.optimizer.state_dict(), "schedule": self.engine.schedule.state_dict(),
                "critic": self.critic.state_dict() if self.critic is not None else None,
                "critic_optimizer": self.critic_engine.optimizer.state_dict() if self.critic_engine else None}

    def load_state_dict(self, st: Mapping[str, Any]) -> None:
        self.step, self.version = int(st["step"]), int(st["version"])
        self.model.load_state_dict(st["model"])
        if self.dist is not None:
            if "deepspeed" not in st:
                raise RuntimeError("a torch-backend learner state; sao.learner changed since it was written")
            self.dist.load(self.ds_dir, st["deepspeed"])
        else:
            self.engine.optimizer.load_state_dict(st["optimizer"])
            self.engine.schedule.load_state_dict(st["schedule"])
        if self.critic is not None and st.get("critic") is not None:
            self.critic.load_state_dict(st["critic"])
            self.critic_engine.optimizer.load_state_dict(st["critic_optimizer"])


def policy_objective(cfg: LoopConfig) -> PolicyGradientObjective:
    """The policy loss of ``cfg.mode`` (the same on every rank of a DeepSpeed update)."""
    if cfg.mode == "sao":
        return PolicyGradientObjective("sao", {"eps_low": cfg.eps_low, "eps_high": cfg.eps_high})
    return PolicyGradientObjective("dual_clip_ppo", {"clip_low": cfg.clip_low, "clip_high": cfg.clip_high,
                                                     "clip_c": cfg.clip_c})


def episode_grpo_advantages(rollouts: Sequence[Rollout]) -> torch.Tensor:
    """GRPO advantages ``[len(rollouts)]`` over *episodes*: an agent episode can be several rows
    (a context window that starts afresh), each a :class:`Rollout` with the episode's reward and
    ``meta["trajectory_id"]``; the group mean and std are over the group's episodes, and each row
    gets its episode's advantage (counting rows would weight an episode by its number of windows)."""
    episodes: dict[str, int] = {}  # episode key -> index into the episode list
    ep_rewards: list[float] = []
    ep_groups: list[str] = []
    row_ep: list[int] = []
    for r in rollouts:
        key = str(r.meta.get("trajectory_id", r.rollout_id))
        if key not in episodes:
            episodes[key] = len(ep_rewards)
            ep_rewards.append(float(r.reward))
            ep_groups.append(r.group)
        row_ep.append(episodes[key])
    ep_adv = grpo_advantages(torch.tensor(ep_rewards, dtype=torch.float32), ep_groups)
    return ep_adv[torch.tensor(row_ep, dtype=torch.long)]


def _train_cfg(lr: float, cfg: LoopConfig) -> TrainConfig:
    """The one trainer's config for an RL engine: constant lr (no warm-up), clipping, no decay."""
    return TrainConfig(lr=lr, min_lr=lr, warmup_steps=0, epochs=1.0, max_steps=cfg.steps, micro_batch_size=cfg.batch_size,
                       grad_accum=1, max_length=4096, packing=False, seed=cfg.seed, weight_decay=0.0,
                       betas=(0.9, 0.999), max_grad_norm=cfg.max_grad_norm, log_every=1, num_threads=cfg.num_threads,
                       bf16=False, progress=False, time_budget_s=None, lora=None)


def staleness_stats(rollouts: Sequence[Rollout], version: int) -> dict[str, float]:
    """Staleness (policy versions behind ``version``) per trajectory (first token) and per action token."""
    traj = [version - r.version for r in rollouts]
    tok = [version - v for r in rollouts for v, m in zip(r.versions, r.action_mask) if m]
    return {"staleness.traj_mean": sum(traj) / len(traj), "staleness.traj_max": float(max(traj)),
            "staleness.token_mean": sum(tok) / max(1, len(tok)), "staleness.token_max": float(max(tok, default=0)),
            "staleness.mixed_version_rollouts": float(sum(
                len({v for v, m in zip(r.versions, r.action_mask) if m}) > 1 for r in rollouts))}


# one episode → its training rows: (server, task, *, seed, rollout_id, group, latency) -> [Rollout]
EpisodeFn = Callable[..., list[Rollout]]


def demonstration(task: CountdownTask, rng: random.Random) -> list[str]:
    """A scripted countdown episode for a warm start (assistant texts, Hermes tool calls): ``calc``
    over the numbers in their order with random ``+ - *`` operators — right only by chance (1 in 9
    for three numbers), so a policy cloned from it has the format and room to learn the arithmetic —
    then ``submit`` the value ``calc`` returned. (Here, not in :mod:`apollo.env.sanity`: that package
    is a dependency of every Apollo stage in ``dvc.yaml``.)"""
    expr = str(task.numbers[0])
    for i, n in enumerate(task.numbers[1:]):
        expr = f"{'(' + expr + ')' if i else expr}{rng.choice('+-*')}{n}"
    return [format_action("", "calc", {"expression": expr}),
            format_action("", "submit", {"answer": int(safe_eval(expr))})]


def demonstration_rollout(tokenizer: Any, task: CountdownTask, rng: random.Random) -> Rollout:
    """A scripted countdown episode (:func:`demonstration`) in the exact token
    layout :func:`~apollo.rl.sao_rollout.run_episode` gives a sampled one; its reward is the
    environment's."""
    eos = int(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    env = CountdownEnv(task)
    ids = prompt_ids(tokenizer, task.messages())
    mask = [0] * len(ids)
    for text in demonstration(task, rng):
        a = list(tokenizer.encode(text, add_special_tokens=False)) + [eos]
        ids += a
        mask += [1] * len(a)
        obs, done = env.step(text)
        if done:
            break
        o = observation_ids(tokenizer, obs)
        ids += o
        mask += [0] * len(o)
    n = len(ids)
    return Rollout(f"demo-{task.task_id}", task.task_id, "demo", ids, mask, [0.0] * n, [0.0] * n, [-1] * n,
                   env.reward(), env.calls, 0.0, time.time())


def warm_start(model: torch.nn.Module, tokenizer: Any, tasks: Sequence[CountdownTask], *, steps: int,
               lr: float = 1e-3, batch_size: int = 8, seed: int = 0, num_threads: int | None = None) -> dict[str, float]:
    """Behaviour cloning on scripted countdown episodes (``steps`` AdamW steps of ``batch_size``
    episodes, masked NLL on the action tokens), in place: the embedded model was cloned from
    research-task demonstrations and calls research tools; after this it calls ``calc`` then
    ``submit`` (with random operators, so the arithmetic is left to RL). Returns the demos' mean
    reward and the first / last loss."""
    from apollo.train.objectives import SFTObjective

    if num_threads:
        torch.set_num_threads(num_threads)
    torch.manual_seed(seed)
    rng = random.Random(f"{seed}:warm_start")
    cfg = LoopConfig(steps=steps, batch_size=batch_size, seed=seed, actor_lr=lr)
    engine = TorchEngine(model, _train_cfg(lr, cfg), steps)
    pad = int(getattr(model.config, "pad_token_id", None) or 0)
    losses: list[float] = []
    rewards: list[float] = []
    pool = list(tasks)
    model.train()
    for _ in range(steps):
        demos = [demonstration_rollout(tokenizer, rng.choice(pool), rng) for _ in range(batch_size)]
        rewards += [d.reward for d in demos]
        b = rollout_batch(demos, pad)
        out = token_logprobs(model, b)
        loss_sum, _ = SFTObjective()(b, out)
        loss = loss_sum / max(1, int(out.mask.sum()))
        engine.backward(loss)
        engine.step()
        losses.append(float(loss.detach()))
    model.eval()
    k = max(1, min(10, len(losses)))
    return {"demo_reward": sum(rewards) / max(1, len(rewards)), "loss_first": sum(losses[:k]) / k,
            "loss_last": sum(losses[-k:]) / k, "steps": float(steps)}


def countdown_episode(server: PolicyServer, task: CountdownTask, **kw: Any) -> list[Rollout]:
    return [run_episode(server, task, **kw)]


class Workers:
    """``n`` rollout threads: each runs groups (G episodes of one prompt) with the current policy and
    puts them into the buffer until stopped."""

    def __init__(self, server: PolicyServer, buffer: RolloutBuffer, tasks: Sequence[Any], cfg: LoopConfig,
                 episode: EpisodeFn = countdown_episode):
        self.server, self.buffer, self.tasks, self.cfg, self.episode = server, buffer, list(tasks), cfg, episode
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._work, args=(i,), daemon=True, name=f"rollout-{i}")
                        for i in range(cfg.workers)]
        self.errors: list[BaseException] = []
        self.empty_streak = 0  # groups in a row without a trainable token (e.g. every action masked)

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _work(self, i: int) -> None:
        rng = random.Random(f"{self.cfg.seed}:{i}")
        latency = make_latency(self.cfg.latency, rng.randrange(2**31))
        try:
            while not self.stop_event.is_set():
                group = run_group(self.server, rng.choice(self.tasks), self.cfg.group, rng, latency, self.episode)
                self.empty_streak = 0 if group else self.empty_streak + 1
                if self.empty_streak > EMPTY_LIMIT * self.cfg.workers:
                    raise RuntimeError(f"the last {self.empty_streak} rollout groups hold no trainable token "
                                       "(every action dropped by the masks?): nothing to train")
                while group and not self.buffer.put(group, timeout=0.2):
                    if self.stop_event.is_set():
                        break
        except BaseException as e:  # surfaced by the loop
            log.exception("rollout worker %d failed", i)
            self.errors.append(e)

    def stop(self) -> None:
        self.stop_event.set()
        self.buffer.close()
        for t in self.threads:
            t.join(timeout=60)


def run_group(server: PolicyServer, task: Any, g: int, rng: random.Random,
              latency: Callable[[], float] | None, episode: EpisodeFn = countdown_episode) -> list[Rollout]:
    """G episodes of one prompt (one group id), their rows in order."""
    gid = uuid.uuid4().hex[:12]
    return [r for k in range(g)
            for r in episode(server, task, seed=rng.randrange(2**31), rollout_id=f"{gid}-{k}", group=gid,
                             latency=latency)]


def run_loop(model: torch.nn.Module, tokenizer: Any, tasks: Sequence[Any], cfg: LoopConfig, *,
             out_dir: str | Path | None = None, on_log: Callable[[int, dict[str, float]], None] | None = None,
             time_budget_s: float | None = None, save_every: int = 0, episode: EpisodeFn | None = None,
             max_context: int | None = None) -> dict[str, Any]:
    """Train ``model`` in place for ``cfg.steps`` updates of ``cfg.mode``; returns the history and totals.

    ``episode``: one episode → its rows (default: the countdown sanity environment, ``tasks`` are
    countdown tasks; :class:`apollo.rl.sao_agent.AgentEpisodes` for agent tasks). ``max_context``:
    the server's longest sequence (default: the model's).

    ``out_dir``: the persisted buffer (``buffer/``) and the learner state (``state.pt``, written every
    ``save_every`` updates and at the end); a run on an ``out_dir`` that has them resumes from them.
    ``time_budget_s``: stop after the update that passes it (``stopped_early``).
    """
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    if episode is None:
        tasks = [CountdownTask(t.task_id, t.split, t.numbers, t.target, cfg.max_turns) for t in tasks]
        episode = countdown_episode
    out = Path(out_dir) if out_dir is not None else None
    learner = Learner(model, cfg)
    if learner.dist is not None and out is None:
        raise ValueError("sao.learner.backend deepspeed needs an out_dir (the ranks' checkpoints)")
    learner.ds_dir = out / "deepspeed" if out is not None else None
    state_path = out / "state.pt" if out is not None else None
    if state_path is not None and state_path.exists():
        learner.load_state_dict(torch.load(state_path, weights_only=False))
        log.info("resumed at step %d (policy version %d)", learner.step, learner.version)
    model.eval()
    server_kw = {"temperature": cfg.temperature, "max_new_tokens": cfg.max_new_tokens, "max_batch": cfg.max_batch,
                 "max_len": max_context}
    if cfg.lag.get("dist", "none") == "none":
        server: Any = PolicyServer(model, tokenizer, **server_kw)
    else:  # the staleness control: a ring of past weights, a lag per rollout group
        server = LaggedPolicyServer(model, tokenizer, depth=lag_depth(cfg.lag), **server_kw)
        episode = lagged(episode, make_lag(cfg.lag, random.Random(f"{cfg.seed}:lag").randrange(2**31)))
    server.version = learner.version
    buffer = RolloutBuffer(cfg.buffer_capacity, cfg.max_staleness, out / "buffer" if out is not None else None)
    restored = len(buffer)
    history: list[dict[str, float]] = []
    t0 = time.perf_counter()
    trained = 0
    episode_seconds: list[float] = []  # each trained rollout's wall time (benchmarks: the ideal speed-up)
    workers = None
    pool = None
    rng = random.Random(f"{cfg.seed}:sync")
    if cfg.mode == "grpo_sync":
        pool = ThreadPoolExecutor(cfg.workers, thread_name_prefix="rollout")
        latencies = [make_latency(cfg.latency, rng.randrange(2**31)) for _ in range(cfg.batch_size)]
    else:
        workers = Workers(server, buffer, tasks, cfg, episode)
        workers.start()
    stopped_early = False
    empty = 0
    try:
        while learner.step < cfg.steps:
            t_wait = time.perf_counter()
            if pool is not None:
                futs = [pool.submit(episode, server, task, seed=rng.randrange(2**31),
                                    rollout_id=f"{gid}-{k}", group=gid, latency=latencies[j * cfg.group + k])
                        for j, (task, gid) in enumerate((rng.choice(tasks), uuid.uuid4().hex[:12])
                                                        for _ in range(cfg.batch_size // cfg.group))
                        for k in range(cfg.group)]
                rollouts = [r for f in futs for r in f.result()]
                if not rollouts:  # every episode came back without a trainable token
                    empty += 1
                    if empty > EMPTY_LIMIT:
                        raise RuntimeError(f"{empty} synchronous batches in a row hold no trainable token "
                                           "(every action dropped by the masks?): nothing to train")
                    continue
                empty = 0
            else:
                groups = None
                while groups is None:
                    groups = buffer.take(cfg.batch_size, learner.version, timeout=1.0)
                    if workers.errors:
                        raise RuntimeError(f"a rollout worker failed: {workers.errors[0]}") from workers.errors[0]
                rollouts = [r for g in groups for r in g]
            wait_s = time.perf_counter() - t_wait
            t_up = time.perf_counter()
            stats = learner.update(rollouts)
            stats.update(staleness_stats(rollouts, learner.version))
            stats.update(lag_stats(list(rollouts)))
            if stats["actor_updated"]:  # new weights to the workers (not during the critic warm-up)
                learner.version = server.publish(model.state_dict())
            trained += len(rollouts)
            episode_seconds.extend(r.seconds for r in rollouts)
            per_task: dict[str, list[float]] = {}
            for r in rollouts:
                per_task.setdefault(r.task_id, []).append(r.reward)
            stats.update({
                **{f"reward.task.{k}": sum(v) / len(v) for k, v in sorted(per_task.items())},
                "reward": sum(r.reward for r in rollouts) / len(rollouts),
                "rollouts": float(len(rollouts)),
                "entropy": _mean_entropy(rollouts),
                "turns": sum(r.turns for r in rollouts) / len(rollouts),
                "guided_rollouts": float(sum(1 for r in rollouts if r.meta.get("guided_steps"))),
                "dropped_steps": float(sum(r.meta.get("dropped_steps", 0) for r in rollouts)),
                "episode_s": sum(r.seconds for r in rollouts) / len(rollouts),
                "wait_s": wait_s, "update_s": time.perf_counter() - t_up,
                "policy_version": float(learner.version), "dropped_stale": float(buffer.dropped),
                "trained_samples": float(trained), "samples_per_s": trained / (time.perf_counter() - t0),
            })
            history.append(stats)
            if on_log is not None:
                on_log(learner.step, stats)
            if state_path is not None and save_every and learner.step % save_every == 0:
                _save(state_path, learner)
            if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
                stopped_early = learner.step < cfg.steps
                break
    finally:
        if workers is not None:
            workers.stop()
        if pool is not None:
            pool.shutdown(wait=True)
        if state_path is not None:
            _save(state_path, learner)
        if learner.dist is not None:
            learner.dist.stop()  # the serving ranks leave
    seconds = time.perf_counter() - t0
    return {"mode": cfg.mode, "steps": learner.step, "policy_version": learner.version, "history": history,
            "trained_samples": trained, "seconds": seconds, "samples_per_s": trained / max(seconds, 1e-9),
            "dropped_stale": buffer.dropped, "restored_rollouts": restored, "left_in_buffer": len(buffer),
            "stopped_early": stopped_early, "episode_seconds": episode_seconds}


def _mean_entropy(rollouts: Sequence[Rollout]) -> float:
    vals = [e for r in rollouts for e, m in zip(r.entropies, r.action_mask) if m]
    return sum(vals) / len(vals) if vals else math.nan


def _save(path: Path, learner: Learner) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    state = learner.state_dict()
    if learner.dist is not None:  # every rank's DeepSpeed state first; state.pt then names it
        learner.dist.save(learner.ds_dir, state["deepspeed"])
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)
    if learner.dist is not None:
        for old in learner.ds_dir.iterdir():
            if old.is_dir() and old.name != state["deepspeed"]:
                shutil.rmtree(old, ignore_errors=True)
