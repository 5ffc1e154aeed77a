"""SAO's value model: a separate critic made of the policy's architecture (a copy of its decoder) and a
scalar value head, with the attention layers frozen (SAO: only MLPs, norms, embeddings and the head
learn, which keeps the critic cheap and stable), plus its loss and explained variance.
"""

from __future__ import annotations

import copy

import torch

from apollo.rl.functional import as_bool, masked_mean, on_mask

Tensor = torch.Tensor


class ValueModel(torch.nn.Module):
    """``forward(input_ids, attention_mask=None, position_ids=None) -> values [B, T]`` (float32):
    ``values[:, t]`` is ``V`` of the state in which token ``t`` is emitted (the prefix ``< t``: the
    head reads the hidden state at ``t − 1``, as the policy's logits for ``t`` do); ``values[:, 0] = 0``."""

    def __init__(self, policy: torch.nn.Module, *, freeze_attention: bool = True):
        super().__init__()
        self.decoder = copy.deepcopy(policy.base_model)
        hidden = int(policy.config.hidden_size)
        self.head = torch.nn.Linear(hidden, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)
        if freeze_attention:
            for name, p in self.decoder.named_parameters():
                if ".self_attn." in name:
                    p.requires_grad_(False)

    def frozen_parameters(self) -> list[str]:
        return [n for n, p in self.named_parameters() if not p.requires_grad]

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                position_ids: Tensor | None = None) -> Tensor:
        h = self.decoder(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         use_cache=False).last_hidden_state
        v = self.head(h).squeeze(-1).float()
        return torch.cat([torch.zeros_like(v[:, :1]), v[:, :-1]], dim=1)


def value_loss(values: Tensor, returns: Tensor, mask: Tensor) -> Tensor:
    """Half mean squared error over the mask (the action tokens)."""
    m = as_bool(mask)
    return 0.5 * masked_mean(on_mask((values - returns.detach()) ** 2, m), m)


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """``1 − Var(returns − values) / Var(returns)`` over the mask (nan when the returns are constant, rounding included)."""
    m = as_bool(mask)
    r, v = returns.detach()[m].double(), values.detach()[m].double()
    if r.numel() < 2:
        return float("nan")
    var = r.var(unbiased=False)
    if float(var) <= 1e-10 * max(1.0, float(r.abs().max()) ** 2):  # constant returns (up to rounding): undefined
        return float("nan")
    return float(1.0 - (r - v).var(unbiased=False) / var)
