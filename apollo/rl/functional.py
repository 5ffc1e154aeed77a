"""Tensor helpers shared by the RL functions: shape checks, masked reductions, discounted sums.

Conventions of :mod:`apollo.rl`: token tensors are ``[B, T]`` (row = one response/trajectory,
column = token); ``mask`` is 1/True on the tokens that count. Off-mask inputs may hold anything
(padding, ``nan``): every function replaces them before computing, so they never reach a result or
a gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Hashable

import torch

Tensor = torch.Tensor


def check_tokens(name_to_tensor: dict[str, Tensor], *, fn: str) -> tuple[int, int]:
    """Every tensor is 2-D and all have one shape ``[B, T]``; returns ``(B, T)`` or raises naming the argument."""
    shape = None
    first = None
    for name, t in name_to_tensor.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, not {type(t).__name__}")
        if t.dim() != 2:
            raise ValueError(f"{fn}: {name} must be [B, T], got shape {tuple(t.shape)}")
        if shape is None:
            shape, first = tuple(t.shape), name
        elif tuple(t.shape) != shape:
            raise ValueError(f"{fn}: {name} has shape {tuple(t.shape)} but {first} has {shape}")
    assert shape is not None
    return shape  # type: ignore[return-value]


def check_rows(name: str, t: Tensor, n: int | None, *, fn: str) -> int:
    """``t`` is 1-D (of length ``n`` when given); returns its length."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, not {type(t).__name__}")
    if t.dim() != 1:
        raise ValueError(f"{fn}: {name} must be 1-D [N], got shape {tuple(t.shape)}")
    if n is not None and t.shape[0] != n:
        raise ValueError(f"{fn}: {name} has {t.shape[0]} rows, expected {n}")
    return int(t.shape[0])


def as_bool(mask: Tensor) -> Tensor:
    return mask if mask.dtype == torch.bool else mask != 0


def on_mask(x: Tensor, mask: Tensor) -> Tensor:
    """``x`` where ``mask``, 0 elsewhere (a ``nan`` off the mask stays out of values and gradients)."""
    return torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_sum(x: Tensor, mask: Tensor) -> Tensor:
    return on_mask(x, mask).sum()


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean over the mask; 0 (still connected to ``x``'s graph) when the mask is empty."""
    return masked_sum(x, mask) / mask.sum().clamp(min=1).to(x.dtype)


def masked_fraction(cond: Tensor, mask: Tensor) -> Tensor:
    """Fraction of mask tokens where ``cond`` holds (a detached float; 0 on an empty mask)."""
    return ((cond & mask).sum().float() / mask.sum().clamp(min=1).float()).detach()


def masked_zscore(x: Tensor, mask: Tensor, *, eps: float = 1e-6) -> Tensor:
    """Per-row z-score over the mask: ``(x − mean) / (population std + eps)``; 0 off the mask.

    A row with one valid token (std 0) gets 0; a row without valid tokens gets 0.
    """
    n = mask.sum(dim=1, keepdim=True).clamp(min=1).to(x.dtype)
    xm = on_mask(x, mask)
    mean = xm.sum(dim=1, keepdim=True) / n
    var = on_mask((x - mean) ** 2, mask).sum(dim=1, keepdim=True) / n
    return on_mask((x - mean) / (var.sqrt() + eps), mask)


def discounted_future_sum(x: Tensor, gamma: float | Tensor, *, chunk: int = 256) -> Tensor:
    """``out[b, t] = Σ_{k≥t} g_b^{k−t} x[b, k]`` for ``x`` of shape ``[B, T]``.

    ``gamma`` is a float or a per-row tensor ``[B]``. Computed block by block from the end
    (a ``chunk × chunk`` decay matrix per block, the block's first value carried to the previous
    block), so memory is ``O(B·T·chunk)`` instead of ``O(T²)`` — 100K-token agent trajectories fit —
    and no ``g^{−t}`` factor can overflow.
    """
    bsz, t_len = x.shape
    g = torch.as_tensor(gamma, dtype=x.dtype, device=x.device)
    g = g.expand(bsz) if g.dim() == 0 else g
    if g.shape != (bsz,):
        raise ValueError(f"discounted_future_sum: gamma must be a float or [B]={bsz} values, got {tuple(g.shape)}")
    out = torch.empty_like(x)
    carry = torch.zeros(bsz, dtype=x.dtype, device=x.device)  # the future sum starting at the block's end
    for start in reversed(range(0, t_len, chunk)):
        end = min(start + chunk, t_len)
        n = end - start
        pos = torch.arange(n, device=x.device)
        dist = pos[None, :] - pos[:, None]  # [i, j] = j − i
        # decay[b, i, j] = g_b^(j−i) for j ≥ i (pow(0, 0) = 1 keeps a zero gamma exact)
        decay = torch.where(dist >= 0, g[:, None, None] ** dist.clamp(min=0)[None], torch.zeros((), dtype=x.dtype,
                                                                                                 device=x.device))
        local = torch.einsum("bij,bj->bi", decay, x[:, start:end])
        tail = g[:, None] ** (n - pos)[None].to(x.dtype)  # distance from t to the block's end
        out[:, start:end] = local + tail * carry[:, None]
        carry = out[:, start]
    return out


def group_normalize(rewards: Tensor, keys: Sequence[Hashable], *, norm_by_std: bool, fn: str) -> Tensor:
    """``(R − mean) / (std + 1e−6)`` (population std) within groups of equal key; a group of one gets 0."""
    n = check_rows("rewards", rewards, None, fn=fn)
    if len(keys) != n:
        raise ValueError(f"{fn}: {len(keys)} group ids for {n} rewards")
    r = rewards.to(torch.float32) if not rewards.is_floating_point() else rewards
    groups: dict[Hashable, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    out = torch.zeros_like(r)
    for idx in groups.values():
        if len(idx) == 1:  # no baseline to compare with
            continue
        ix = torch.tensor(idx, device=r.device)
        g = r[ix]
        centred = g - g.mean()
        out[ix] = centred / (g.std(correction=0) + 1e-6) if norm_by_std else centred
    return out
