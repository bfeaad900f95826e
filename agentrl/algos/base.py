"""The `Algorithm` interface and its registry.

An algorithm says four things, and the trainer asks nothing else of it:
- which trajectories it keeps (`keep`);
- how it assigns credit (`estimate`, run by `credit` on the packed trajectories);
- its loss (`policy_loss`);
- what it needs scored before the update (`needs`: old logprobs, a reference, a critic).

It may also pick the rollout source that makes a step's trajectories (`rollout_source`:
sampling by default). One file per family registers its algorithms by name:

>>> algorithm_class("grpo").__name__
'GRPO'
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from agentrl.algos.config import CLIP_KEYS, AlgoConfig

if TYPE_CHECKING:
    from torch import Tensor

    from agentrl.algos.estimate import Estimate
    from agentrl.rollout.source import RolloutSource, SourceParts
    from agentrl.runtime.batch import TrainBatch
    from agentrl.train.config import TrainConfig
    from agentrl.trajectory.types import Trajectory

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "CreditInputs",
    "Needs",
    "algorithm_class",
    "make_algorithm",
    "register_algorithm",
]

ALGORITHMS: dict[str, type[Algorithm]] = {}
"""Registered algorithms by name (`algo.name`)."""

_FAMILIES = (
    "agentrl.algos.policy_gradient",
    "agentrl.algos.ppo",
    "agentrl.algos.imitation",
    "agentrl.algos.gigpo",
)
"""The modules of the built-in families: one file each."""


def register_algorithm(name: str) -> Callable[[type[Algorithm]], type[Algorithm]]:
    """Class decorator: register an `Algorithm` subclass as `algo.name: NAME`, from any module
    (a user's too; `algo.name: module.path:Class` needs no registration)."""
    if not name or ":" in name:
        raise ValueError(f"algorithm name {name!r}: give a non-empty name without ':'")

    def add(cls: type[Algorithm]) -> type[Algorithm]:
        _check_class(cls, name)
        known = ALGORITHMS.get(name)
        if known is not None and known.__qualname__ != cls.__qualname__:
            raise ValueError(f"algorithm {name!r} is already registered ({known.__qualname__})")
        cls.name = name
        ALGORITHMS[name] = cls
        return cls

    return add


def _check_class(cls: object, name: str) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise ValueError(f"algorithm {name!r} is not a subclass of agentrl.algos.Algorithm")
    unknown = sorted(cls.config_keys - set(AlgoConfig.model_fields))
    if unknown:
        raise ValueError(f"algorithm {name!r} reads keys that are not algo keys: {unknown}")


def algorithm_class(name: str) -> type[Algorithm]:
    """The algorithm `name`: a registered one (the built-in families register when first
    asked), or `module.path:Class` (imported).

    Raises `ValueError` naming the known algorithms, or why the class cannot be imported.
    """
    for family in _FAMILIES:
        importlib.import_module(family)
    if name in ALGORITHMS:
        return ALGORITHMS[name]
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"algorithm {name!r}: cannot import it ({e})") from None
        _check_class(cls, name)
        ALGORITHMS[name] = cls
        return cls
    raise ValueError(
        f"unknown algorithm {name!r}; known: {', '.join(sorted(ALGORITHMS))}, or module.path:Class"
    )


def make_algorithm(cfg: AlgoConfig) -> Algorithm:
    """The algorithm `cfg.name`, configured by `cfg`."""
    return algorithm_class(cfg.name)(cfg)


@dataclass(frozen=True)
class Needs:
    """What the update needs computed with the weights before it."""

    old_logp: bool = False
    """The policy's logprobs of the trained tokens (the PPO ratio after the first step)."""
    reference: bool = False
    """A frozen reference model's logprobs (the KL term)."""
    critic: bool = False
    """A value model, trained beside the policy."""


@dataclass
class CreditInputs:
    """What credit sees besides the batch."""

    trajectories: list[Trajectory]
    """The kept trajectories the batch was built from (`batch.traj_ids` index them)."""
    reward_scale: float = 1.0
    """Rewards are divided by this (the running return std with `algo.normalize_rewards`)."""
    rng: random.Random = field(default_factory=random.Random)
    """The step's own draws (fixed by run seed and step)."""


class Algorithm:
    """A trajectory-level RL algorithm; subclasses set `estimate` and override what differs.

    What a subclass declares (class attributes): the `algo.*` keys it reads
    (`config_keys`: a key of another algorithm set by the user is refused), whether it trains
    a critic (`uses_critic`) and whether its loss is plain imitation (`imitation`: no ratio,
    no clip, no importance weight).
    """

    name: ClassVar[str] = ""
    config_keys: ClassVar[frozenset[str]] = CLIP_KEYS
    """The `algo.*` keys (without the section) this algorithm reads: by default those of a
    policy gradient with the PPO clip (`agentrl.algos.config.CLIP_KEYS`)."""
    uses_critic: ClassVar[bool] = False
    """A value model is trained beside the policy (rewards are then normalised)."""
    imitation: ClassVar[bool] = False
    """The loss is the plain NLL of the kept trajectories (nothing clips)."""
    reward_levels: ClassVar[tuple[str, ...]] = ("trajectory", "turn")
    """The `algo.reward_level`s it can credit."""

    @classmethod
    def run_requirements(cls, cfg: TrainConfig) -> list[str]:
        """What run config `cfg` lacks for this algorithm (`key: value (why)`, none by
        default): `TrainConfig` refuses such a run before any model loads."""
        return []

    def __init__(self, cfg: AlgoConfig) -> None:
        self.cfg = cfg

    # -- what it needs ------------------------------------------------------------------------
    @property
    def needs(self) -> Needs:
        """Old logprobs when the update takes several optimizer steps per rollout or the KL
        goes into the reward (one step: the update's own forward sees the pre-update weights,
        so its detached logp is `old_logp`, as TRL and verl do)."""
        a = self.cfg
        one_step = a.ppo_epochs == 1 and a.num_mini_batches == 1
        return Needs(
            old_logp=(not one_step and not self.imitation) or self.kl_in_reward,
            reference=a.use_reference,
            critic=self.uses_critic,
        )

    @property
    def kl_in_reward(self) -> bool:
        return self.cfg.use_reference and self.cfg.kl_in_reward

    @property
    def skips_uncredited_rows(self) -> bool:
        """The loss has no term besides the policy loss (no entropy bonus, no KL loss, no
        critic): a row whose advantages are all 0 adds nothing to it or to its gradient, so
        the update leaves it out of its forward and backward passes."""
        a = self.cfg
        return a.entropy_coef == 0 and not a.use_kl_loss and not self.needs.critic

    @property
    def credit_before_scoring(self) -> bool:
        """The credit needs nothing scoring computes (no critic values, no KL in the reward)
        and rows without credit are not trained: credit first, then score only the credited
        rows."""
        return self.skips_uncredited_rows and not self.kl_in_reward

    def trains_policy(self, step: int) -> bool:
        """Whether step `step` (1-based) updates the policy (a critic's warm-up does not)."""
        return True

    def critic_fit_targets(self, batch: TrainBatch, inputs: CreditInputs) -> Tensor:
        """The targets `[B, T]` a critic's value head starts fitted to (algorithms with a
        critic that warms up)."""
        raise TypeError(f"algorithm {self.name!r} trains no critic")

    # -- the rollout source -------------------------------------------------------------------
    def rollout_source(self, parts: SourceParts) -> RolloutSource:
        """Where the step's trajectories come from: groups sampled by the rollout loop."""
        from agentrl.rollout.source import SamplingSource

        return SamplingSource(parts)

    # -- keep ---------------------------------------------------------------------------------
    def keep(self, trajs: list[Trajectory]) -> tuple[list[Trajectory], dict[str, float]]:
        """The trainable trajectories to learn from: the StarPO-S filter keeps the groups with
        the highest in-group reward std (`algo.filter_keep_ratio`), or all."""
        import torch

        from agentrl.algos.filters import filter_stats, starpo_s_filter

        returns = torch.tensor([t.total_reward for t in trajs])  # [N]
        group_ids = torch.tensor([t.group_id for t in trajs])  # [N]
        if self.cfg.use_filter:
            keep = starpo_s_filter(
                returns, group_ids, self.cfg.filter_keep_ratio, min_std=self.cfg.filter_min_std
            )
        else:
            keep = torch.ones(len(trajs), dtype=torch.bool)
        stats = filter_stats(returns, group_ids, keep)
        metrics = {
            "reward/in_group_std": stats["group_std_before"],
            "reward/in_group_std_after_filter": stats["group_std_after"],
            "filter/keep_frac": stats["keep_frac"],
            "filter/num_groups_kept": stats.get("num_groups_after", 0.0),
        }
        return [t for t, k in zip(trajs, keep.tolist(), strict=True) if k], metrics

    # -- credit -------------------------------------------------------------------------------
    estimate: ClassVar[Estimate]
    """The family's estimator on one row per trajectory (`agentrl.algos.estimate.Rewards`)."""

    def credit(self, batch: TrainBatch, inputs: CreditInputs) -> dict[str, float]:
        """Fill `batch.advantages` `[B, T]` (0 off the trained tokens) and
        `batch.value_targets`; return the advantage metrics."""
        from agentrl.algos.estimate import compute_advantages

        result = compute_advantages(
            self.cfg,
            loss_mask=batch.loss_mask,
            turn_rewards=batch.turn_rewards / inputs.reward_scale,
            turn_ids=batch.turn_ids,
            group_ids=batch.group_ids,
            traj_ids=batch.traj_ids,
            values=batch.old_values,
            old_logp=batch.old_logp,
            ref_logp=batch.ref_logp,
            state_ids=batch.turn_states,
            estimate=type(self).estimate,
        )
        batch.advantages, batch.value_targets = result.advantages, result.value_targets
        return {f"advantage/{k}": v for k, v in result.stats.items()}

    # -- the loss -----------------------------------------------------------------------------
    @property
    def sampler_correction(self) -> bool:
        """Weight tokens by the truncated importance ratio to the sampler (`algo.tis_cap`)."""
        return not self.imitation

    def policy_loss(
        self,
        logp: Tensor,
        entropy: Callable[[], Tensor],
        micro: TrainBatch,
        norm: dict[str, Any],
        *,
        temperature: float,
    ) -> tuple[Tensor, dict[str, float]]:
        """The policy's loss on one micro-batch: PPO clip (with dual clip and truncated
        importance weights), minus the entropy bonus, plus the KL to the reference.
        `logp [B, T]` has a gradient; `entropy()` gives the per-token entropy `[B, T]`."""
        import torch

        from agentrl.algos.losses import aggregate, kl_loss, kl_penalty, policy_loss

        a = self.cfg
        old_logp = logp.detach() if micro.old_logp is None else micro.old_logp
        correct = self.sampler_correction and temperature == 1.0
        loss, stats = policy_loss(
            logp,
            old_logp,
            micro.advantages,
            micro.loss_mask,
            clip_eps_low=a.clip_eps_low,
            clip_eps_high=a.clip_eps_high,
            dual_clip_c=a.dual_clip_c,
            agg=a.loss_agg,
            sampler_logp=micro.sampler_logp if correct else None,
            tis_cap=a.tis_cap,
            **norm,
        )
        stats["pg_loss"] = float(loss.detach())
        mask = micro.loss_mask
        num_tokens = mask.sum().clamp(min=1)
        if temperature == 1.0:  # engines report temperature-1 logprobs
            stats["sampler_logp_diff"] = float(
                ((micro.sampler_logp - old_logp).abs() * mask).sum() / num_tokens
            )
        if micro.ref_logp is not None:
            ref_kl = kl_penalty(old_logp, micro.ref_logp, a.kl_kind)
            stats["ref_kl"] = float((ref_kl * mask).sum() / num_tokens)
        with torch.set_grad_enabled(a.entropy_coef > 0):
            token_entropy = entropy()
            entropy_term = aggregate(token_entropy, mask.bool(), a.loss_agg, **norm)
        if a.entropy_coef > 0:
            loss = loss - a.entropy_coef * entropy_term
        stats["entropy"] = float((token_entropy.detach() * mask).sum() / num_tokens)
        if a.use_kl_loss:
            kl_term, kl_stats = kl_loss(
                logp, micro.ref_logp, mask, kind=a.kl_kind, agg=a.loss_agg, **norm
            )
            loss = loss + a.kl_coef * kl_term
            stats["ref_kl_loss"] = kl_stats["kl"]
        stats["loss"] = float(loss.detach())
        return loss, stats
