"""StarPO-S uncertainty filter: train only on the groups whose rewards disagree most.

A group (trajectories from the same initial seed) whose rewards all agree carries little
learning signal; StarPO-S keeps the `keep_ratio` fraction of groups with the highest
in-group reward std and drops the rest.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from agentrl.algos._groups import group_index, per_group_std

__all__ = ["filter_stats", "num_groups_to_keep", "starpo_s_filter"]


def num_groups_to_keep(num_groups: int, keep_ratio: float) -> int:
    """`ceil(keep_ratio * num_groups)`, at least 1 (tolerant of float round-off).

    >>> num_groups_to_keep(10, 0.3), num_groups_to_keep(8, 0.25), num_groups_to_keep(3, 0.01)
    (3, 2, 1)
    """
    if not 0.0 < keep_ratio <= 1.0:
        raise ValueError(f"keep_ratio must be in (0, 1], got {keep_ratio}")
    return max(1, math.ceil(round(keep_ratio * num_groups, 9)))


def starpo_s_filter(
    returns: Tensor, group_ids: Tensor, keep_ratio: float = 0.25, *, min_std: float = 0.0
) -> Tensor:
    """Keep mask `[B]` (bool) selecting the groups with the highest in-group reward std.

    `returns [B]`, `group_ids [B]`. Keeps `ceil(keep_ratio * num_groups)` groups (at least
    one); the std is the population std of each group's returns. Ties are broken by the
    smaller group id. Groups whose std is below `min_std` are dropped as well, except the
    single highest-std group, which is always kept so that a step never trains on nothing.

    >>> r = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 2.0])
    >>> starpo_s_filter(r, torch.tensor([0, 0, 1, 1, 2, 2]), keep_ratio=0.5)
    tensor([False, False,  True,  True,  True,  True])
    """
    unique_ids, std = per_group_std(returns, group_ids, unbiased=False)
    k = num_groups_to_keep(unique_ids.numel(), keep_ratio)
    # Sort by std descending; a stable sort keeps ascending group id among equal stds.
    order = torch.sort(-std, stable=True).indices
    keep_group = torch.zeros(unique_ids.numel(), dtype=torch.bool, device=returns.device)
    keep_group[order[:k]] = True
    if min_std > 0.0:
        keep_group &= std >= min_std
        keep_group[order[0]] = True
    _, inverse, _ = group_index(group_ids)
    return keep_group[inverse]


def filter_stats(returns: Tensor, group_ids: Tensor, keep: Tensor) -> dict[str, float]:
    """Metrics for the filter: in-group reward std and group counts before and after it.

    Keys: `group_std_before`, `group_std_after` (mean over groups of the population std),
    `num_groups_before`, `num_groups_after`, `keep_frac` (fraction of trajectories kept).

    >>> r = torch.tensor([1.0, 1.0, 0.0, 2.0])
    >>> g = torch.tensor([0, 0, 1, 1])
    >>> filter_stats(r, g, starpo_s_filter(r, g, 0.5))["group_std_after"]
    1.0
    """
    _, std = per_group_std(returns, group_ids, unbiased=False)
    stats = {
        "group_std_before": float(std.mean()) if std.numel() else 0.0,
        "num_groups_before": float(std.numel()),
        "keep_frac": float(keep.float().mean()) if keep.numel() else 0.0,
    }
    if keep.any():
        _, std_kept = per_group_std(returns[keep], group_ids[keep], unbiased=False)
        stats["group_std_after"] = float(std_kept.mean())
        stats["num_groups_after"] = float(std_kept.numel())
    else:
        stats["group_std_after"] = 0.0
        stats["num_groups_after"] = 0.0
    return stats
