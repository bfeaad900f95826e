"""Evaluation: success rate on fixed validation seeds at a fixed temperature."""

from __future__ import annotations

from typing import Any

import numpy as np

from agentrl.rollout.config import RolloutConfig
from agentrl.rollout.engine import Engine, SamplingParams
from agentrl.rollout.loop import EnvFactory, rollout


def validation_seeds(num_episodes: int, seed_offset: int) -> list[int]:
    """The fixed validation seeds `seed_offset + i` (training seeds stay below the offset).

    >>> validation_seeds(3, 1_000_000)
    [1000000, 1000001, 1000002]
    """
    return [seed_offset + i for i in range(num_episodes)]


def evaluate(
    engine: Engine,
    env_factory: EnvFactory,
    tokenizer: Any,
    *,
    num_episodes: int,
    seed_offset: int,
    rollout_cfg: RolloutConfig,
    sampling: SamplingParams,
    env_name: str = "",
) -> dict[str, float]:
    """One episode per validation seed; returns `success_rate`, `reward_mean`, `num_turns`,
    `num_episodes` and `error_frac`."""
    result = rollout(
        engine,
        env_factory,
        tokenizer,
        validation_seeds(num_episodes, seed_offset),
        group_size=1,
        cfg=rollout_cfg,
        sampling=sampling,
        env_name=env_name,
    )
    trajs = result.trajectories
    return {
        "success_rate": float(np.mean([t.success for t in trajs])),
        "reward_mean": float(np.mean([t.total_reward for t in trajs])),
        "num_turns": float(np.mean([t.num_turns for t in trajs])),
        "num_episodes": float(len(trajs)),
        "error_frac": float(np.mean([not t.status.trainable for t in trajs])),
    }
