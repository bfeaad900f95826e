"""`AlgoConfig`: which advantage estimator, loss terms and filter a run uses.

Named presets (`agentrl/algos/presets/*.yaml`) fill it in; see `docs/algorithms.md`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

LossAgg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "traj-mean-token-mean"]
"""How token losses become one number (as `agentrl.algos.losses.LossAgg`; kept here so the
config does not import torch)."""
KLKind = Literal["k1", "k2", "k3"]
"""KL estimator (as `agentrl.algos.losses.KLKind`)."""

Estimator = Literal[
    "grpo", "rloo", "reinforce++", "gae", "turn-gae", "state-rloo", "state-best", "rft"
]

_CRITIC_ESTIMATORS = ("gae", "turn-gae")
_GROUP_ESTIMATORS = ("grpo", "rloo")


class AlgoConfig(BaseModel):
    """The RL algorithm: advantage estimator, policy/value/KL/entropy loss terms, filter."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    estimator: Estimator = "grpo"
    """Advantage estimator: `grpo` (group mean/std), `rloo` (leave-one-out), `reinforce++`
    (returns-to-go whitened over the batch), `gae` (critic; StarPO trajectory-level when
    `reward_level` is `trajectory`), `turn-gae` (critic; GAE across turns, then in turns),
    `state-rloo` (no critic; per-move credit: each turn's return-to-go minus the mean
    return-to-go of the batch's other visits of the same state, i.e. the same prompt; needs
    `reward_level: turn`; pair it with `loss_agg: token-mean`, which weighs every move alike,
    so that equal moves of episodes that share a path cancel exactly),
    `state-best` (no critic; rollout policy improvement: in each state whose visits' returns
    differ, the visits with the best return-to-go get advantage 1/k and the others 0, so the
    update is cross-entropy on each state's best answer; made for all-action branches played
    on greedily, `trainer.branch_answers: all`; needs `reward_level: turn`),
    `rft` (rejection-sampling fine-tuning, the imitation baseline: the trainer keeps only the
    successful trajectories and every token gets advantage 1, i.e. SFT on the policy's own
    solved episodes, or on a search's solutions with `trainer.search_beam`; every mini-batch
    takes the plain NLL gradient: no ratio to the rollout's weights, no clip, no importance
    weight)."""
    reward_level: Literal["trajectory", "turn"] = "trajectory"
    """`trajectory`: one return per trajectory, the sum of its turn rewards, on its last
    sampled token (StarPO); every token of a trajectory gets one credit. `turn`: each turn's
    reward on that turn's last sampled token, so each move gets its own credit: `grpo` and
    `rloo` use each turn's discounted return-to-go (`turn_gamma`) minus the group's baseline,
    `reinforce++` and `gae` the per-token returns, `turn-gae` needs `turn`."""
    gamma: float = Field(1.0, ge=0.0, le=1.0)
    """Discount per sampled token (`gae`, `reinforce++`; inside a turn for `turn-gae`)."""
    lam: float = Field(1.0, ge=0.0, le=1.0)
    """GAE lambda per sampled token (`gae`; inside a turn for `turn-gae`)."""
    turn_gamma: float = Field(1.0, ge=0.0, le=1.0)
    """Discount across turns (`turn-gae`, `state-rloo`, `state-best`; `grpo` and `rloo` at
    `reward_level: turn`)."""
    turn_lam: float = Field(1.0, ge=0.0, le=1.0)
    """GAE lambda across turns (`turn-gae` only)."""
    critic_lam: float | None = Field(None, ge=0.0, le=1.0)
    """GAE lambda of the critic's targets, in and across turns (`gae`, `turn-gae`), apart from
    the advantages' `lam` and `turn_lam` (decoupled GAE, VC-PPO: Yuan et al. 2025). 1.0
    regresses the critic on the plain returns-to-go, with no bootstrap from its own values of
    later tokens: with `lam` < 1 over many sampled tokens, the targets of a turn's first tokens
    are almost all the critic's own later values. None: the advantages' lambdas."""
    scale_by_std: bool = True
    """GRPO: divide each advantage by its group's reward std (False: mean-centring only)."""
    std_floor: float = Field(0.0, ge=0.0)
    """GRPO: the group std is floored at this before dividing, so that groups whose returns
    differ only by small step penalties are not scaled up to unit advantages (0: no floor)."""
    reinforce_baseline: bool = True
    """REINFORCE++: subtract the group mean of the returns before whitening (the
    `reinforce++-baseline` variant)."""
    whiten_advantages: bool = False
    """Whiten the advantages over all trained tokens of the batch after estimation."""
    clip_eps_low: float = Field(0.2, ge=0.0, lt=1.0)
    """PPO clip below: the ratio is clipped at `1 - clip_eps_low`."""
    clip_eps_high: float = Field(0.2, ge=0.0)
    """PPO clip above: the ratio is clipped at `1 + clip_eps_high` (clip-higher when larger
    than `clip_eps_low`)."""
    dual_clip_c: float | None = Field(None, gt=1.0)
    """Dual clip: for negative advantages the per-token loss is capped at `c * |A|`
    (None: off)."""
    loss_agg: LossAgg = "traj-mean-token-mean"
    """Loss aggregation over the global mini-batch: `traj-mean-token-mean` (every trajectory
    weighs the same whatever its number of turns and tokens; its per-turn rows share its
    weight), `token-mean` (every token the same: long trajectories weigh more),
    `seq-mean-token-mean` or `seq-mean-token-sum` (per row)."""
    kl_coef: float = Field(0.0, ge=0.0)
    """Weight of the KL to the reference model (0: no reference model is run)."""
    kl_kind: KLKind = "k3"
    """KL estimator per token: `k1` (log-ratio), `k2` (half squared log-ratio), `k3`
    (Schulman's non-negative unbiased estimator)."""
    kl_in_reward: bool = False
    """True: subtract `kl_coef * KL` from the token rewards before the advantages.
    False: add `kl_coef * KL` to the loss."""
    entropy_coef: float = Field(0.0, ge=0.0)
    """Weight of the entropy bonus (subtracted from the loss)."""
    vf_coef: float = Field(1.0, ge=0.0)
    """Weight of the value loss in the critic's objective."""
    critic_warmup_steps: int = Field(0, ge=0)
    """The first this many training steps fit only the critic on their rollouts; the policy
    does not move (so the critic's baseline is useful from the first policy update). The first
    step starts the value head at the least-squares fit of its returns (local backend).
    No effect without a critic (so an env's default holds under any preset)."""
    critic_warmup_epochs: int = Field(1, ge=1)
    """Passes over each warm-up step's batch (at least `ppo_epochs`). A value head on the
    policy's trunk needs a few hundred optimizer steps before it predicts returns on rooms it
    has not seen; several passes per warm-up rollout give it those steps."""
    normalize_rewards: bool = False
    """Divide rewards by the running std of the episode returns seen so far (no shift), so
    the critic regresses targets of unit scale whatever the env's reward scale."""
    value_clip_eps: float | None = Field(0.2, ge=0.0)
    """Value clip around the rollout-time values (None: unclipped value loss)."""
    filter_keep_ratio: float | None = Field(None, gt=0.0, le=1.0)
    """StarPO-S filter: keep this fraction of groups with the highest in-group reward std
    (None: keep every group)."""
    filter_min_std: float = Field(0.0, ge=0.0)
    """StarPO-S filter: also drop groups whose reward std is below this (the top group is
    always kept)."""
    tis_cap: float | None = Field(2.0, gt=0.0)
    """Cap on the truncated importance weight `exp(old_logp - sampler_logp)` applied when
    the sampler's logprobs differ from the trainer's (None: uncapped)."""
    ppo_epochs: int = Field(1, ge=1)
    """Passes over each rollout batch."""
    num_mini_batches: int = Field(1, ge=1)
    """Optimizer steps per epoch (the batch is split into this many mini-batches)."""

    @model_validator(mode="after")
    def _check_combinations(self) -> AlgoConfig:
        for estimator in ("turn-gae", "state-rloo", "state-best"):
            if self.estimator == estimator and self.reward_level != "turn":
                raise ValueError(f"estimator {estimator!r} needs reward_level 'turn'")
        return self

    @property
    def clips(self) -> bool:
        """The update takes several optimizer steps per rollout, so the PPO ratio moves away
        from 1 and the clip can act (one step: the ratio is exactly 1, the loss is REINFORCE).
        Never for `rft`: imitation trains the plain NLL in every mini-batch."""
        return self.ppo_epochs * self.num_mini_batches > 1 and self.estimator != "rft"

    @property
    def use_critic(self) -> bool:
        """A value model is trained (GAE estimators)."""
        return self.estimator in _CRITIC_ESTIMATORS

    @property
    def use_reference(self) -> bool:
        """A frozen reference model is run (the KL term is on)."""
        return self.kl_coef > 0.0

    @property
    def use_kl_loss(self) -> bool:
        """The KL term is added to the loss (not to the rewards)."""
        return self.use_reference and not self.kl_in_reward

    @property
    def use_filter(self) -> bool:
        """The StarPO-S filter drops low-variance groups."""
        return self.filter_keep_ratio is not None

    @property
    def needs_groups(self) -> bool:
        """The estimator or the filter compares trajectories within a group."""
        group_estimator = self.estimator in _GROUP_ESTIMATORS or (
            self.estimator == "reinforce++" and self.reinforce_baseline
        )
        return group_estimator or self.use_filter
