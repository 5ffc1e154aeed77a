"""Objectives of the one trainer: what a micro-batch's loss is, given the model's token log-probs.

The model side is shared (:func:`token_logprobs`: the decoder, then the output layer only at the
positions that predict a trained token — which saves most of the output-layer cost when only actions
are trained); an :class:`Objective` turns ``(batch, outputs)`` into ``(loss, stats)``:

- ``loss`` is the **sum** over the micro-batch's trained tokens (a token mean times the token
  count); the loop divides by the trained tokens of the whole optimizer step (every rank knows
  that count without communication), so gradient accumulation and data parallelism give exactly the
  single-process token mean of the step.
- ``stats`` are detached scalars (mask fractions, KL, …) logged as ``train.obj.<name>``.

:class:`SFTObjective` is masked cross-entropy (behaviour cloning / the train stage).
:class:`PolicyGradientObjective` is token-level policy gradient: per-token ``advantages`` and
``rollout_logprobs`` come with each example (aligned with ``input_ids``), the loss is a policy loss
of :mod:`apollo.rl.losses` chosen by name (``dual_clip_ppo``, ``sao``, ``policy_gradient``). APPO /
SAO / GRPO trainers compute the advantages with :mod:`apollo.rl` and hand rows to the same loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from apollo.train.batching import IGNORE_INDEX

Tensor = torch.Tensor


@dataclass
class TokenOutputs:
    """Per-token model outputs aligned with ``input_ids``: ``logp[b, t] = log π(input_ids[b, t] | prefix)``
    where ``mask[b, t]`` (the token is trained: its label is not ``-100`` and it is not a segment's
    first token), 0 elsewhere."""

    logp: Tensor  # [B, T] float32
    mask: Tensor  # [B, T] bool


def token_logprobs(model: torch.nn.Module, batch: Mapping[str, Tensor | None]) -> TokenOutputs:
    """Run the decoder, then the output layer only where the next token is trained."""
    out = model.base_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           position_ids=batch["position_ids"], use_cache=False)
    hidden = out.last_hidden_state[:, :-1]
    targets = batch["labels"][:, 1:]
    keep = targets != IGNORE_INDEX
    bsz = targets.shape[0]
    first = torch.zeros((bsz, 1), dtype=torch.bool, device=keep.device)
    mask = torch.cat([first, keep], dim=1)
    head = model.get_output_embeddings()
    if not bool(keep.any()):  # a zero that still reaches every parameter (data-parallel engines expect gradients)
        zero = head(hidden[:, :1]).float().sum() * 0.0
        return TokenOutputs(torch.zeros(mask.shape, dtype=torch.float32, device=mask.device) + zero, mask)
    logits = head(hidden[keep]).float()
    lp = -F.cross_entropy(logits, targets[keep], reduction="none")
    full = torch.zeros(keep.shape, dtype=lp.dtype, device=lp.device).masked_scatter(keep, lp)
    return TokenOutputs(torch.cat([torch.zeros((bsz, 1), dtype=lp.dtype, device=lp.device), full], dim=1), mask)


class Objective(Protocol):
    """``objective(batch, outputs) -> (loss summed over the trained tokens, stats)``."""

    name: str
    token_fields: tuple[str, ...]  # per-token float fields every example must carry

    def __call__(self, batch: Mapping[str, Any], out: TokenOutputs) -> tuple[Tensor, dict[str, Tensor]]: ...


@dataclass
class SFTObjective:
    """Masked next-token cross-entropy (summed; the loop makes it the step's token mean)."""

    name: str = "sft"
    token_fields: tuple[str, ...] = ()

    def __call__(self, batch: Mapping[str, Any], out: TokenOutputs) -> tuple[Tensor, dict[str, Tensor]]:
        loss = -torch.where(out.mask, out.logp, torch.zeros((), dtype=out.logp.dtype, device=out.logp.device)).sum()
        return loss, {}


@dataclass
class PolicyGradientObjective:
    """Token-level policy gradient with a named loss of :mod:`apollo.rl.losses` (``loss_args`` its keywords).

    Each example carries ``advantages`` and ``rollout_logprobs`` per token (aligned with
    ``input_ids``; values on untrained tokens are ignored). The loss's token mean over the
    micro-batch is multiplied by its trained-token count, so the loop's normalisation yields the
    token mean over the optimizer step (for ``sao``, whose mean is over in-band tokens, a
    micro-batch weighs by its action tokens).
    """

    policy_loss: str = "dual_clip_ppo"
    loss_args: dict[str, Any] = field(default_factory=dict)
    name: str = "pg"
    token_fields: tuple[str, ...] = ("advantages", "rollout_logprobs")

    def __post_init__(self) -> None:
        from apollo.rl.losses import get_policy_loss

        self._fn = get_policy_loss(self.policy_loss)

    def __call__(self, batch: Mapping[str, Any], out: TokenOutputs) -> tuple[Tensor, dict[str, Tensor]]:
        old = batch["rollout_logprobs"].to(out.logp.device, out.logp.dtype)
        adv = batch["advantages"].to(out.logp.device, out.logp.dtype)
        loss, stats = self._fn(out.logp, old, adv, out.mask, **self.loss_args)
        n = out.mask.sum().to(loss.dtype)
        return loss * n, stats


def make_objective(name: str, policy_loss: str = "dual_clip_ppo",
                   policy_loss_args: Mapping[str, Any] | None = None) -> Objective:
    """The objective a config names (``objective``, ``policy_loss``, ``policy_loss_args`` of :class:`RunOptions`)."""
    if name == "sft":
        return SFTObjective()
    if name == "pg":
        return PolicyGradientObjective(policy_loss, dict(policy_loss_args or {}))
    raise ValueError(f"unknown objective {name!r}; known: sft, pg")


def token_losses(model: torch.nn.Module, batch: Mapping[str, Tensor | None]) -> tuple[Tensor, int]:
    """Summed next-token cross-entropy over the trained tokens, and their count (the SFT objective)."""
    out = token_logprobs(model, batch)
    loss, _ = SFTObjective()(batch, out)
    return loss, int(out.mask.sum())


class ObjectiveModule(torch.nn.Module):
    """The module a DeepSpeed engine wraps: ``forward(**batch) -> (loss, stats)`` of ``objective`` on a
    causal LM (the forward pass must go through the engine for its ZeRO hooks)."""

    def __init__(self, lm: torch.nn.Module, objective: Objective):
        super().__init__()
        self.lm = lm
        self.objective = objective

    def forward(self, **batch):
        return self.objective(batch, token_logprobs(self.lm, batch))
