"""compute_advantages: each estimator wired to its config, per-turn rows, KL in the reward."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.algos.advantages import grpo_advantages, whiten
from agentrl.algos.base import algorithm_class
from agentrl.algos.config import AlgoConfig
from agentrl.algos.estimate import compute_advantages
from agentrl.algos.presets import list_presets, preset_algo_config


def advantages_of(algo, **kwargs):
    """`compute_advantages` with the estimator of the registered algorithm `algo.name`."""
    return compute_advantages(algo, estimate=algorithm_class(algo.name).estimate, **kwargs)


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
    out = advantages_of(
        algo,
        loss_mask=mask,
        turn_rewards=turn_rewards,
        turn_ids=turn_ids,
        group_ids=groups,
        values=values if algo.use_critic else None,
        old_logp=logp,
        ref_logp=ref,
        # every trajectory starts in one state, then each turn is a state of its own
        state_ids=torch.where(
            turn_rewards.new_ones(turn_rewards.shape).cumsum(-1) > 1,
            torch.arange(turn_rewards.numel()).reshape(turn_rewards.shape) + 1,
            0,
        ),
    )
    assert out.advantages.shape == mask.shape
    assert torch.isfinite(out.advantages).all()
    assert (out.advantages[mask == 0] == 0).all()
    assert (out.value_targets is not None) == algo.use_critic


def test_starpo_trajectory_level_gae_is_return_minus_value_whitened() -> None:
    mask, turn_ids, turn_rewards, groups, values, _, _ = _batch()
    algo = AlgoConfig(name="ppo", gamma=1.0, lam=1.0)
    out = advantages_of(
        algo, loss_mask=mask, turn_rewards=turn_rewards, turn_ids=turn_ids, group_ids=groups,
        values=values,
    )  # fmt: skip
    returns = turn_rewards.sum(-1, keepdim=True)  # StarPO: sum of the turn rewards
    close(out.advantages, whiten(returns - values, mask))
    close(out.value_targets, returns * mask)


def test_turn_reward_level_gae_places_rewards_at_turn_ends() -> None:
    mask, turn_ids, turn_rewards, groups, values, _, _ = _batch()
    algo = AlgoConfig(name="ppo", reward_level="turn", gamma=0.5, lam=1.0)
    out = advantages_of(
        algo, loss_mask=mask, turn_rewards=turn_rewards, turn_ids=turn_ids, group_ids=groups,
        values=values,
    )  # fmt: skip
    # row 0: reward 1 at position 5, gamma 0.5 per trained token:
    # returns-to-go at trained positions 1, 2, 4, 5 = [1/8, 1/4, 1/2, 1]; lam 1 -> A = G - V,
    # whitened over the batch
    to_go = torch.zeros_like(values)
    to_go[0] = torch.tensor([0.0, 0.125, 0.25, 0.0, 0.5, 1.0])
    to_go[1:, 5] = turn_rewards[1:, 1]
    to_go[1:, 4] = 0.5 * to_go[1:, 5]
    to_go[1:, 2] = turn_rewards[1:, 0] + 0.5 * to_go[1:, 4]
    to_go[1:, 1] = 0.5 * to_go[1:, 2]
    close(out.advantages, whiten(to_go - values, mask))


def test_grpo_counts_each_trajectory_once_with_per_turn_rows() -> None:
    # trajectory 0 (return 1) has two rows (one per turn); trajectory 1 (return 0) has one.
    # Over trajectories: mean 0.5, sample std 0.7071 -> +-0.7071 (rows would give other values)
    mask = torch.tensor([[0, 1, 1], [0, 0, 1], [1, 1, 0]])
    turn_ids = torch.tensor([[-1, 0, 0], [0, 0, 1], [0, 0, -1]])
    turn_rewards = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    out = advantages_of(
        AlgoConfig(name="grpo"), loss_mask=mask, turn_rewards=turn_rewards,
        turn_ids=turn_ids, group_ids=torch.tensor([4, 4, 4]), traj_ids=torch.tensor([0, 0, 1]),
    )  # fmt: skip
    a = 1 / math.sqrt(2)
    close(out.advantages, torch.tensor([[0, a, a], [0, 0, a], [-a, -a, 0]]) * mask, 1e-4)


def test_kl_in_reward_lowers_the_return_of_the_drifting_trajectory() -> None:
    # two trajectories, equal task reward; only the first drifted from the reference
    # (k1 = 0.5 on each of its 2 tokens). RLOO: returns [1 - 0.1 * 1.0, 1] -> [-0.1, +0.1]
    mask = torch.ones(2, 2)
    turn_ids = torch.zeros(2, 2, dtype=torch.long)
    turn_rewards = torch.tensor([[1.0], [1.0]])
    logp = torch.tensor([[0.5, 0.5], [0.0, 0.0]])
    algo = AlgoConfig(name="rloo", kl_coef=0.1, kl_kind="k1")
    out = advantages_of(
        algo, loss_mask=mask, turn_rewards=turn_rewards, turn_ids=turn_ids,
        group_ids=torch.tensor([0, 0]), old_logp=logp, ref_logp=torch.zeros(2, 2),
    )  # fmt: skip
    close(out.advantages, [[-0.1, -0.1], [0.1, 0.1]])
    assert out.stats["kl_reward"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="kl_in_reward needs"):
        advantages_of(
            algo, loss_mask=mask, turn_rewards=turn_rewards, turn_ids=turn_ids,
            group_ids=torch.tensor([0, 0]),
        )  # fmt: skip


def test_grpo_path_equals_the_pure_function() -> None:
    mask, turn_ids, turn_rewards, groups, *_ = _batch()
    out = advantages_of(
        AlgoConfig(name="grpo", scale_by_std=False), loss_mask=mask,
        turn_rewards=turn_rewards, turn_ids=turn_ids, group_ids=groups,
    )  # fmt: skip
    expected = grpo_advantages(turn_rewards.sum(-1), groups, scale_by_std=False)
    close(out.advantages, expected[:, None] * mask)


def test_critic_estimators_need_values() -> None:
    mask, turn_ids, turn_rewards, groups, *_ = _batch()
    with pytest.raises(ValueError, match="critic values"):
        advantages_of(
            AlgoConfig(name="ppo"), loss_mask=mask, turn_rewards=turn_rewards,
            turn_ids=turn_ids, group_ids=groups,
        )  # fmt: skip


def test_reinforce_pp_baseline_over_trajectories_with_per_turn_rows() -> None:
    # baseline = mean over the 2 trajectories (1 and 0) = 0.5, on each row's last token.
    # trained tokens get G = [0.5, 0.5 | 0.5 | -0.5, -0.5]: mean 0.1, population std sqrt(0.24)
    mask = torch.tensor([[0, 1, 1], [0, 0, 1], [1, 1, 0]])
    turn_ids = torch.tensor([[-1, 0, 0], [0, 0, 1], [0, 0, -1]])
    turn_rewards = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    out = advantages_of(
        AlgoConfig(name="reinforce++"), loss_mask=mask, turn_rewards=turn_rewards,
        turn_ids=turn_ids, group_ids=torch.tensor([4, 4, 4]), traj_ids=torch.tensor([0, 0, 1]),
    )  # fmt: skip
    hi, lo = 0.4 / math.sqrt(0.24), -0.6 / math.sqrt(0.24)
    close(out.advantages, torch.tensor([[0, hi, hi], [0, 0, hi], [lo, lo, 0]]) * mask, 1e-4)


# -- per-turn rows give the credit one prefix-preserving row gives ---------------------------

_GOLDEN_CONFIGS = {
    "grpo": dict(name="grpo"),
    "grpo-floor": dict(name="grpo", std_floor=0.5),
    "grpo-turn": dict(name="grpo", reward_level="turn", turn_gamma=0.9),
    "rloo-turn-kl": dict(
        name="rloo", reward_level="turn", kl_coef=0.1, kl_kind="k1"
    ),
    "rloo-kl": dict(name="rloo", kl_coef=0.1, kl_kind="k1"),
    "reinforce++": dict(name="reinforce++", gamma=0.95),
    "reinforce++-turn": dict(name="reinforce++", reward_level="turn", gamma=0.95),
    "ppo": dict(name="ppo", gamma=0.99, lam=0.95),
    "ppo-turn-kl": dict(
        name="ppo", reward_level="turn", gamma=0.99, lam=0.9, kl_coef=0.05, kl_kind="k1",
    ),
}  # fmt: skip


def _two_layouts(seed: int):
    """The same 6 trajectories (3 groups, 1-4 turns of 1-3 sampled tokens) as one
    prefix-preserving row each and as one row per turn (each with its own prompt), with the
    same values / logprobs on the trained tokens and garbage elsewhere."""
    g = torch.Generator().manual_seed(seed)
    num_turns = [1, 4, 2, 3, 4, 2]
    single, per_turn = [], []  # (ids-like rows): (mask, turn_ids, per-token payload) lists
    for k_count in num_turns:
        s_mask, s_turn = [0, 0], [-1, -1]  # a 2-token prompt
        rows = []
        for k in range(k_count):
            n = int(torch.randint(1, 4, (1,), generator=g))
            s_mask += [1] * n
            s_turn += [k] * n
            p = int(torch.randint(1, 4, (1,), generator=g))  # this turn's own prompt
            rows.append(([0] * p + [1] * n, [-1] * p + [k] * n))
            if k < k_count - 1:  # the observation after the turn
                s_mask += [0, 0]
                s_turn += [k, k]
        single.append((s_mask, s_turn))
        per_turn.append(rows)
    rewards = torch.randn(len(num_turns), max(num_turns), generator=g)
    for i, k_count in enumerate(num_turns):
        rewards[i, k_count:] = 0.0
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    # the state each turn acted in: 3 states in all, so that turns share states
    states = torch.randint(0, 3, (len(num_turns), max(num_turns)), generator=g)
    for i, k_count in enumerate(num_turns):
        states[i, k_count:] = -1

    def pad(rows):
        width = max(len(m) for m, _ in rows)
        mask = torch.tensor([m + [0] * (width - len(m)) for m, _ in rows])
        turns = torch.tensor([t + [-1] * (width - len(t)) for _, t in rows])
        return mask, turns

    s_mask, s_turn = pad(single)
    flat_rows = [r for rows in per_turn for r in rows]
    p_mask, p_turn = pad(flat_rows)
    traj_ids = torch.tensor([i for i, rows in enumerate(per_turn) for _ in rows])
    # per-token payloads (values, logp, ref) on the trained tokens, garbage elsewhere
    num_trained = int(s_mask.sum())
    payloads = [torch.randn(num_trained, generator=g) for _ in range(3)]

    def place(mask):
        outs = []
        for pay in payloads:
            x = torch.randn(mask.shape, generator=g) * 100  # garbage off the trained tokens
            x[mask.bool()] = pay
            outs.append(x)
        return outs

    single_batch = dict(
        loss_mask=s_mask, turn_ids=s_turn, turn_rewards=rewards, group_ids=groups,
        traj_ids=torch.arange(len(num_turns)), state_ids=states,
    )  # fmt: skip
    per_turn_batch = dict(
        loss_mask=p_mask, turn_ids=p_turn, turn_rewards=rewards[traj_ids],
        group_ids=groups[traj_ids], traj_ids=traj_ids, state_ids=states[traj_ids],
    )  # fmt: skip
    return single_batch, place(s_mask), per_turn_batch, place(p_mask)


@pytest.mark.parametrize("name", sorted(_GOLDEN_CONFIGS))
@pytest.mark.parametrize("seed", [0, 1])
def test_per_turn_rows_get_the_credit_of_one_prefix_preserving_row(name, seed) -> None:
    algo = AlgoConfig(**_GOLDEN_CONFIGS[name])
    single, (s_values, s_logp, s_ref), per_turn, (p_values, p_logp, p_ref) = _two_layouts(seed)
    one = advantages_of(algo, **single, values=s_values, old_logp=s_logp, ref_logp=s_ref)
    rows = advantages_of(algo, **per_turn, values=p_values, old_logp=p_logp, ref_logp=p_ref)
    s_m, p_m = single["loss_mask"].bool(), per_turn["loss_mask"].bool()
    # row-major order of the trained tokens is turn order in both layouts
    close(rows.advantages[p_m], one.advantages[s_m])
    assert (rows.advantages[~p_m] == 0).all()
    assert one.advantages[s_m].abs().sum() > 0  # the case is not trivial
    if algo.use_critic:
        close(rows.value_targets[p_m], one.value_targets[s_m])
    assert rows.stats == pytest.approx(one.stats, rel=1e-5, abs=1e-6)


def test_turn_level_grpo_credits_each_move_by_its_return_to_go() -> None:
    # one group of two 2-turn trajectories: returns 1.5 (turns 0.5, 1.0) and 0 (0, 0).
    # Group mean 0.75, sample std 1.0607. Turn 0 of the first: (1.5 - 0.75) / 1.0607;
    # turn 1: (1.0 - 0.75) / 1.0607 (the move after the reward of turn 0 gets less credit).
    mask = torch.tensor([[1, 1], [1, 1]])
    turn_ids = torch.tensor([[0, 1], [0, 1]])
    out = advantages_of(
        AlgoConfig(name="grpo", reward_level="turn"), loss_mask=mask,
        turn_rewards=torch.tensor([[0.5, 1.0], [0.0, 0.0]]), turn_ids=turn_ids,
        group_ids=torch.tensor([0, 0]),
    )  # fmt: skip
    std = math.sqrt(2 * 0.75**2)
    close(out.advantages, torch.tensor([[0.75, 0.25], [-0.75, -0.75]]) / std, 1e-4)
    # one turn each: the same as trajectory-level GRPO
    single = dict(
        loss_mask=torch.ones(2, 1),
        turn_ids=torch.zeros(2, 1, dtype=torch.long),
        turn_rewards=torch.tensor([[1.0], [0.0]]),
        group_ids=torch.tensor([0, 0]),
    )
    close(
        advantages_of(AlgoConfig(name="grpo", reward_level="turn"), **single).advantages,
        advantages_of(AlgoConfig(name="grpo"), **single).advantages,
    )


def test_grpo_std_floor_keeps_step_penalty_differences_small() -> None:
    # every episode solved (10), one in one move fewer (-0.1 per move): std 0.07
    returns = torch.tensor([[9.6], [9.7]])
    base = dict(
        loss_mask=torch.ones(2, 1),
        turn_ids=torch.zeros(2, 1, dtype=torch.long),
        turn_rewards=returns,
        group_ids=torch.tensor([0, 0]),
    )
    scaled = advantages_of(AlgoConfig(name="grpo"), **base).advantages
    floored = advantages_of(AlgoConfig(name="grpo", std_floor=1.0), **base).advantages
    close(scaled.abs(), torch.full((2, 1), 1 / math.sqrt(2)), 1e-3)  # blown up to unit scale
    close(floored, torch.tensor([[-0.05], [0.05]]), 1e-4)
