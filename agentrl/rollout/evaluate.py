"""Evaluation: success rate on fixed validation seeds at a fixed temperature.

Besides the success rate, `evaluate` reports its binomial standard error and, for envs whose
`reset` info names the optimal solution length (Sokoban's `optimal_len`), the success on short
(at most `SHORT_SOLUTION_MAX` moves) and long rooms apart; for envs whose `reset` info names a
`task` family, the success of each; for tool envs, how often episodes called a tool and how
often the calls ran without error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentrl.rollout.config import RolloutConfig
from agentrl.rollout.engine import Engine, SamplingParams
from agentrl.rollout.loop import EnvFactory, rollout
from agentrl.trajectory.types import Trajectory, tool_use_stats

SHORT_SOLUTION_MAX = 6
"""Rooms whose optimal solution takes at most this many moves are `short`; longer are `long`."""


def validation_seeds(num_episodes: int, seed_offset: int) -> list[int]:
    """The fixed validation seeds `seed_offset + i` (training seeds stay below the offset).

    >>> validation_seeds(3, 1_000_000)
    [1000000, 1000001, 1000002]
    """
    return [seed_offset + i for i in range(num_episodes)]


def success_stats(successes: Sequence[bool]) -> tuple[float, float]:
    """Success rate p of `successes` and its binomial standard error sqrt(p (1 - p) / n).

    >>> success_stats([True, True, True, False])
    (0.75, 0.21650635094610965)
    """
    if not successes:
        return float("nan"), float("nan")
    p = float(np.mean(successes))
    return p, math.sqrt(p * (1.0 - p) / len(successes))


def evaluation_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """The metrics of `evaluate` for finished validation episodes (see there)."""
    success, se = success_stats([t.success for t in trajs])
    metrics = {
        "success_rate": success,
        "success_se": se,
        "reward_mean": float(np.mean([t.total_reward for t in trajs])),
        "num_turns": float(np.mean([t.num_turns for t in trajs])),
        "num_episodes": float(len(trajs)),
        "error_frac": float(np.mean([not t.status.trainable for t in trajs])),
        "num_errors": float(sum(not t.status.trainable for t in trajs)),
        **tool_use_stats(trajs),
    }
    failed = [t for t in trajs if not t.status.trainable]
    if failed:
        metrics["first_error_seed"] = float(failed[0].seed)
    tasks = [t.reset_info.get("task") for t in trajs]
    if tasks and all(isinstance(name, str) for name in tasks):
        for name in sorted(set(tasks)):
            part = [t.success for t, n in zip(trajs, tasks, strict=True) if n == name]
            metrics[f"num_episodes_task_{name}"] = float(len(part))
            metrics[f"success_task_{name}"], metrics[f"success_task_{name}_se"] = success_stats(
                part
            )
    lengths = [t.reset_info.get("optimal_len") for t in trajs]
    if not lengths or any(n is None for n in lengths):
        return metrics
    short = [int(n) <= SHORT_SOLUTION_MAX for n in lengths]
    for name, want in (("short", True), ("long", False)):
        part = [t.success for t, s in zip(trajs, short, strict=True) if s == want]
        metrics[f"num_episodes_{name}"] = float(len(part))
        if part:
            metrics[f"success_{name}"], metrics[f"success_{name}_se"] = success_stats(part)
    return metrics


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
    """One episode per validation seed.

    Returns `success_rate` and its standard error `success_se`, `reward_mean`, `num_turns`,
    `num_episodes`, `error_frac` and `num_errors` (env or engine errors; with any, the seed
    of the first, `first_error_seed`); for tool envs also `tool_call_rate` and `tool_ok_rate`
    (`tool_use_stats`). When every episode's reset info names its `task` (tool-python's
    family), also `success_task_<task>`, its `_se` and `num_episodes_task_<task>`. When every
    episode's reset info has `optimal_len`, also `success_short` / `success_long` (optimal
    solution at most `SHORT_SOLUTION_MAX` moves, or more), their `_se`, and
    `num_episodes_short` / `num_episodes_long`; a part without episodes has only its count.
    """
    trajs = validation_episodes(
        engine,
        env_factory,
        tokenizer,
        num_episodes=num_episodes,
        seed_offset=seed_offset,
        rollout_cfg=rollout_cfg,
        sampling=sampling,
        env_name=env_name,
    )
    return evaluation_metrics(trajs)


def validation_episodes(
    engine: Engine,
    env_factory: EnvFactory,
    tokenizer: Any,
    *,
    num_episodes: int,
    seed_offset: int,
    rollout_cfg: RolloutConfig,
    sampling: SamplingParams,
    env_name: str = "",
) -> list[Trajectory]:
    """The episodes `evaluate` scores: one per validation seed, in seed order."""
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
    return list(result.trajectories)
