"""Train the distribution the sampler draws from: the policy's logits divided by the temperature.

An RL loop samples at ``temperature`` T (the agent stages: 0.7), and its importance ratio and policy
gradient must use the same distribution, ``log_softmax(logits / T)`` (as verl divides the logits by
the rollout temperature in both ``compute_log_prob`` and the update). The trainer's
:func:`apollo.train.objectives.token_logprobs` computes ``log_softmax(logits)``: at T ≠ 1 the
ratio against the sampler's logprobs is then not 1 on-policy (SAO's strict band and GRPO's clip cut
tokens for a temperature mismatch, not for staleness), and the gradient is that of another policy.

:func:`tempered` divides the output layer's logits by T for the duration of a ``with`` block (a
forward hook on ``model.get_output_embeddings()``; the weights, the saved checkpoint and generation
outside the block are untouched).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def tempered(model: torch.nn.Module, temperature: float) -> Iterator[torch.nn.Module]:
    """Within the block, ``model``'s output layer returns ``logits / temperature``; T ≤ 0 (greedy) or
    T = 1: unchanged."""
    t = float(temperature)
    if t <= 0 or t == 1.0:
        yield model
        return
    handle = model.get_output_embeddings().register_forward_hook(lambda _m, _i, out: out / t)
    try:
        yield model
    finally:
        handle.remove()
