"""Policy gradient without a critic: GRPO, RLOO and REINFORCE++.

Each keeps every trainable trajectory (or the StarPO-S filter's groups), credits it against
its group (GRPO, RLOO) or the batch (REINFORCE++), and trains the PPO clip loss of
`Algorithm.policy_loss`. At `reward_level: turn`, GRPO and RLOO credit each turn with its
discounted return-to-go (`turn_gamma`) less the group's baseline.

torch is imported where the credit is computed, so registering these classes (and validating a
config that names them) does not import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentrl.algos.base import Algorithm, register_algorithm
from agentrl.algos.config import CLIP_KEYS, AlgoConfig

if TYPE_CHECKING:
    from torch import Tensor

    from agentrl.algos.estimate import Rewards

__all__ = ["GRPO", "RLOO", "ReinforcePP", "group_estimate", "rloo_estimate"]


def _group_credit(algo: AlgoConfig, r: Rewards, *, leave_one_out: bool) -> tuple[Tensor, None]:
    """Each trajectory's return against its group's: the group mean over the group std
    (GRPO), or the mean of the group's other returns (RLOO, `leave_one_out`); at
    `reward_level: turn`, each turn's return-to-go against the group's returns."""
    from agentrl.algos.advantages import grpo_advantages, rloo_advantages, turn_returns_to_go
    from agentrl.algos.estimate import group_center_scale

    mask = r.loss_mask.to(r.token_rewards.dtype)
    if algo.reward_level == "trajectory":
        returns = r.token_rewards.sum(-1)  # [N] (a KL in the reward included)
        if leave_one_out:
            adv = rloo_advantages(returns, r.group_ids)
        else:
            adv = grpo_advantages(
                returns, r.group_ids, scale_by_std=algo.scale_by_std, std_floor=algo.std_floor
            )
        return adv.unsqueeze(-1) * mask, None
    to_go = turn_returns_to_go(r.turn_rewards, gamma=algo.turn_gamma)  # [N, K]
    center, scale = group_center_scale(
        algo, to_go[:, 0], r.group_ids, leave_one_out=leave_one_out
    )  # [N], [N]
    return r.on_turn_tokens((to_go - center.unsqueeze(-1)) * scale.unsqueeze(-1)), None


def group_estimate(algo: AlgoConfig, r: Rewards) -> tuple[Tensor, None]:
    """GRPO's credit: each trajectory's return less its group's mean, over the group's std
    (at `reward_level: turn`, each turn's return-to-go against the group's returns)."""
    return _group_credit(algo, r, leave_one_out=False)


def rloo_estimate(algo: AlgoConfig, r: Rewards) -> tuple[Tensor, None]:
    """RLOO's credit: each trajectory's return less the mean of its group's other returns."""
    return _group_credit(algo, r, leave_one_out=True)


@register_algorithm("grpo")
class GRPO(Algorithm):
    """Group-relative advantages (DeepSeekMath): return less the group mean, over its std."""

    config_keys = CLIP_KEYS | {"turn_gamma", "scale_by_std", "std_floor"}
    estimate = staticmethod(group_estimate)


@register_algorithm("rloo")
class RLOO(Algorithm):
    """Leave-one-out baseline (Ahmadian et al. 2024): the mean of the group's other returns."""

    config_keys = CLIP_KEYS | {"turn_gamma"}
    estimate = staticmethod(rloo_estimate)


def reinforce_pp_estimate(algo: AlgoConfig, r: Rewards) -> tuple[Tensor, None]:
    """REINFORCE++ with baseline (Hu 2025): returns-to-go, less the group mean, whitened over
    the batch."""
    from agentrl.algos.advantages import reinforce_pp_advantages

    adv = reinforce_pp_advantages(
        r.token_rewards, r.loss_mask, gamma=algo.gamma, group_ids=r.group_ids
    )
    return adv, None


@register_algorithm("reinforce++")
class ReinforcePP(Algorithm):
    """REINFORCE++: no critic, no group-relative scaling; the batch whitens the returns."""

    config_keys = CLIP_KEYS | {"gamma"}
    estimate = staticmethod(reinforce_pp_estimate)
