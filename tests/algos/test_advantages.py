"""Advantage estimators: hand-computed cases and Hypothesis properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.algos.advantages import (
    gae,
    grpo_advantages,
    place_returns_on_last_token,
    place_turn_rewards,
    reinforce_pp_advantages,
    rloo_advantages,
    trajectory_returns,
    whiten,
)

FAST = settings(max_examples=40, deadline=None)


def close(a: torch.Tensor, b, tol: float = 1e-5) -> None:
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), atol=tol, rtol=tol)


# ---------------------------------------------------------------- group estimators


def test_grpo_hand_computed() -> None:
    # group 10: [1, 0, 0], mean 1/3, sample var ((2/3)^2 + 2 (1/3)^2) / 2 = 1/3, std 0.57735
    # group -3: a single trajectory -> 0; group 4: [2, 4] mean 3, std sqrt(2)
    returns = torch.tensor([1.0, 0.0, 3.0, 0.0, 2.0, 4.0])
    groups = torch.tensor([10, 10, -3, 10, 4, 4])
    s3 = math.sqrt(1 / 3)
    expected = [
        (2 / 3) / s3,
        (-1 / 3) / s3,
        0.0,
        (-1 / 3) / s3,
        -1 / math.sqrt(2),
        1 / math.sqrt(2),
    ]
    close(grpo_advantages(returns, groups), expected, 1e-4)
    close(
        grpo_advantages(returns, groups, scale_by_std=False),
        [2 / 3, -1 / 3, 0.0, -1 / 3, -1.0, 1.0],
    )


def test_rloo_hand_computed() -> None:
    # [1, 0, 0]: 1 - mean(0, 0) = 1; 0 - mean(1, 0) = -0.5. [2, 4]: 2 - 4, 4 - 2. single: 0.
    returns = torch.tensor([1.0, 0.0, 0.0, 2.0, 4.0, 7.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 2])
    close(rloo_advantages(returns, groups), [1.0, -0.5, -0.5, -2.0, 2.0, 0.0])


group_batches = st.lists(
    st.tuples(st.integers(0, 4), st.floats(-5, 5, allow_nan=False)), min_size=1, max_size=16
)


@FAST
@given(group_batches, st.data())
def test_equal_rewards_in_group_give_zero_advantage(rows, data) -> None:
    groups = torch.tensor([g for g, _ in rows])
    # one reward per group, shared by all its members
    per_group = {g: data.draw(st.floats(-5, 5, allow_nan=False)) for g, _ in rows}
    returns = torch.tensor([per_group[g] for g, _ in rows], dtype=torch.float32)
    close(grpo_advantages(returns, groups), torch.zeros(len(rows)))
    close(grpo_advantages(returns, groups, scale_by_std=False), torch.zeros(len(rows)))
    close(rloo_advantages(returns, groups), torch.zeros(len(rows)))


@FAST
@given(group_batches)
def test_group_advantages_sum_to_zero_and_ignore_order(rows) -> None:
    groups = torch.tensor([g for g, _ in rows])
    returns = torch.tensor([r for _, r in rows], dtype=torch.float64)
    for fn in (grpo_advantages, rloo_advantages):
        adv = fn(returns, groups)
        for g in groups.unique():
            assert abs(float(adv[groups == g].sum())) < 1e-6
        perm = torch.randperm(len(rows), generator=torch.Generator().manual_seed(0))
        close(fn(returns[perm], groups[perm] * 7 + 3), adv[perm])


# ---------------------------------------------------------------- GAE


def test_gae_hand_computed_skips_observation_tokens() -> None:
    # trained positions 0, 1, 3 (2 is an observation token); gamma 0.9, lam 0.8 (g*l = 0.72)
    # t3: delta = 1 - 0.5 = 0.5,               A = 0.5
    # t1: delta = 0.9 * 0.5 - 0.4 = 0.05,      A = 0.05 + 0.72 * 0.5 = 0.41
    # t0: delta = 0.9 * 0.4 - 0.2 = 0.16,      A = 0.16 + 0.72 * 0.41 = 0.4552
    rewards = torch.tensor([[0.0, 0.0, 5.0, 1.0]])  # the 5.0 at mask 0 is ignored
    values = torch.tensor([[0.2, 0.4, 7.0, 0.5]])
    mask = torch.tensor([[1, 1, 0, 1]])
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    close(adv, [[0.4552, 0.41, 0.0, 0.5]])
    close(ret, [[0.6552, 0.81, 0.0, 1.0]])


def test_gae_lambda_zero_is_one_step_td() -> None:
    # lam = 0: A_t = r_t + gamma V_t' - V_t
    adv, _ = gae(
        torch.tensor([[0.0, 1.0]]), torch.tensor([[0.3, 0.6]]), torch.ones(1, 2), gamma=0.5, lam=0.0
    )
    close(adv, [[0.5 * 0.6 - 0.3, 1.0 - 0.6]])


masks = st.integers(1, 4).flatmap(
    lambda b: st.integers(1, 8).flatmap(
        lambda t: st.lists(
            st.lists(st.integers(0, 1), min_size=t, max_size=t), min_size=b, max_size=b
        )
    )
)


def _ensure_row_has_token(mask: torch.Tensor) -> torch.Tensor:
    mask = mask.clone()
    mask[:, -1] = torch.where(mask.sum(-1) == 0, 1, mask[:, -1])
    return mask


@FAST
@given(masks, st.integers(0, 2**31 - 1))
def test_gae_gamma_lam_one_terminal_reward_is_return_minus_value(mask_list, seed) -> None:
    mask = _ensure_row_has_token(torch.tensor(mask_list))
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(mask.shape, generator=g, dtype=torch.float64)
    returns = torch.randn(mask.shape[0], generator=g, dtype=torch.float64)
    rewards = place_returns_on_last_token(returns, mask)
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    expected = (returns[:, None] - values) * mask
    close(adv, expected, 1e-9)
    close(ret, returns[:, None] * mask, 1e-9)


@FAST
@given(masks, st.integers(0, 2**31 - 1), st.floats(0, 1), st.floats(0, 1))
def test_gae_ignores_mask_zero_positions(mask_list, seed, gamma, lam) -> None:
    mask = torch.tensor(mask_list)
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(mask.shape, generator=g, dtype=torch.float64)
    values = torch.randn(mask.shape, generator=g, dtype=torch.float64)
    noise = torch.randn(mask.shape, generator=g, dtype=torch.float64) * 100
    adv, ret = gae(rewards, values, mask, gamma=gamma, lam=lam)
    adv2, ret2 = gae(
        torch.where(mask.bool(), rewards, noise),
        torch.where(mask.bool(), values, -noise),
        mask,
        gamma=gamma,
        lam=lam,
    )
    close(adv2, adv, 1e-9)
    close(ret2, ret, 1e-9)
    assert (adv[mask == 0] == 0).all()


# ---------------------------------------------------------------- REINFORCE++


def test_reinforce_pp_hand_computed() -> None:
    # gamma 0.5. Row 0 rewards [0, 0, 1] -> returns-to-go [0.25, 0.5, 1]; row 1 [0, 1] -> [0.5, 1]
    # over the 5 trained tokens: mean 0.65, population var 0.09, std 0.3
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv = reinforce_pp_advantages(rewards, mask, gamma=0.5)
    close(adv, [[-0.4 / 0.3, -0.15 / 0.3, 0.35 / 0.3], [-0.15 / 0.3, 0.35 / 0.3, 0.0]], 1e-4)


def test_reinforce_pp_with_group_baseline() -> None:
    # totals 1 and 0 in one group, mean 0.5 subtracted on the last trained token:
    # row 0 [0, 0, 0.5] -> G = [0.125, 0.25, 0.5]; row 1 [0, -0.5] -> G = [-0.25, -0.5]
    # mean 0.025, population var 0.1275
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv = reinforce_pp_advantages(rewards, mask, gamma=0.5, group_ids=torch.tensor([3, 3]))
    std = math.sqrt(0.1275)
    g = [[0.125, 0.25, 0.5], [-0.25, -0.5, None]]
    expected = [[0.0 if x is None else (x - 0.025) / std for x in row] for row in g]
    close(adv, expected, 1e-4)


# ---------------------------------------------------------------- placing rewards


def test_place_returns_and_turn_rewards() -> None:
    mask = torch.tensor([[0, 1, 1, 0, 1, 0], [1, 0, 0, 0, 0, 0]])
    out = place_returns_on_last_token(torch.tensor([2.0, -1.0]), mask)
    close(out, [[0, 0, 0, 0, 2.0, 0], [-1.0, 0, 0, 0, 0, 0]])
    turn_ids = torch.tensor([[-1, 0, 0, 0, 1, 1], [0, 0, -1, -1, -1, -1]])
    turn_rewards = torch.tensor([[0.5, 1.0], [0.25, 0.0]])
    close(
        place_turn_rewards(turn_rewards, turn_ids, mask),
        [[0, 0, 0.5, 0, 1.0, 0], [0.25, 0, 0, 0, 0, 0]],
    )


def test_placing_rewards_fails_loudly_when_they_would_be_lost() -> None:
    with pytest.raises(ValueError, match="no trained token"):
        place_returns_on_last_token(torch.tensor([1.0]), torch.zeros(1, 3))
    turn_ids = torch.tensor([[0, 0, 1]])
    mask = torch.tensor([[1, 1, 0]])  # turn 1 has no trained token
    with pytest.raises(ValueError, match="no trained token in that turn"):
        place_turn_rewards(torch.tensor([[0.0, 1.0]]), turn_ids, mask)


def test_trajectory_returns_sum_turn_rewards() -> None:
    close(trajectory_returns(torch.tensor([[0.5, -0.1, 1.0], [1.0, 0.0, 0.0]])), [1.4, 1.0])


def test_whiten() -> None:
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 100.0, -100.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    out = whiten(x, mask)
    sel = out[mask.bool()]
    assert abs(float(sel.mean())) < 1e-6
    assert abs(float(sel.pow(2).mean()) - 1.0) < 1e-4
    assert (out[~mask.bool()] == 0).all()
    kept = whiten(x, mask, shift_mean=False)[mask.bool()]
    assert abs(float(kept.mean()) - 2.5) < 1e-5
