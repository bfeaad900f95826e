"""GiGPO advantages: hand-computed cases and Hypothesis properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.algos.advantages import grpo_advantages, turn_returns_to_go
from agentrl.algos.gigpo import gigpo_advantages, step_group_advantages

FAST = settings(max_examples=60, deadline=None)


def close(a: torch.Tensor, b, tol: float = 1e-5) -> None:
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), atol=tol, rtol=tol)


# ---------------------------------------------------------------- hand-computed


def _three_episodes() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    # One group of 3 episodes from the same seed, so all start in state 5.
    #   a: 5 -> 6 -> 7, rewards [0, 0, 1]
    #   b: 5 -> 6 -> 8, rewards [0, 0, 0]   (a and b made the same first move, then parted)
    #   c: 5 -> 9,      rewards [0, 1]      (2 turns; the third is padding, state -1)
    turn_rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    states = torch.tensor([[5, 6, 7], [5, 6, 8], [5, 9, -1]])
    groups = torch.tensor([0, 0, 0])
    # gamma 0.5: a [0.25, 0.5, 1], b [0, 0, 0], c [0.5, 1, 0]
    to_go = turn_returns_to_go(turn_rewards, gamma=0.5)
    close(to_go, [[0.25, 0.5, 1.0], [0.0, 0.0, 0.0], [0.5, 1.0, 0.0]])
    return turn_rewards, to_go, states, groups


def test_step_groups_hand_computed_without_std() -> None:
    _, to_go, states, groups = _three_episodes()
    # state 5: {a 0.25, b 0, c 0.5}, mean 0.25 -> a 0, b -0.25, c +0.25
    # state 6: {a 0.5, b 0}, mean 0.25 -> a +0.25, b -0.25
    # states 7, 8, 9 are step groups of one -> 0; c's padding turn -> 0
    adv = step_group_advantages(to_go, states, groups, scale_by_std=False)
    close(adv, [[0.0, 0.25, 0.0], [-0.25, -0.25, 0.0], [0.25, 0.0, 0.0]])


def test_step_groups_hand_computed_with_std() -> None:
    _, to_go, states, groups = _three_episodes()
    # state 5: deviations [0, -0.25, 0.25], sample var (0 + 2 * 0.0625) / 2 = 0.0625, std 0.25
    #          -> [0, -1, 1]
    # state 6: deviations [0.25, -0.25], sample var 0.125 / 1, std sqrt(0.125) = 0.353553
    #          -> +-0.25 / 0.353553 = +-0.707107
    adv = step_group_advantages(to_go, states, groups, scale_by_std=True)
    r = 1 / math.sqrt(2)
    close(adv, [[0.0, r, 0.0], [-1.0, -r, 0.0], [1.0, 0.0, 0.0]], 1e-4)


def test_gigpo_hand_computed_without_std() -> None:
    turn_rewards, to_go, states, groups = _three_episodes()
    # episode returns (undiscounted sums): a 1, b 0, c 1; mean 2/3 -> A_E [1/3, -2/3, 1/3]
    # A = A_E + 0.5 * A_S (A_S from test_step_groups_hand_computed_without_std):
    #   a: [1/3 + 0,        1/3 + 0.125,     1/3]
    #   b: [-2/3 - 0.125,  -2/3 - 0.125,    -2/3]
    #   c: [1/3 + 0.125,    1/3,             0 (padding)]
    returns = turn_rewards.sum(-1)
    adv = gigpo_advantages(returns, to_go, states, groups, omega=0.5, scale_by_std=False)
    third = 1 / 3
    expected = [
        [third, third + 0.125, third],
        [-2 * third - 0.125, -2 * third - 0.125, -2 * third],
        [third + 0.125, third, 0.0],
    ]
    close(adv, expected)


def test_gigpo_hand_computed_with_std() -> None:
    turn_rewards, to_go, states, groups = _three_episodes()
    # episode returns [1, 0, 1], mean 2/3, sample var (1/9 + 4/9 + 1/9) / 2 = 1/3,
    # std 0.57735 -> A_E [0.57735, -1.154701, 0.57735]
    # A = A_E + 1.0 * A_S (A_S from test_step_groups_hand_computed_with_std)
    returns = turn_rewards.sum(-1)
    adv = gigpo_advantages(returns, to_go, states, groups, omega=1.0, scale_by_std=True)
    e, r = 1 / math.sqrt(3), 1 / math.sqrt(2)
    expected = [[e, e + r, e], [-2 * e - 1.0, -2 * e - r, -2 * e], [e + 1.0, e, 0.0]]
    close(adv, expected, 1e-4)


def test_state_visited_twice_in_one_episode() -> None:
    # a: 3 -> 4 -> 3 (a move into a wall left it where it was), rewards [-0.1, -0.1, 1]
    # b: 3 -> 5, rewards [-0.1, 0]
    # gamma 1: a to-go [0.8, 0.9, 1.0], b [-0.1, 0.0]
    to_go = torch.tensor([[0.8, 0.9, 1.0], [-0.1, 0.0, 0.0]])
    states = torch.tensor([[3, 4, 3], [3, 5, -1]])
    groups = torch.tensor([0, 0])
    # state 3: {a0 0.8, a2 1.0, b0 -0.1}, mean 1.7 / 3 = 0.566667
    #   -> a0 0.233333, a2 0.433333, b0 -0.666667; states 4 and 5 alone -> 0
    adv = step_group_advantages(to_go, states, groups, scale_by_std=False)
    close(adv, [[0.8 - 1.7 / 3, 0.0, 1.0 - 1.7 / 3], [-0.1 - 1.7 / 3, 0.0, 0.0]])
    # with std: sample var (0.233333^2 + 0.433333^2 + 0.666667^2) / 2 = 0.343333,
    # std 0.585947 -> a0 0.398212, a2 0.739537, b0 -1.137750
    adv = step_group_advantages(to_go, states, groups, scale_by_std=True)
    close(adv, [[0.398212, 0.0, 0.739537], [-1.137750, 0.0, 0.0]], 1e-4)


def test_same_state_id_in_two_groups_is_not_pooled() -> None:
    # Groups 10 and -3 (any ids, in any order) both visit a state with id 7.
    # group 10: to-go {1, 0}, mean 0.5 -> +-0.5; group -3: to-go {5, 3}, mean 4 -> +-1.
    # (Pooled, the mean would be 2.25 and row 0 would get -1.25.)
    to_go = torch.tensor([[1.0], [5.0], [0.0], [3.0]])
    states = torch.tensor([[7], [7], [7], [7]])
    groups = torch.tensor([10, -3, 10, -3])
    adv = step_group_advantages(to_go, states, groups, scale_by_std=False)
    close(adv, [[0.5], [1.0], [-0.5], [-1.0]])
    # with std: both groups have sample std sqrt(0.5) and sqrt(2) -> +-0.707107 each
    adv = step_group_advantages(to_go, states, groups, scale_by_std=True)
    r = 1 / math.sqrt(2)
    close(adv, [[r], [r], [-r], [-r]], 1e-4)


def test_omega_zero_gives_the_grpo_episode_advantages() -> None:
    turn_rewards, to_go, states, groups = _three_episodes()
    returns = turn_rewards.sum(-1)
    for scale_by_std in (False, True):
        episode = grpo_advantages(returns, groups, scale_by_std=scale_by_std)  # [B]
        adv = gigpo_advantages(returns, to_go, states, groups, omega=0.0, scale_by_std=scale_by_std)
        expected = torch.where(states >= 0, episode.unsqueeze(-1), 0.0)
        assert torch.equal(adv, expected)


def test_group_of_one_and_equal_returns_give_zero() -> None:
    # An episode alone in its group has no baseline: episode and step advantages 0.
    # Equal to-go in a step group: 0 exactly, also when divided by its std (0 + eps).
    to_go = torch.tensor([[2.0, 1.0], [2.0, 1.0], [4.0, 3.0]])
    states = torch.tensor([[1, 2], [1, 2], [1, 2]])
    groups = torch.tensor([0, 0, 1])
    for scale_by_std in (False, True):
        step = step_group_advantages(to_go, states, groups, scale_by_std=scale_by_std)
        assert torch.equal(step, torch.zeros(3, 2))
        adv = gigpo_advantages(
            to_go[:, 0], to_go, states, groups, omega=1.0, scale_by_std=scale_by_std
        )
        assert torch.equal(adv, torch.zeros(3, 2))


def test_no_valid_turns_and_bad_shapes() -> None:
    states = torch.full((2, 3), -1)
    out = step_group_advantages(torch.ones(2, 3), states, torch.tensor([0, 0]), scale_by_std=True)
    assert torch.equal(out, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="state_ids"):
        step_group_advantages(
            torch.ones(2, 3), torch.zeros(2, 2), torch.tensor([0, 0]), scale_by_std=True
        )
    with pytest.raises(ValueError, match="group_ids"):
        step_group_advantages(
            torch.ones(2, 3), torch.zeros(2, 3), torch.tensor([0, 0, 1]), scale_by_std=True
        )
    with pytest.raises(ValueError, match="episode_returns"):
        gigpo_advantages(
            torch.ones(3),
            torch.ones(2, 3),
            torch.zeros(2, 3),
            torch.tensor([0, 0]),
            omega=1.0,
            scale_by_std=True,
        )


# ---------------------------------------------------------------- properties

VALUES = st.sampled_from([-1.0, -0.1, 0.0, 0.25, 0.5, 1.0, 2.0])


@st.composite
def batches(draw) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(episode_returns [B], to_go [B, K], state_ids [B, K], group_ids [B])`, with few group
    and state ids so that step groups form, and -1 anywhere."""
    b = draw(st.integers(1, 8))
    k = draw(st.integers(1, 4))
    groups = torch.tensor(draw(st.lists(st.integers(-2, 2), min_size=b, max_size=b)))
    states = torch.tensor(
        draw(st.lists(st.lists(st.integers(-1, 3), min_size=k, max_size=k), min_size=b, max_size=b))
    )
    to_go = torch.tensor(
        draw(st.lists(st.lists(VALUES, min_size=k, max_size=k), min_size=b, max_size=b)),
        dtype=torch.float64,
    )
    returns = torch.tensor(draw(st.lists(VALUES, min_size=b, max_size=b)), dtype=torch.float64)
    return returns, to_go, states, groups


@FAST
@given(batches(), st.data(), st.booleans())
def test_equal_to_go_in_every_step_group_gives_zero_step_advantages(
    batch, data, scale_by_std
) -> None:
    returns, _, states, groups = batch
    # one return-to-go per (group, state), shared by all its visits
    per_step_group = {
        (int(g), int(s)): data.draw(VALUES)
        for g, row in zip(groups, states, strict=True)
        for s in row
    }
    to_go = torch.tensor(
        [
            [per_step_group[int(g), int(s)] for s in row]
            for g, row in zip(groups, states, strict=True)
        ],
        dtype=torch.float64,
    )
    step = step_group_advantages(to_go, states, groups, scale_by_std=scale_by_std)
    assert torch.equal(step, torch.zeros_like(step))
    # then GiGPO is the episode advantage on every turn, whatever omega
    adv = gigpo_advantages(returns, to_go, states, groups, omega=3.0, scale_by_std=scale_by_std)
    episode = grpo_advantages(returns, groups, scale_by_std=scale_by_std)
    assert torch.equal(adv, torch.where(states >= 0, episode.unsqueeze(-1), 0.0))


@FAST
@given(batches(), st.data(), st.booleans(), st.sampled_from([0.0, 0.5, 1.0]))
def test_permuting_rows_permutes_the_output(batch, data, scale_by_std, omega) -> None:
    returns, to_go, states, groups = batch
    perm = torch.tensor(data.draw(st.permutations(range(len(groups)))))
    # relabelling the groups must not matter either
    step = step_group_advantages(to_go, states, groups, scale_by_std=scale_by_std)
    step_p = step_group_advantages(
        to_go[perm], states[perm], groups[perm] * 7 + 3, scale_by_std=scale_by_std
    )
    close(step_p, step[perm], 1e-9)
    adv = gigpo_advantages(returns, to_go, states, groups, omega=omega, scale_by_std=scale_by_std)
    adv_p = gigpo_advantages(
        returns[perm],
        to_go[perm],
        states[perm],
        groups[perm] * 7 + 3,
        omega=omega,
        scale_by_std=scale_by_std,
    )
    close(adv_p, adv[perm], 1e-9)


@FAST
@given(batches(), st.data(), st.booleans())
def test_turns_without_a_state_are_zero_and_inert(batch, data, scale_by_std) -> None:
    returns, to_go, states, groups = batch
    invalid = states < 0
    step = step_group_advantages(to_go, states, groups, scale_by_std=scale_by_std)
    adv = gigpo_advantages(returns, to_go, states, groups, omega=1.0, scale_by_std=scale_by_std)
    assert torch.equal(step[invalid], torch.zeros_like(step[invalid]))
    assert torch.equal(adv[invalid], torch.zeros_like(adv[invalid]))
    # whatever sits in to_go there changes nothing
    noise = torch.tensor(data.draw(st.floats(-100, 100, allow_nan=False)), dtype=to_go.dtype)
    to_go_noisy = torch.where(invalid, noise, to_go)
    again = gigpo_advantages(
        returns, to_go_noisy, states, groups, omega=1.0, scale_by_std=scale_by_std
    )
    assert torch.equal(again, adv)


@FAST
@given(batches(), st.booleans())
def test_step_advantages_sum_to_zero_in_each_step_group(batch, scale_by_std) -> None:
    _, to_go, states, groups = batch
    step = step_group_advantages(to_go, states, groups, scale_by_std=scale_by_std)
    rows = groups.unsqueeze(-1).expand_as(states)
    for g, s in {(int(g), int(s)) for g, s in zip(rows.flatten(), states.flatten(), strict=True)}:
        if s >= 0:
            assert abs(float(step[(rows == g) & (states == s)].sum())) < 1e-9
