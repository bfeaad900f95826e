"""Typed records of a rollout: `Sample`, `Turn`, `Trajectory`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agentrl.envs.base import Observation


class Status(StrEnum):
    """How an episode ended. Only `ok` and `truncated` episodes are trained on."""

    OK = "ok"
    TRUNCATED = "truncated"
    ENV_ERROR = "env_error"
    ENGINE_ERROR = "engine_error"

    @property
    def trainable(self) -> bool:
        return self in (Status.OK, Status.TRUNCATED)


@dataclass
class Sample:
    """One training sequence, token for token what the engine was given and produced."""

    token_ids: list[int]
    loss_mask: list[int]
    """1 exactly on ids the engine sampled, 0 on prompt and observation ids."""
    sampler_logp: list[float]
    """Sampler logprob of each id; 0.0 where `loss_mask` is 0. Same length as `token_ids`."""
    turn_ids: list[int]
    """Turn index of each id: -1 for the first prompt, t for turn t's sampled ids and the
    observation ids that follow them."""

    def __len__(self) -> int:
        return len(self.token_ids)


@dataclass
class Turn:
    """One policy turn: what was sampled and what the env answered."""

    num_sampled: int
    """Sampled ids in this turn (the ids themselves live in the samples)."""
    action_text: str
    """The sampled ids decoded once, for the env and for display. Never re-encoded."""
    finish_reason: str
    """Engine finish reason: `stop`, `length` or `abort`."""
    weight_version: int
    """Policy weight version that produced this turn."""
    reward: float = 0.0
    observation: Observation | None = None
    """What the env returned after this action (None when the episode ended without one)."""
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trajectory:
    """A whole multi-turn episode.

    `samples` holds one sequence when the chat template is prefix-preserving, else one
    sample per turn, each with its own prompt (`per_turn_samples` is then True).
    """

    samples: list[Sample]
    turns: list[Turn]
    env_name: str
    seed: int
    group_id: int
    status: Status = Status.OK
    system_prompt: str = ""
    first_observation: Observation = ""
    reset_info: dict[str, Any] = field(default_factory=dict)
    """The env's `reset` info (e.g. Sokoban's `optimal_len`, for evaluation breakdowns)."""
    per_turn_samples: bool = False
    error: str | None = None
    """Why the episode ended with `env_error` / `engine_error`, or why it was truncated."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Timing and counts for this episode (generation/env seconds, tokens)."""

    @property
    def total_reward(self) -> float:
        """The trajectory-level return: the sum of turn rewards."""
        return float(sum(t.reward for t in self.turns))

    @property
    def success(self) -> bool:
        """`info["success"]` of the last turn (False when there is none)."""
        return bool(self.turns and self.turns[-1].info.get("success", False))

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def num_sampled_tokens(self) -> int:
        return sum(t.num_sampled for t in self.turns)


def tool_use_stats(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """How episodes used their tools, when their turns count tool calls (`info["tool_calls"]`
    and `info["tool_errors"]`, as tool envs that offer a tool report them); empty for other
    envs.

    `tool_call_rate`: the share of episodes with at least one call; `tool_ok_rate`, when the
    turns also count `tool_errors`: the share of calls that ran without error (a program that
    exits non-zero, a malformed call; nan when no call was made).

    >>> def episode(*counts):
    ...     turns = [Turn(0, "", "stop", 0, info={"tool_calls": c, "tool_errors": e})
    ...              for c, e in counts]
    ...     return Trajectory([], turns, "tool-python", 0, 0)
    >>> tool_use_stats([episode((2, 1), (0, 0)), episode((0, 0))])
    {'tool_call_rate': 0.5, 'tool_ok_rate': 0.5}
    """
    counted = [t for t in trajectories if any("tool_calls" in turn.info for turn in t.turns)]
    if not counted:
        return {}
    calls = [sum(turn.info.get("tool_calls", 0) for turn in t.turns) for t in counted]
    stats = {"tool_call_rate": sum(c > 0 for c in calls) / len(counted)}
    if any("tool_errors" in turn.info for t in counted for turn in t.turns):
        errors = sum(turn.info.get("tool_errors", 0) for t in counted for turn in t.turns)
        stats["tool_ok_rate"] = 1.0 - errors / sum(calls) if sum(calls) else float("nan")
    return stats
