"""From rewards to per-token advantages, as an `AlgoConfig` says: one call for the trainer.

`compute_advantages` places rewards on tokens (trajectory- or turn-level), applies the KL
penalty when it goes into the reward, runs the configured estimator and optional whitening.

Rows and trajectories: when a chat template is not prefix-preserving, one trajectory becomes
several rows (one per turn), all sharing its `turn_rewards`, group and `traj_ids` entry.
Group statistics (GRPO, RLOO, REINFORCE++ baseline) then count each trajectory once, and the
KL "in the reward" of a trajectory-level estimator is summed over all of its rows. GAE runs
within each row, with the trajectory's return on the row's last trained token (exact for
`gamma = lam = 1`). Turn-level rewards need one row per trajectory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from agentrl.algos._groups import group_mean_std
from agentrl.algos.advantages import (
    gae,
    grpo_advantages,
    place_returns_on_last_token,
    place_turn_rewards,
    reinforce_pp_advantages,
    rloo_advantages,
    trajectory_returns,
    turn_level_gae,
    whiten,
)
from agentrl.algos.config import AlgoConfig
from agentrl.algos.losses import kl_penalty

__all__ = ["AdvantageResult", "compute_advantages"]


@dataclass
class AdvantageResult:
    """What `compute_advantages` returns."""

    advantages: Tensor  # [B, T], 0 where loss_mask is 0
    value_targets: Tensor | None  # [B, T] critic targets (GAE estimators), else None
    token_rewards: Tensor  # [B, T] rewards as placed on tokens (after a KL-in-reward penalty)
    stats: dict[str, float] = field(default_factory=dict)


def _first_row_of_each_traj(traj_ids: Tensor) -> tuple[Tensor, Tensor]:
    """`(first_rows [N], inverse [B])`: one representative row per trajectory."""
    _, inverse = torch.unique(traj_ids, return_inverse=True)
    num = int(inverse.max()) + 1 if inverse.numel() else 0
    rows = torch.arange(traj_ids.numel(), device=traj_ids.device)
    first = torch.full((num,), traj_ids.numel(), device=traj_ids.device, dtype=torch.long)
    first = first.scatter_reduce(0, inverse, rows, reduce="amin")
    return first, inverse


def _group_mean(returns: Tensor, group_ids: Tensor) -> Tensor:
    return group_mean_std(returns, group_ids, unbiased=False)[0].to(returns.dtype)


def _per_trajectory(fn, returns: Tensor, group_ids: Tensor, traj_ids: Tensor | None) -> Tensor:
    """Apply a group estimator `fn(returns [N], group_ids [N])` once per trajectory."""
    if traj_ids is None:
        return fn(returns, group_ids)
    first, inverse = _first_row_of_each_traj(traj_ids)
    return fn(returns[first], group_ids[first])[inverse]


def compute_advantages(
    algo: AlgoConfig,
    *,
    loss_mask: Tensor,
    turn_rewards: Tensor,
    turn_ids: Tensor,
    group_ids: Tensor,
    traj_ids: Tensor | None = None,
    values: Tensor | None = None,
    old_logp: Tensor | None = None,
    ref_logp: Tensor | None = None,
) -> AdvantageResult:
    """Per-token advantages (and critic targets) for a batch of rows.

    - `loss_mask [B, T]`, `turn_ids [B, T]` (-1 outside turns), `turn_rewards [B, K]`,
      `group_ids [B]`, `traj_ids [B]` (rows of the same trajectory; None: one row each).
    - `values [B, T]`: critic values at rollout time (needed when `algo.use_critic`).
    - `old_logp`, `ref_logp [B, T]`: needed when the KL goes into the reward.

    >>> algo = AlgoConfig(estimator="grpo")
    >>> out = compute_advantages(algo, loss_mask=torch.ones(2, 2),
    ...     turn_rewards=torch.tensor([[1.0], [0.0]]), turn_ids=torch.zeros(2, 2, dtype=torch.long),
    ...     group_ids=torch.tensor([0, 0]))
    >>> out.advantages
    tensor([[ 0.7071,  0.7071],
            [-0.7071, -0.7071]])
    """
    m = loss_mask.bool()
    mask = m.to(turn_rewards.dtype)
    per_turn_rows = traj_ids is not None and torch.unique(traj_ids).numel() < traj_ids.numel()
    if algo.reward_level == "turn" and per_turn_rows:
        raise NotImplementedError(
            "turn-level rewards need one row per trajectory; this batch has per-turn samples "
            "(chat template not prefix-preserving): use reward_level 'trajectory'"
        )
    if algo.use_critic and values is None:
        raise ValueError(f"estimator {algo.estimator!r} needs critic values")

    kl = None
    if algo.use_reference and algo.kl_in_reward:
        if old_logp is None or ref_logp is None:
            raise ValueError("kl_in_reward needs old_logp and ref_logp")
        kl = torch.where(m, kl_penalty(old_logp.detach(), ref_logp, algo.kl_kind), 0.0)

    stats: dict[str, float] = {}
    value_targets = None
    if algo.reward_level == "trajectory":
        returns = trajectory_returns(turn_rewards)  # [B]
        token_rewards = place_returns_on_last_token(returns, loss_mask)
    else:
        token_rewards = place_turn_rewards(turn_rewards, turn_ids, loss_mask)
    if kl is not None:
        token_rewards = token_rewards - algo.kl_coef * kl
        stats["kl_reward"] = float(kl.sum() / m.sum().clamp(min=1))

    if algo.estimator in ("grpo", "rloo"):
        seq_returns = token_rewards.sum(-1)  # [B]
        if kl is not None and per_turn_rows:
            # Every row carries the full return; only the KL is split over the rows.
            _, inverse = _first_row_of_each_traj(traj_ids)
            kl_sum = torch.zeros(int(inverse.max()) + 1, dtype=kl.dtype).index_add(
                0, inverse, kl.sum(-1)
            )
            seq_returns = trajectory_returns(turn_rewards) - algo.kl_coef * kl_sum[inverse]
        if algo.estimator == "grpo":

            def fn(r: Tensor, g: Tensor) -> Tensor:
                return grpo_advantages(r, g, scale_by_std=algo.scale_by_std)
        else:
            fn = rloo_advantages
        adv = _per_trajectory(fn, seq_returns, group_ids, traj_ids).unsqueeze(-1) * mask
    elif algo.estimator == "reinforce++":
        groups = None
        if algo.reinforce_baseline:
            groups = group_ids
            if per_turn_rows:
                # The baseline is the group mean over trajectories, not over rows.
                baseline = _per_trajectory(
                    _group_mean, trajectory_returns(turn_rewards), group_ids, traj_ids
                )
                token_rewards = token_rewards - place_returns_on_last_token(baseline, loss_mask)
                groups = None
        adv = reinforce_pp_advantages(token_rewards, loss_mask, gamma=algo.gamma, group_ids=groups)
    elif algo.estimator == "gae":
        adv, value_targets = gae(token_rewards, values, loss_mask, gamma=algo.gamma, lam=algo.lam)
    elif algo.estimator == "turn-gae":
        turn_r = turn_rewards
        if kl is not None:
            # The KL of a turn's tokens is charged to that turn's reward.
            sel = m & (turn_ids >= 0)
            bucket = torch.where(sel, turn_ids, turn_rewards.shape[1]).long()
            kl_turn = torch.zeros(turn_rewards.shape[0], turn_rewards.shape[1] + 1, dtype=kl.dtype)
            kl_turn = kl_turn.scatter_add(1, bucket, torch.where(sel, kl, 0.0))[:, :-1]
            turn_r = turn_rewards - algo.kl_coef * kl_turn
        adv, value_targets = turn_level_gae(
            turn_r,
            turn_ids,
            values,
            loss_mask,
            gamma_turn=algo.turn_gamma,
            lam_turn=algo.turn_lam,
            gamma_token=algo.gamma,
            lam_token=algo.lam,
        )
    else:  # pragma: no cover - the config's Literal rules this out
        raise ValueError(f"unknown estimator {algo.estimator!r}")

    if algo.whiten_advantages:
        adv = whiten(adv, loss_mask)
    n = m.sum().clamp(min=1)
    stats["advantage_mean"] = float(torch.where(m, adv, 0.0).sum() / n)
    stats["advantage_abs_mean"] = float(torch.where(m, adv.abs(), 0.0).sum() / n)
    return AdvantageResult(adv, value_targets, token_rewards, stats)
