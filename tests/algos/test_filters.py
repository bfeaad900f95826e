"""StarPO-S filter: exact group counts, highest std kept, deterministic ties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.algos._groups import per_group_std
from agentrl.algos.filters import filter_stats, num_groups_to_keep, starpo_s_filter


def test_filter_hand_computed() -> None:
    # population stds: group 5 [1, 1] -> 0; group 2 [0, 1] -> 0.5; group 9 [0, 2] -> 1;
    # group 7 [3, 3] -> 0. keep 0.25 of 4 groups -> 1 group: group 9.
    returns = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 2.0, 1.0, 3.0])
    groups = torch.tensor([5, 9, 2, 2, 7, 9, 5, 7])
    keep = starpo_s_filter(returns, groups, keep_ratio=0.25)
    assert keep.tolist() == [False, True, False, False, False, True, False, False]
    keep = starpo_s_filter(returns, groups, keep_ratio=0.5)
    assert keep.tolist() == [False, True, True, True, False, True, False, False]
    # 0.75 -> 3 groups; groups 5 and 7 tie at std 0: the smaller id (5) wins
    keep = starpo_s_filter(returns, groups, keep_ratio=0.75)
    assert keep.tolist() == [True, True, True, True, False, True, True, False]
    stats = filter_stats(returns, groups, starpo_s_filter(returns, groups, 0.5))
    assert stats["group_std_before"] == pytest.approx(1.5 / 4)
    assert stats["group_std_after"] == pytest.approx(0.75)
    assert stats["num_groups_before"] == 4 and stats["num_groups_after"] == 2
    assert stats["keep_frac"] == pytest.approx(0.5)


def test_min_std_drops_flat_groups_but_keeps_the_top_one() -> None:
    returns = torch.tensor([1.0, 1.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 1, 1])
    assert starpo_s_filter(returns, groups, 1.0, min_std=0.1).tolist() == [False, False, True, True]
    flat = torch.tensor([1.0, 1.0, 2.0, 2.0])
    assert starpo_s_filter(flat, groups, 1.0, min_std=0.1).tolist() == [True, True, False, False]


def test_keep_ratio_validation_and_rounding() -> None:
    assert num_groups_to_keep(10, 0.3) == 3  # 0.3 * 10 = 3.0000000000000004 in floats
    assert num_groups_to_keep(7, 0.25) == 2
    assert num_groups_to_keep(1, 0.25) == 1
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="keep_ratio"):
            num_groups_to_keep(4, bad)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 9), st.sampled_from([0.0, 0.5, 1.0, 2.0])), min_size=1, max_size=30
    ),
    st.floats(0.01, 1.0),
)
def test_keeps_exactly_ceil_ratio_groups_with_largest_std(rows, keep_ratio) -> None:
    groups = torch.tensor([g for g, _ in rows])
    returns = torch.tensor([r for _, r in rows])
    keep = starpo_s_filter(returns, groups, keep_ratio)
    num_groups = groups.unique().numel()
    kept_groups = set(groups[keep].tolist())
    assert len(kept_groups) == max(1, math.ceil(round(keep_ratio * num_groups, 9)))
    # whole groups only
    for g in groups.unique().tolist():
        assert keep[groups == g].all() or not keep[groups == g].any()

    ids, stds = per_group_std(returns, groups, unbiased=False)
    by_group = dict(zip(ids.tolist(), stds.tolist(), strict=True))
    for g, value in by_group.items():
        assert value == pytest.approx(float(returns[groups == g].std(unbiased=False)), abs=1e-6)

    def std(g: int) -> float:
        return by_group[g]

    dropped = set(groups.tolist()) - kept_groups
    if dropped:
        assert min(std(g) for g in kept_groups) >= max(std(g) for g in dropped)
        # ties at the cut go to the smaller group id
        cut = min(std(g) for g in kept_groups)
        tied_dropped = [g for g in dropped if std(g) == cut]
        tied_kept = [g for g in kept_groups if std(g) == cut]
        if tied_dropped:
            assert max(tied_kept) < min(tied_dropped)
    # row order does not matter
    perm = torch.randperm(len(rows), generator=torch.Generator().manual_seed(1))
    assert torch.equal(starpo_s_filter(returns[perm], groups[perm], keep_ratio), keep[perm])
