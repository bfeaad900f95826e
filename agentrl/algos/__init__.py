"""Algorithms as pure tensor functions: advantages, losses, the StarPO-S filter, presets.

See `docs/algorithms.md` for the formulas of each preset and the config keys behind them.
"""

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
from agentrl.algos.estimate import AdvantageResult, compute_advantages
from agentrl.algos.filters import filter_stats, starpo_s_filter
from agentrl.algos.losses import (
    aggregate,
    count_tokens_and_seqs,
    entropy_from_logits,
    kl_loss,
    kl_penalty,
    kl_reward_penalty,
    policy_loss,
    token_logprobs_from_logits,
    value_loss,
)
from agentrl.algos.presets import list_presets, load_preset, preset_algo_config

__all__ = [
    "AdvantageResult",
    "AlgoConfig",
    "aggregate",
    "compute_advantages",
    "count_tokens_and_seqs",
    "entropy_from_logits",
    "filter_stats",
    "gae",
    "grpo_advantages",
    "kl_loss",
    "kl_penalty",
    "kl_reward_penalty",
    "list_presets",
    "load_preset",
    "place_returns_on_last_token",
    "place_turn_rewards",
    "policy_loss",
    "preset_algo_config",
    "reinforce_pp_advantages",
    "rloo_advantages",
    "starpo_s_filter",
    "token_logprobs_from_logits",
    "trajectory_returns",
    "turn_level_gae",
    "value_loss",
    "whiten",
]
