"""Algorithms: the `Algorithm` classes and their registry, and the pure tensor functions they
use (advantages, losses, the StarPO-S filter), and the presets.

A new algorithm subclasses `Algorithm` (or a built-in one) and registers it
(`@register_algorithm("name")`, then `algo.name: name`), or is named `module.path:Class`.
See `docs/algorithms.md` for the formulas of each preset and the config keys behind them.
"""

from __future__ import annotations

from agentrl._lazy import lazy_exports

# Exports load on first use, so `import agentrl.algos.config` (and the CLI) need not import torch.
_EXPORTS = {
    "ALGORITHMS": "agentrl.algos.base",
    "Algorithm": "agentrl.algos.base",
    "CreditInputs": "agentrl.algos.base",
    "Needs": "agentrl.algos.base",
    "algorithm_class": "agentrl.algos.base",
    "register_algorithm": "agentrl.algos.base",
    "AdvantageResult": "agentrl.algos.estimate",
    "aggregate": "agentrl.algos.losses",
    "AlgoConfig": "agentrl.algos.config",
    "compute_advantages": "agentrl.algos.estimate",
    "count_tokens_and_seqs": "agentrl.algos.losses",
    "entropy_from_logits": "agentrl.algos.losses",
    "filter_stats": "agentrl.algos.filters",
    "gae": "agentrl.algos.advantages",
    "grpo_advantages": "agentrl.algos.advantages",
    "kl_loss": "agentrl.algos.losses",
    "kl_penalty": "agentrl.algos.losses",
    "kl_reward_penalty": "agentrl.algos.losses",
    "list_presets": "agentrl.algos.presets",
    "load_preset": "agentrl.algos.presets",
    "place_returns_on_last_token": "agentrl.algos.advantages",
    "place_turn_rewards": "agentrl.algos.advantages",
    "policy_loss": "agentrl.algos.losses",
    "preset_algo_config": "agentrl.algos.presets",
    "reinforce_pp_advantages": "agentrl.algos.advantages",
    "rloo_advantages": "agentrl.algos.advantages",
    "starpo_s_filter": "agentrl.algos.filters",
    "token_logprobs_from_logits": "agentrl.algos.losses",
    "trajectory_returns": "agentrl.algos.advantages",
    "value_loss": "agentrl.algos.losses",
    "whiten": "agentrl.algos.advantages",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
