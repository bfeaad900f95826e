"""compute_advantages: each estimator wired to its config, per-turn rows, KL in the reward."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.algos.advantages import grpo_advantages
from agentrl.algos.config import AlgoConfig
from agentrl.algos.estimate import compute_advantages
from agentrl.algos.presets import list_presets, preset_algo_config


def close(a: torch.Tensor, b, tol: float = 1e-5) -> None:
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), atol=tol, rtol=tol)


def _batch():
    # 4 trajectories, 2 groups, 2 turns each: [prompt, t0, t0, obs, t1, t1]
    mask = torch.tensor([[0, 1, 1, 0, 1, 1]] * 4)
    turn_ids = torch.tensor([[-1, 0, 0, 0, 1, 1]] * 4)
    turn_rewards = torch.tensor([[0.0, 1.0], [0.5, 0.0], [0.0, 0.0], [0.25, 0.25]])
    groups = torch.tensor([0, 0, 1, 1])
    g = torch.Generator().manual_seed(0)
    values = torch.rand(4, 6, generator=g)
    logp = -torch.rand(4, 6, generator=g)
    ref = -torch.rand(4, 6, generator=g)
    return mask, turn_ids, turn_rewards, groups, values, logp, ref


@pytest.mark.parametrize("preset", list_presets())
def test_every_preset_gives_finite_advantages_on_trained_tokens_only(preset) -> None:
    mask, turn_ids, turn_rewards, groups, values, logp, ref = _batch()
    algo = preset_algo_config(preset)
    out = compute_advantages(
        algo,
        loss_mask=mask,
        turn_rewards=turn_rewards,
        turn_ids=turn_ids,
        group_ids=groups,
        values=values if algo.use_critic else None,
        old_logp=logp,
        ref_logp=ref,
    )
    assert out.advantages.shape == mask.shape
    assert torch.isfinite(out.advantages).all()
    assert (out.advantages[mask == 0] == 0).all()
    assert (out.value_targets is not None) == algo.use_critic


def test_starpo_trajectory_level_gae_is_return_minus_value() -> None:
    mask, turn_ids, turn_rewards, groups, values, _, _ = _batch()
    algo = AlgoConfig(estimator="gae", gamma=1.0, lam=1.0)
    out = compute_advantages(
        algo, loss_mask=mask, turn_rewards=turn_rewards, turn_ids=turn_ids, group_ids=groups,
        values=values,
    )  # fmt: skip
    returns = turn_rewards.sum(-1, keepdim=True)  # StarPO: sum of the turn rewards
    close(out.advantages, (returns - values) * mask)
    close(out.value_targets, returns * mask)


def test_turn_reward_level_gae_places_rewards_at_turn_ends() -> None:
    mask, turn_ids, turn_rewards, groups, values, _, _ = _batch()
    algo = AlgoConfig(estimator="gae", reward_level="turn", gamma=0.5, lam=1.0)
    out = compute_advantages(
        algo, loss_mask=mask, turn_rewards=turn_rewards, turn_ids=turn_ids, group_ids=groups,
        values=values,
    )  # fmt: skip
    # row 0: reward 1 at position 5, gamma 0.5 per trained token:
    # returns-to-go at trained positions 1, 2, 4, 5 = [1/8, 1/4, 1/2, 1]; lam 1 -> A = G - V
    expected = torch.tensor([0.0, 0.125, 0.25, 0.0, 0.5, 1.0]) - values[0]
    close(out.advantages[0], expected * mask[0])


def test_grpo_counts_each_trajectory_once_with_per_turn_rows() -> None:
    # trajectory 0 (return 1) has two rows (one per turn); trajectory 1 (return 0) has one.
    # Over trajectories: mean 0.5, sample std 0.7071 -> +-0.7071 (rows would give other values)
    mask = torch.tensor([[0, 1, 1], [0, 0, 1], [1, 1, 0]])
    turn_ids = torch.tensor([[-1, 0, 0], [0, 0, 1], [0, 0, -1]])
    turn_rewards = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    out = compute_advantages(
        AlgoConfig(estimator="grpo"), loss_mask=mask, turn_rewards=turn_rewards,
        turn_ids=turn_ids, group_ids=torch.tensor([4, 4, 4]), traj_ids=torch.tensor([0, 0, 1]),
    )  # fmt: skip
    a = 1 / math.sqrt(2)
    close(out.advantages, torch.tensor([[0, a, a], [0, 0, a], [-a, -a, 0]]) * mask, 1e-4)
    with pytest.raises(NotImplementedError, match="per-turn samples"):
        compute_advantages(
            AlgoConfig(estimator="turn-gae", reward_level="turn"), loss_mask=mask,
            turn_rewards=turn_rewards, turn_ids=turn_ids, group_ids=torch.tensor([4, 4, 4]),
            traj_ids=torch.tensor([0, 0, 1]), values=torch.zeros(3, 3),
        )  # fmt: skip


def test_kl_in_reward_lowers_the_return_of_the_drifting_trajectory() -> None:
    # two trajectories, equal task reward; only the first drifted from the reference
    # (k1 = 0.5 on each of its 2 tokens). RLOO: returns [1 - 0.1 * 1.0, 1] -> [-0.1, +0.1]
    mask = torch.ones(2, 2)
    turn_ids = torch.zeros(2, 2, dtype=torch.long)
    turn_rewards = torch.tensor([[1.0], [1.0]])
    logp = torch.tensor([[0.5, 0.5], [0.0, 0.0]])
    algo = AlgoConfig(estimator="rloo", kl_coef=0.1, kl_kind="k1", kl_in_reward=True)
    out = compute_advantages(
        algo, loss_mask=mask, turn_rewards=turn_rewards, turn_ids=turn_ids,
        group_ids=torch.tensor([0, 0]), old_logp=logp, ref_logp=torch.zeros(2, 2),
    )  # fmt: skip
    close(out.advantages, [[-0.1, -0.1], [0.1, 0.1]])
    assert out.stats["kl_reward"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="kl_in_reward needs"):
        compute_advantages(
            algo, loss_mask=mask, turn_rewards=turn_rewards, turn_ids=turn_ids,
            group_ids=torch.tensor([0, 0]),
        )  # fmt: skip


def test_grpo_path_equals_the_pure_function() -> None:
    mask, turn_ids, turn_rewards, groups, *_ = _batch()
    out = compute_advantages(
        AlgoConfig(estimator="grpo", scale_by_std=False), loss_mask=mask,
        turn_rewards=turn_rewards, turn_ids=turn_ids, group_ids=groups,
    )  # fmt: skip
    expected = grpo_advantages(turn_rewards.sum(-1), groups, scale_by_std=False)
    close(out.advantages, expected[:, None] * mask)


def test_critic_estimators_need_values() -> None:
    mask, turn_ids, turn_rewards, groups, *_ = _batch()
    with pytest.raises(ValueError, match="critic values"):
        compute_advantages(
            AlgoConfig(estimator="gae"), loss_mask=mask, turn_rewards=turn_rewards,
            turn_ids=turn_ids, group_ids=groups,
        )  # fmt: skip


def test_reinforce_pp_baseline_over_trajectories_with_per_turn_rows() -> None:
    # baseline = mean over the 2 trajectories (1 and 0) = 0.5, on each row's last token.
    # trained tokens get G = [0.5, 0.5 | 0.5 | -0.5, -0.5]: mean 0.1, population std sqrt(0.24)
    mask = torch.tensor([[0, 1, 1], [0, 0, 1], [1, 1, 0]])
    turn_ids = torch.tensor([[-1, 0, 0], [0, 0, 1], [0, 0, -1]])
    turn_rewards = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    out = compute_advantages(
        AlgoConfig(estimator="reinforce++"), loss_mask=mask, turn_rewards=turn_rewards,
        turn_ids=turn_ids, group_ids=torch.tensor([4, 4, 4]), traj_ids=torch.tensor([0, 0, 1]),
    )  # fmt: skip
    hi, lo = 0.4 / math.sqrt(0.24), -0.6 / math.sqrt(0.24)
    close(out.advantages, torch.tensor([[0, hi, hi], [0, 0, hi], [lo, lo, 0]]) * mask, 1e-4)
