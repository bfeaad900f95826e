"""From rewards to per-token advantages, as an `AlgoConfig` says: one call for the trainer.

`compute_advantages` places rewards on tokens (trajectory- or turn-level), applies the KL
penalty when it goes into the reward (`k1`), and runs the algorithm's estimator.

Rows and trajectories: when a chat template is not prefix-preserving (or prompts keep only
the last turns, `rollout.history_turns`), one trajectory becomes several rows, one per turn,
linked by `traj_ids`. Every estimator reads only the trained tokens, so the rows of a
trajectory are first *packed*: their trained tokens, in turn order, become one row of a
`[N, L]` batch (N trajectories). The estimator runs on that batch exactly as it would on one
row per trajectory, and the results are scattered back to the rows. Per-turn rows therefore
get the same credit as one prefix-preserving row would (turn-level rewards, turn-level GAE and
group statistics over trajectories included); `tests/algos/test_estimate.py` checks this for
every estimator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from agentrl.algos._groups import group_index, group_mean_std
from agentrl.algos.advantages import (
    grpo_scale,
    place_returns_on_last_token,
    place_turn_rewards,
    trajectory_returns,
)
from agentrl.algos.config import AlgoConfig
from agentrl.algos.losses import kl_penalty

__all__ = ["AdvantageResult", "PackedTrajectories", "compute_advantages"]


@dataclass
class AdvantageResult:
    """What `compute_advantages` returns."""

    advantages: Tensor  # [B, T], 0 where loss_mask is 0
    value_targets: Tensor | None  # [B, T] critic targets (GAE estimators), else None
    token_rewards: Tensor  # [B, T] rewards as placed on tokens (after a KL-in-reward penalty)
    stats: dict[str, float] = field(default_factory=dict)


@dataclass
class PackedTrajectories:
    """The trained tokens of each trajectory, in order, as one row each.

    `index [N, L]` holds flat positions into the `[B, T]` batch (row-major), `valid [N, L]`
    says which entries are real, `first_rows [N]` is one batch row of each trajectory.
    """

    index: Tensor
    valid: Tensor
    first_rows: Tensor
    shape: tuple[int, int]

    @classmethod
    def build(cls, traj_ids: Tensor, loss_mask: Tensor) -> PackedTrajectories:
        """Pack the rows of `loss_mask [B, T]` by `traj_ids [B]`; a trajectory's rows must be
        in turn order (as `to_batch` makes them), and its tokens keep row then position order.

        >>> p = PackedTrajectories.build(torch.tensor([0, 0, 1]),
        ...                              torch.tensor([[0, 1], [1, 1], [1, 0]]))
        >>> p.gather(torch.tensor([[9.0, 1.0], [2.0, 3.0], [4.0, 9.0]]))
        tensor([[1., 2., 3.],
                [4., 0., 0.]])
        """
        num_rows, length = loss_mask.shape
        _, inverse = torch.unique(traj_ids, return_inverse=True)  # [B]
        num = int(inverse.max()) + 1 if inverse.numel() else 0
        rows, cols = loss_mask.bool().nonzero(as_tuple=True)  # row-major order
        owner = inverse[rows]
        order = torch.argsort(owner, stable=True)
        rows, cols, owner = rows[order], cols[order], owner[order]
        counts = torch.bincount(owner, minlength=num)
        starts = torch.cumsum(counts, 0) - counts
        slot = torch.arange(owner.numel()) - starts[owner]
        width = int(counts.max()) if counts.numel() else 0
        index = torch.zeros(num, width, dtype=torch.long)
        valid = torch.zeros(num, width, dtype=torch.bool)
        index[owner, slot] = rows * length + cols
        valid[owner, slot] = True
        first = torch.full((num,), num_rows, dtype=torch.long)
        first = first.scatter_reduce(0, inverse, torch.arange(num_rows), reduce="amin")
        return cls(index, valid, first, (num_rows, length))

    def gather(self, x: Tensor) -> Tensor:
        """`[B, T]` -> `[N, L]` (0 where not valid)."""
        packed = x.reshape(-1)[self.index]
        return torch.where(self.valid, packed, torch.zeros_like(packed))

    def scatter(self, packed: Tensor) -> Tensor:
        """`[N, L]` -> `[B, T]` (0 off the trained tokens)."""
        out = packed.new_zeros(self.shape[0] * self.shape[1])
        out[self.index[self.valid]] = packed[self.valid]
        return out.reshape(self.shape)


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
    state_ids: Tensor | None = None,
    estimate: Estimate,
) -> AdvantageResult:
    """Per-token advantages (and critic targets) for a batch of rows.

    - `loss_mask [B, T]`, `turn_ids [B, T]` (-1 outside turns), `turn_rewards [B, K]`,
      `group_ids [B]`, `traj_ids [B]` (rows of the same trajectory; None: one row each).
      Every row of a trajectory carries the trajectory's `turn_rewards` and group.
    - `values [B, T]`: critic values at rollout time (needed when `algo.use_critic`).
    - `old_logp`, `ref_logp [B, T]`: needed when the KL goes into the reward.
    - `state_ids [B, K]`: the state each turn acted in (`TrainBatch.turn_states`: equal ids
      for equal prompts, -1 past the last turn); needed by `gigpo`.
    - `estimate`: the algorithm's credit on the packed rows (`Algorithm.estimate`; e.g.
      `agentrl.algos.policy_gradient.group_estimate` for grpo).

    >>> from agentrl.algos.policy_gradient import group_estimate
    >>> algo = AlgoConfig(name="grpo")
    >>> out = compute_advantages(algo, loss_mask=torch.ones(2, 2),
    ...     turn_rewards=torch.tensor([[1.0], [0.0]]), turn_ids=torch.zeros(2, 2, dtype=torch.long),
    ...     group_ids=torch.tensor([0, 0]), estimate=group_estimate)
    >>> out.advantages
    tensor([[ 0.7071,  0.7071],
            [-0.7071, -0.7071]])
    """
    if algo.use_critic and values is None:
        raise ValueError(f"algorithm {algo.name!r} needs critic values")
    kl = None
    if algo.use_reference and algo.kl_in_reward:
        if old_logp is None or ref_logp is None:
            raise ValueError("kl_in_reward needs old_logp and ref_logp")
        m = loss_mask.bool()
        kl = torch.where(m, kl_penalty(old_logp.detach(), ref_logp, algo.kl_kind), 0.0)

    per_turn_rows = traj_ids is not None and torch.unique(traj_ids).numel() < traj_ids.numel()
    if not per_turn_rows:
        return _one_row_each(
            algo, estimate, loss_mask, turn_rewards, turn_ids, group_ids, values, kl, state_ids
        )
    packed = PackedTrajectories.build(traj_ids, loss_mask)
    first = packed.first_rows
    out = _one_row_each(
        algo,
        estimate,
        packed.valid.to(loss_mask.dtype),
        turn_rewards[first],
        torch.where(packed.valid, packed.gather(turn_ids), -1),
        group_ids[first],
        None if values is None else packed.gather(values),
        None if kl is None else packed.gather(kl),
        None if state_ids is None else state_ids[first],
    )
    return AdvantageResult(
        packed.scatter(out.advantages),
        None if out.value_targets is None else packed.scatter(out.value_targets),
        packed.scatter(out.token_rewards),
        out.stats,
    )


@dataclass
class Rewards:
    """What an estimator sees: one row per trajectory (per-turn rows already packed)."""

    loss_mask: Tensor  # [N, L] 1 on trained tokens
    token_rewards: Tensor  # [N, L] rewards on tokens, after a KL-in-reward penalty
    turn_rewards: Tensor  # [N, K] each turn's reward, less the KL of its tokens (KL in reward)
    turn_ids: Tensor  # [N, L] the turn of each token, -1 outside turns
    group_ids: Tensor  # [N]
    values: Tensor | None  # [N, L] critic values at rollout time
    state_ids: Tensor | None  # [N, K] the state each turn acted in, -1 past the last turn

    def on_turn_tokens(self, turn_values: Tensor) -> Tensor:
        """`[N, K]` values of each turn on that turn's trained tokens `[N, L]`."""
        return _on_turn_tokens(turn_values, self.turn_ids, self.loss_mask.bool())


Estimate = Callable[[AlgoConfig, Rewards], tuple[Tensor, Tensor | None]]
"""An algorithm's credit: `(advantages [N, L], critic targets [N, L] or None)`."""


def _one_row_each(
    algo: AlgoConfig,
    estimate: Estimate,
    loss_mask: Tensor,
    turn_rewards: Tensor,
    turn_ids: Tensor,
    group_ids: Tensor,
    values: Tensor | None,
    kl: Tensor | None,
    state_ids: Tensor | None = None,
) -> AdvantageResult:
    """`compute_advantages` for a batch with one row per trajectory."""
    m = loss_mask.bool()
    stats: dict[str, float] = {}
    if algo.reward_level == "trajectory":
        returns = trajectory_returns(turn_rewards)  # [B]
        token_rewards = place_returns_on_last_token(returns, loss_mask)
    else:
        token_rewards = place_turn_rewards(turn_rewards, turn_ids, loss_mask)
    if kl is not None:
        token_rewards = token_rewards - algo.kl_coef * kl
        stats["kl_reward"] = float(kl.sum() / m.sum().clamp(min=1))
    rewards = Rewards(
        loss_mask,
        token_rewards,
        _charge_kl_to_turns(algo, turn_rewards, turn_ids, m, kl),
        turn_ids,
        group_ids,
        values,
        state_ids,
    )
    adv, value_targets = estimate(algo, rewards)
    n = m.sum().clamp(min=1)
    stats["advantage_mean"] = float(torch.where(m, adv, 0.0).sum() / n)
    stats["advantage_abs_mean"] = float(torch.where(m, adv.abs(), 0.0).sum() / n)
    return AdvantageResult(adv, value_targets, token_rewards, stats)


def _charge_kl_to_turns(
    algo: AlgoConfig, turn_rewards: Tensor, turn_ids: Tensor, m: Tensor, kl: Tensor | None
) -> Tensor:
    """Turn rewards `[B, K]` less `kl_coef` times the KL of each turn's trained tokens."""
    if kl is None:
        return turn_rewards
    sel = m & (turn_ids >= 0)
    num_turns = turn_rewards.shape[1]
    bucket = torch.where(sel, turn_ids, num_turns).long()
    kl_turn = torch.zeros(turn_rewards.shape[0], num_turns + 1, dtype=kl.dtype)
    kl_turn = kl_turn.scatter_add(1, bucket, torch.where(sel, kl, 0.0))[:, :-1]
    return turn_rewards - algo.kl_coef * kl_turn


def group_center_scale(
    algo: AlgoConfig, returns: Tensor, group_ids: Tensor, *, leave_one_out: bool = False
) -> tuple[Tensor, Tensor]:
    """The baseline each group estimator subtracts from a return `[B]` and the factor it then
    applies `[B]`: GRPO the group mean and 1 / std (floored), RLOO (`leave_one_out`) the mean
    of the other returns and 1. A group of one gets factor 0 (no baseline, no signal)."""
    mean, std = group_mean_std(returns, group_ids, unbiased=True)
    mean, std = mean.to(returns.dtype), std.to(returns.dtype)
    _, inverse, counts = group_index(group_ids)
    n = counts[inverse].to(returns.dtype)
    alone = n < 2
    if leave_one_out:
        center = (n * mean - returns) / (n - 1).clamp(min=1)
        scale = torch.ones_like(returns)
    else:
        center = mean
        scale = grpo_scale(std, scale_by_std=algo.scale_by_std, std_floor=algo.std_floor)
    return torch.where(alone, returns, center), torch.where(alone, 0.0, scale)


def _on_turn_tokens(turn_values: Tensor, turn_ids: Tensor, m: Tensor) -> Tensor:
    """`[B, K]` values of each turn on that turn's trained tokens `[B, T]` (0 elsewhere)."""
    sel = m & (turn_ids >= 0)
    picked = turn_values.gather(1, turn_ids.clamp(min=0).long())
    return torch.where(sel, picked, torch.zeros_like(picked))
