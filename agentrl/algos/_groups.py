"""Group statistics over a flat batch: mean and std of the members of each group.

A group is the set of trajectories that started from the same initial seed. Group ids may be
any integers (not necessarily 0..G-1, not necessarily sorted).
"""

from __future__ import annotations

import torch
from torch import Tensor


def group_index(group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Map arbitrary group ids to 0..G-1.

    Returns `(unique_ids [G], inverse [B], counts [G])` with `unique_ids` sorted ascending.
    """
    if group_ids.dim() != 1:
        raise ValueError(f"group_ids must be 1-D [B], got shape {tuple(group_ids.shape)}")
    unique_ids, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    return unique_ids, inverse, counts


def group_mean_std(values: Tensor, group_ids: Tensor, *, unbiased: bool) -> tuple[Tensor, Tensor]:
    """Per-element mean and std of the element's group, each `[B]`, in float32 or wider.

    A group of one has std 0 (also when `unbiased`, where the textbook value is undefined).
    """
    if values.shape != group_ids.shape:
        raise ValueError(
            f"values {tuple(values.shape)} and group_ids {tuple(group_ids.shape)} must match"
        )
    values = values.float() if values.dtype not in (torch.float32, torch.float64) else values
    _, inverse, counts = group_index(group_ids)
    num_groups = counts.numel()
    n = counts.to(values.dtype)
    sums = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    sums = sums.index_add(0, inverse, values)
    means = sums / n
    # A group whose values are all equal gets its value as the mean exactly (no round-off),
    # so that equal rewards give advantages of exactly 0.
    lo = torch.full_like(sums, float("inf")).scatter_reduce(0, inverse, values, reduce="amin")
    hi = torch.full_like(sums, float("-inf")).scatter_reduce(0, inverse, values, reduce="amax")
    means = torch.where(lo == hi, lo, means)
    centred = values - means[inverse]
    sq = torch.zeros_like(sums).index_add(0, inverse, centred * centred)
    denom = (n - 1).clamp(min=1) if unbiased else n
    stds = torch.sqrt(sq / denom)
    stds = torch.where(counts > 1, stds, torch.zeros_like(stds))
    return means[inverse], stds[inverse]


def per_group_std(values: Tensor, group_ids: Tensor, *, unbiased: bool) -> tuple[Tensor, Tensor]:
    """Std of each group: `(unique_ids [G], std [G])`."""
    unique_ids, inverse, _ = group_index(group_ids)
    _, std = group_mean_std(values, group_ids, unbiased=unbiased)
    out = torch.zeros(unique_ids.numel(), dtype=std.dtype, device=std.device)
    out = out.index_copy(0, inverse, std)
    return unique_ids, out
