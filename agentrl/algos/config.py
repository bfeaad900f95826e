"""`AlgoConfig`: which advantage estimator, loss terms and filter a run uses.

Named presets (`agentrl/algos/presets/*.yaml`) fill it in; see `docs/algorithms.md`.
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

LossAgg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "traj-mean-token-mean"]
"""How token losses become one number (as `agentrl.algos.losses.LossAgg`; kept here so the
config does not import torch)."""
KLKind = Literal["k1", "k2", "k3"]
"""KL estimator (as `agentrl.algos.losses.KLKind`)."""

COMMON_KEYS = frozenset(
    {
        "name",
        "loss_agg",
        "kl_coef",
        "kl_kind",
        "entropy_coef",
        "filter_keep_ratio",
        "filter_min_std",
        "ppo_epochs",
        "num_mini_batches",
    }
)
"""The keys every algorithm reads: its loss's aggregation, KL and entropy terms, the
StarPO-S filter and the number of optimizer steps per rollout."""
CLIP_KEYS = COMMON_KEYS | {
    "reward_level",
    "clip_eps_low",
    "clip_eps_high",
    "dual_clip_c",
    "tis_cap",
}
"""The keys of a policy gradient with the PPO clip (`Algorithm.config_keys`' default): the
common keys, rewards per trajectory or per turn, the clip and the sampler correction."""


def _algorithm(name: str) -> Any:
    """The class of algorithm `name` (`agentrl.algos.base.algorithm_class`, imported here:
    the two modules import each other)."""
    from agentrl.algos.base import algorithm_class

    return algorithm_class(name)


def algo_keys(name: str) -> frozenset[str]:
    """The `algo.*` keys (without the section) that algorithm `name` reads, declared by its
    class (`Algorithm.config_keys`); every key for a name that is no algorithm (validation
    names that error).

    >>> sorted(algo_keys("ppo") - algo_keys("grpo"))
    ['critic_warmup_steps', 'gamma', 'lam', 'value_clip_eps']
    """
    try:
        return frozenset(_algorithm(name).config_keys) | {"name"}
    except ValueError:
        return frozenset(AlgoConfig.model_fields)


def unread_keys_message(name: str, unread: dict[str, Any]) -> str:
    """Why keys set for a run of algorithm `name` are refused: each key and its value, the
    keys `name` reads, and a did-you-mean (a key of `name` spelled alike, or the registered
    algorithms that read the key)."""
    from agentrl.algos.base import ALGORITHMS

    reads = sorted(algo_keys(name) - {"name"})
    lines = []
    for key, value in unread.items():
        hints = difflib.get_close_matches(key, reads, n=1, cutoff=0.6)
        readers = [n for n, cls in ALGORITHMS.items() if key in cls.config_keys and ":" not in n]
        near = [f"algo.{k}" for k in hints]
        if readers:
            near.append(f"algo.name: {' or '.join(readers)}")
        hint = f"; did you mean {', or '.join(near)}?" if near else ""
        lines.append(f"algo.{key} = {value!r} does nothing with algo.name: {name}{hint}")
    lines.append(f"algo.name {name} reads: {', '.join(f'algo.{k}' for k in reads)}")
    return "\n    ".join(lines)


class AlgoConfig(BaseModel):
    """The RL algorithm: advantage estimator, policy/value/KL/entropy loss terms, filter."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str = "grpo"
    """The algorithm (`docs/algorithms.md`): which trajectories it keeps, how it assigns
    credit, its loss and what it needs scored. `grpo` (group mean/std), `rloo`
    (leave-one-out), `reinforce++` (returns-to-go less the group mean, whitened over the
    batch): policy gradient, no critic. `ppo`: a critic and GAE, advantages whitened over the
    batch, rewards normalised (StarPO when `reward_level` is `trajectory`). `gigpo`:
    GRPO's episode advantage plus a step advantage among the visits of the same state.
    `rft`: rejection-sampling fine-tuning, the imitation baseline (keeps only the successful
    episodes; plain NLL, no ratio, clip or importance weight). `expert-iteration`: imitation
    of the solutions a beam search guided by the policy finds (`search_beam`). Also the name
    of an algorithm registered from user code (`agentrl.algos.register_algorithm`), or
    `module.path:Class`."""
    reward_level: Literal["trajectory", "turn"] = "trajectory"
    """`trajectory`: one return per trajectory, the sum of its turn rewards, on its last
    sampled token (StarPO); every token of a trajectory gets one credit. `turn`: each turn's
    reward on that turn's last sampled token, so each move gets its own credit: `grpo` and
    `rloo` use each turn's discounted return-to-go (`turn_gamma`) minus the group's baseline,
    `reinforce++` and `ppo` the per-token returns; `gigpo` needs `turn`."""
    gamma: float = Field(1.0, ge=0.0, le=1.0)
    """Discount per sampled token (`ppo`, `reinforce++`)."""
    lam: float = Field(1.0, ge=0.0, le=1.0)
    """GAE lambda per sampled token (`ppo`)."""
    turn_gamma: float = Field(1.0, ge=0.0, le=1.0)
    """Discount across turns (`gigpo`'s step returns; `grpo` and `rloo` at
    `reward_level: turn`)."""
    scale_by_std: bool = True
    """GRPO: divide each advantage by its group's reward std (False: mean-centring only)."""
    std_floor: float = Field(0.0, ge=0.0)
    """GRPO: the group std is floored at this before dividing, so that groups whose returns
    differ only by small step penalties are not scaled up to unit advantages (0: no floor)."""
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
    """KL estimator per token, and where the KL goes: `k1` (log-ratio) is subtracted from the
    token rewards before the advantages (as a loss term its gradient is zero in expectation);
    `k2` (half squared log-ratio) and `k3` (Schulman's non-negative unbiased estimator) are
    added to the loss."""
    entropy_coef: float = Field(0.0, ge=0.0)
    """Weight of the entropy bonus (subtracted from the loss)."""
    critic_warmup_steps: int = Field(0, ge=0)
    """The first this many training steps fit only the critic on their rollouts; the policy
    does not move (so the critic's baseline is useful from the first policy update). The first
    step starts the value head at the least-squares fit of its returns (local backend).
    Only with a critic (`ppo`)."""
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

    step_weight: float = Field(1.0, ge=0.0)
    """`gigpo`: weight omega of the step advantage added to the episode advantage."""
    search_beam: int = Field(8, ge=1)
    """`expert-iteration`: states the policy-guided beam search keeps per depth, ranked by
    the policy's cumulative log-probability (1: the greedy policy that never revisits a
    state)."""
    search_easy_keep: float = Field(1.0, ge=0.0, le=1.0)
    """`expert-iteration`: the policy first plays each room greedily; the search runs only in
    the rooms it fails, and this share of the greedily solved rooms keep their solution as a
    label (1.0: every room is searched, no greedy pass)."""
    search_label_tau: float = Field(0.0, ge=0.0, le=1.0)
    """`expert-iteration`: train each found answer with probability `min(1, (1 - p) / tau)`,
    `p` the policy's probability of it, at weight 1 over that: the same loss in expectation,
    but the answers the policy is already sure of mostly skip the update (0: train all)."""

    @field_validator("name")
    @classmethod
    def _known_algorithm(cls, name: str) -> str:
        _algorithm(name)  # ValueError naming the known ones
        return name

    @model_validator(mode="after")
    def _check_combinations(self) -> AlgoConfig:
        levels = _algorithm(self.name).reward_levels
        if self.reward_level not in levels:
            raise ValueError(
                f"algo.name {self.name} needs algo.reward_level: {' or '.join(levels)}"
            )
        unread = [
            key
            for key in sorted(self.model_fields_set - algo_keys(self.name))
            if getattr(self, key) != type(self).model_fields[key].default
        ]
        if unread:
            raise ValueError(unread_keys_message(self.name, {k: getattr(self, k) for k in unread}))
        return self

    @property
    def imitation(self) -> bool:
        """The loss is the plain NLL of the kept trajectories (the algorithm's
        `Algorithm.imitation`: `rft`, `expert-iteration`)."""
        return bool(_algorithm(self.name).imitation)

    @property
    def clips(self) -> bool:
        """The update takes several optimizer steps per rollout, so the PPO ratio moves away
        from 1 and the clip can act (one step: the ratio is exactly 1, the loss is REINFORCE).
        Never for imitation: it trains the plain NLL in every mini-batch."""
        return self.ppo_epochs * self.num_mini_batches > 1 and not self.imitation

    @property
    def use_critic(self) -> bool:
        """A value model is trained (the algorithm's `Algorithm.uses_critic`: `ppo`)."""
        return bool(_algorithm(self.name).uses_critic)

    @property
    def use_reference(self) -> bool:
        """A frozen reference model is run (the KL term is on)."""
        return self.kl_coef > 0.0

    @property
    def kl_in_reward(self) -> bool:
        """The KL estimate is subtracted from the token rewards (`k1`), not added to the loss."""
        return self.kl_kind == "k1"

    @property
    def normalize_rewards(self) -> bool:
        """Rewards are divided by the running std of the episode returns seen so far (no
        shift), so that a critic regresses targets of unit scale whatever the env's reward
        scale: with a critic."""
        return self.use_critic

    @property
    def use_kl_loss(self) -> bool:
        """The KL term is added to the loss (not to the rewards)."""
        return self.use_reference and not self.kl_in_reward

    @property
    def use_filter(self) -> bool:
        """The StarPO-S filter drops low-variance groups."""
        return self.filter_keep_ratio is not None
