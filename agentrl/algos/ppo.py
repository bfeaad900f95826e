"""PPO with a critic: GAE advantages and a clipped value loss (StarPO at trajectory level).

The critic is a value head on a copy of the policy's trunk, trained beside the policy
(`value_clip_eps`, `optim.critic_lr`). Its warm-up (`critic_warmup_steps`): the
first steps train only the critic on their rollouts, the first of them starting the value
head at the least-squares fit of its returns, so its baseline is useful from the first
policy update.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentrl.algos.base import Algorithm, CreditInputs, register_algorithm
from agentrl.algos.config import CLIP_KEYS, AlgoConfig

if TYPE_CHECKING:
    from torch import Tensor

    from agentrl.algos.estimate import Rewards
    from agentrl.runtime.batch import TrainBatch

__all__ = ["PPO", "gae_estimate"]


def gae_estimate(algo: AlgoConfig, r: Rewards) -> tuple[Tensor, Tensor]:
    """GAE over the trained tokens (`gamma`, `lam`): the advantages, whitened over the
    batch's trained tokens, and the critic's targets."""
    from agentrl.algos.advantages import gae, whiten

    if r.values is None:
        raise ValueError("ppo needs critic values (TrainBatch.old_values)")
    adv, targets = gae(r.token_rewards, r.values, r.loss_mask, gamma=algo.gamma, lam=algo.lam)
    return whiten(adv, r.loss_mask), targets


@register_algorithm("ppo")
class PPO(Algorithm):
    """PPO clip with a critic and GAE; the critic warms up for `critic_warmup_steps`."""

    config_keys = CLIP_KEYS | {"gamma", "lam", "critic_warmup_steps", "value_clip_eps"}
    uses_critic = True
    estimate = staticmethod(gae_estimate)

    def trains_policy(self, step: int) -> bool:
        return step > self.cfg.critic_warmup_steps

    def credit(self, batch: TrainBatch, inputs: CreditInputs) -> dict[str, float]:
        """GAE credit, and the critic's explained variance of its targets and of the plain
        returns (rollout-time values)."""
        from agentrl.algos.losses import explained_variance

        metrics = super().credit(batch, inputs)
        if batch.old_values is not None and batch.value_targets is not None:
            metrics["critic/explained_var"] = explained_variance(
                batch.old_values, batch.value_targets, batch.loss_mask
            )
            # lambda-returns hold the critic's own later values: also score it on the plain
            # returns, which nothing of the critic's enters
            metrics["critic/explained_var_mc"] = explained_variance(
                batch.old_values, self.critic_fit_targets(batch, inputs), batch.loss_mask
            )
        return metrics

    def critic_fit_targets(self, batch: TrainBatch, inputs: CreditInputs) -> Tensor:
        """Each trained token's return-to-go of the (scaled) rewards `[B, T]`: no bootstrap
        (lambda 1) and no KL penalty."""
        import torch

        from agentrl.algos.estimate import compute_advantages

        mc = self.cfg.model_copy(update={"lam": 1.0, "kl_coef": 0.0})
        return compute_advantages(
            mc,
            loss_mask=batch.loss_mask,
            turn_rewards=batch.turn_rewards / inputs.reward_scale,
            turn_ids=batch.turn_ids,
            group_ids=batch.group_ids,
            traj_ids=batch.traj_ids,
            values=torch.zeros_like(batch.loss_mask),
            estimate=gae_estimate,
        ).value_targets
