"""Rollout sources: what makes a training step's trajectories.

`SamplingSource` samples `group_size` episodes per seed through the rollout loop (every
policy-gradient algorithm); `SearchSource` runs a beam search guided by the policy over cloned
envs and returns the solutions it finds (expert iteration, `agentrl.rollout.search`). An
algorithm picks its source (`Algorithm.rollout_source`); the trainer only calls `collect`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from agentrl.envs.base import TokenEnv
from agentrl.rollout.config import RolloutConfig
from agentrl.rollout.engine import SamplingParams
from agentrl.rollout.loop import RolloutResult, rollout
from agentrl.trajectory.bridge import ChatBridge

__all__ = ["RolloutSource", "SamplingSource", "SearchSource", "SourceParts"]


@dataclass
class SourceParts:
    """What a source may use; the trainer builds one per run."""

    engine: Any
    """The rollout engine (rank 0 only; None on the other ranks, which never collect)."""
    env_factory: Callable[[], TokenEnv]
    tokenizer: Any
    bridge: ChatBridge
    rollout: RolloutConfig
    sampling: Callable[[int], SamplingParams]
    """The sampling params of step `step` (seeded by run seed and step)."""
    step_rng: Callable[[int], random.Random]
    """The step's own random draws (fixed by run seed and step: a resumed run draws the same)."""
    policy: Callable[[], Any]
    """The policy's current model (a search scores answers with it)."""
    env_name: str = ""


class RolloutSource(Protocol):
    """Makes one step's trajectories from that step's env seeds."""

    def collect(self, step: int, seeds: list[int]) -> RolloutResult: ...


class SamplingSource:
    """`rollout.group_size` episodes per seed, sampled by the engine through the rollout loop."""

    def __init__(self, parts: SourceParts) -> None:
        self.parts = parts

    def collect(self, step: int, seeds: list[int]) -> RolloutResult:
        p = self.parts
        return rollout(
            p.engine,
            p.env_factory,
            p.tokenizer,
            seeds,
            group_size=p.rollout.group_size,
            cfg=p.rollout,
            sampling=p.sampling(step),
            env_name=p.env_name,
            bridge=p.bridge,
        )


class SearchSource:
    """The solutions a beam search guided by the policy finds in each seed's room
    (`agentrl.rollout.search.timed_search`); the env must offer `candidate_answers()`."""

    def __init__(self, parts: SourceParts, *, beam_width: int, easy_keep: float = 1.0) -> None:
        self.parts = parts
        self.beam_width = beam_width
        self.easy_keep = easy_keep

    def collect(self, step: int, seeds: list[int]) -> RolloutResult:
        from agentrl.rollout.search import timed_search

        p = self.parts
        max_depth = p.rollout.max_turns or p.env_factory().max_turns
        trajs, metrics = timed_search(
            p.env_factory,
            p.bridge,
            p.policy(),
            seeds,
            beam_width=self.beam_width,
            max_depth=max_depth,
            env_name=p.env_name,
            max_context_tokens=p.rollout.max_context_tokens,
            easy_keep=self.easy_keep,
            rng=p.step_rng(step),
        )
        return RolloutResult(trajs, metrics, sampled=False)
