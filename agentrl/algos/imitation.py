"""Imitation: rejection-sampling fine-tuning and expert iteration.

Both keep only the trajectories to imitate and train their plain NLL: every trained token gets
advantage 1 and the loss has no ratio to the rollout's weights, no clip and no importance
weight. RFT imitates the policy's own successful episodes; expert iteration (Anthony et al.
2017) imitates the solutions a beam search guided by the policy finds in the step's rooms
(`agentrl.rollout.search`), optionally training each found answer with probability
`min(1, (1 - p) / search_label_tau)` at weight 1 over that (importance-sampled answers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentrl.algos.base import Algorithm, CreditInputs, register_algorithm
from agentrl.algos.config import COMMON_KEYS, AlgoConfig

if TYPE_CHECKING:
    from torch import Tensor

    from agentrl.algos.estimate import Rewards
    from agentrl.rollout.source import RolloutSource, SourceParts
    from agentrl.runtime.batch import TrainBatch
    from agentrl.train.config import TrainConfig
    from agentrl.trajectory.types import Trajectory

__all__ = ["RFT", "ExpertIteration", "imitation_estimate"]


def imitation_estimate(algo: AlgoConfig, r: Rewards) -> tuple[Tensor, None]:
    """Advantage 1 on every trained token of a kept trajectory."""
    return r.loss_mask.to(r.token_rewards.dtype).clone(), None


@register_algorithm("rft")
class RFT(Algorithm):
    """Rejection-sampling fine-tuning: imitate the successful sampled episodes."""

    config_keys = COMMON_KEYS
    imitation = True
    estimate = staticmethod(imitation_estimate)

    def keep(self, trajs: list[Trajectory]) -> tuple[list[Trajectory], dict[str, float]]:
        kept, metrics = super().keep(trajs)
        solved = [t for t in kept if t.success]
        metrics["filter/keep_frac"] = len(solved) / max(len(trajs), 1)
        return solved, metrics


@register_algorithm("expert-iteration")
class ExpertIteration(RFT):
    """Imitate the solutions of a beam search guided by the policy (`search_beam`)."""

    config_keys = COMMON_KEYS | {"search_beam", "search_easy_keep", "search_label_tau"}

    @classmethod
    def run_requirements(cls, cfg: TrainConfig) -> list[str]:
        needs = {
            "rollout.history_turns: 0 (the prompt must be the state)": (
                cfg.rollout.history_turns == 0
            ),
            "trainer.backend: local (the search scores with the policy in process)": (
                cfg.trainer.backend == "local"
            ),
        }
        return [k for k, ok in needs.items() if not ok]

    def rollout_source(self, parts: SourceParts) -> RolloutSource:
        from agentrl.rollout.source import SearchSource

        return SearchSource(
            parts,
            beam_width=self.cfg.search_beam,
            easy_keep=self.cfg.search_easy_keep,
        )

    def credit(self, batch: TrainBatch, inputs: CreditInputs) -> dict[str, float]:
        metrics = super().credit(batch, inputs)
        if self.cfg.search_label_tau:
            metrics |= self.sample_labels(batch, inputs)
        return metrics

    def sample_labels(self, batch: TrainBatch, inputs: CreditInputs) -> dict[str, float]:
        """Keep a share of the found answers, reweighted so that the loss's expectation is
        unchanged (`agentrl.rollout.search.sample_labels`)."""
        import torch

        from agentrl.rollout.search import SEARCH_KEY, sample_labels

        answer_logp = [
            inputs.trajectories[int(t)].reset_info.get(SEARCH_KEY, {}).get("answer_logp")
            for t in batch.traj_ids
        ]
        with torch.no_grad():
            return sample_labels(
                batch.advantages,
                batch.loss_mask,
                batch.turn_ids,
                answer_logp,
                tau=self.cfg.search_label_tau,
                rng=inputs.rng,
            )
