"""Expert trajectories in the same token-exact format the RL rollout writes, many at once.

One episode is `agentrl.rollout.expert.expert_episode` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from agentrl.envs.base import TokenEnv
from agentrl.rollout.expert import expert_episode, expert_ids
from agentrl.sft.expert import Expert
from agentrl.trajectory.bridge import ChatBridge
from agentrl.trajectory.types import Trajectory

__all__ = [
    "expert_episode",
    "expert_ids",
    "expert_trajectories",
    "iter_expert_trajectories",
    "policy_success_rate",
]


def expert_trajectories(
    env_factory: Callable[[], TokenEnv],
    tokenizer: Any,
    seeds: Sequence[int],
    expert: Expert,
    **kwargs: Any,
) -> list[Trajectory]:
    """One expert episode per seed, as a list; see `iter_expert_trajectories`."""
    return list(iter_expert_trajectories(env_factory, tokenizer, seeds, expert, **kwargs))


def iter_expert_trajectories(
    env_factory: Callable[[], TokenEnv],
    tokenizer: Any,
    seeds: Sequence[int],
    expert: Expert,
    *,
    max_actions_per_turn: int | None = None,
    max_context_tokens: int = 4096,
    env_name: str = "",
    history_turns: int | None = None,
    noise: float = 0.0,
    noise_seed: int = 0,
) -> Iterator[Trajectory]:
    """One expert episode per seed (group id = position in `seeds`), played as they are
    consumed; `noise` as in `expert_episode`, its random answers drawn from `noise_seed`."""
    bridge = ChatBridge(tokenizer)
    rng = np.random.default_rng(noise_seed)
    env = env_factory()
    try:
        for i, seed in enumerate(seeds):
            yield expert_episode(
                env,
                bridge,
                expert,
                int(seed),
                group_id=i,
                max_actions_per_turn=max_actions_per_turn,
                max_context_tokens=max_context_tokens,
                env_name=env_name,
                history_turns=history_turns,
                noise=noise,
                rng=rng,
            )
    finally:
        env.close()


def policy_success_rate(
    env_factory: Callable[[], TokenEnv],
    policy: Callable[[TokenEnv], str],
    seeds: Sequence[int],
) -> float:
    """Share of episodes (one per seed) a text policy `policy(env) -> action` solves.

    Text only, no model: it measures the floor (a random policy) and the ceiling (the
    expert) of an env on the same validation seeds as a model.
    """
    env = env_factory()
    solved = 0
    try:
        for seed in seeds:
            env.reset(seed=int(seed))
            for _ in range(env.max_turns):
                _, _, terminated, truncated, info = env.step(policy(env))
                if terminated or truncated:
                    break
            solved += bool(info.get("success", False))
    finally:
        env.close()
    return solved / max(len(seeds), 1)
