"""`TokenEnv`: a Gymnasium environment whose observations and actions are text."""

from __future__ import annotations

import copy
from collections.abc import Hashable
from typing import Any, ClassVar, TypedDict

import gymnasium as gym
import numpy as np

from agentrl.envs.spaces import AnyText


class Message(TypedDict):
    """One chat message an env sends to the policy."""

    role: str  # "user" or "tool"
    content: str


Observation = str | list[Message]
"""A user message as plain text, or a list of chat messages (role `user` or `tool`)."""


class EnvNotResetError(RuntimeError):
    """`step` was called before `reset`."""


class TokenEnv(gym.Env):
    """A text environment for LLM agents.

    Subclasses set `system_prompt` and `max_turns`, call `super().reset(seed=seed)` first in
    `reset` (this seeds `self.np_random`) and implement `step(action: str)`. A malformed action
    is an ordinary step (a penalty and feedback text), never an exception. The last step of an
    episode puts `info["success"]` (bool).

    >>> class Echo(TokenEnv):
    ...     system_prompt = "Repeat the word."
    ...     max_turns = 1
    ...     def reset(self, *, seed=None, options=None):
    ...         super().reset(seed=seed)
    ...         self.word = ["cat", "dog"][int(self.np_random.integers(2))]
    ...         return self.word, {}
    ...     def step(self, action):
    ...         self.require_reset()
    ...         ok = action.strip() == self.word
    ...         return "done", float(ok), True, False, {"success": ok}
    >>> env = Echo()
    >>> obs, _ = env.reset(seed=0)
    >>> env.step(obs)[1]
    1.0
    """

    system_prompt: ClassVar[str] = ""
    """The system message the rollout puts before the first observation."""
    max_turns: ClassVar[int] = 10
    """Turns after which the rollout truncates the episode."""
    bounds_its_own_calls: ClassVar[bool] = False
    """True if the env's risky work runs in a sandbox that kills what overruns its time limit:
    the rollout then runs it in threads in the command's own process (which removes the
    sandbox's containers on any exit) instead of a worker process it could kill, unless
    `rollout.env_executor` is set."""
    ends_within_max_turns: ClassVar[bool] = True
    """True if the env itself ends every episode within `max_turns` steps; False documents
    that it may run longer and relies on the rollout to truncate it (`check_env` reads this)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    """No render modes by default; an env that implements `render()` declares `["ansi"]`."""
    observation_space: gym.spaces.Space[Any] = AnyText()
    """Any text. An env that returns lists of chat messages declares `TextOrMessages()`
    (agentrl.envs.spaces), so that Gymnasium's checker finds its observations in the space."""
    action_space: gym.spaces.Space[Any] = AnyText()
    """Any text: a malformed action is an ordinary step."""

    _has_reset: bool = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode. Subclasses call this first, then build their state."""
        super().reset(seed=seed)
        self._has_reset = True
        return "", {}

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Apply one text action: `(observation, reward, terminated, truncated, info)`."""
        raise NotImplementedError(f"{type(self).__name__} must implement step(action: str)")

    def sample_action(self, rng: np.random.Generator) -> str:
        """A random action for smoke tests and `check_env`, drawn only from `rng`.

        The default mixes free text with common answer formats; envs override it to return
        well-formed random actions so random episodes exercise real transitions.
        """
        choices = (
            "<answer>1</answer>",
            f"<answer>{int(rng.integers(-100, 101))}</answer>",
            "<answer>Up</answer>",
            "I am not sure.",
            r"\boxed{0}",
        )
        return choices[int(rng.integers(len(choices)))]

    def candidate_answers(self) -> list[str]:
        """Every answer worth trying in the current state, for expert iteration's beam
        search (`agentrl.rollout.search`), which plays each from the states it keeps: an env
        with a small set of moves lists one answer per move. The default, `[]`, means the env
        offers none, and the search finds nothing to play.
        """
        return []

    def state_key(self) -> Hashable | None:
        """A key of the current state for search (`algo.search_beam`): states with equal
        keys are the same position whatever budget is left, so a search expands only the
        first it reaches. The default, None, makes the observation text the key."""
        return None

    def clone(self) -> TokenEnv:
        """An independent copy of the env, mid-episode: stepping one leaves the other as it
        was (search, `algo.search_beam`, plays each answer in a clone). The default is
        `copy.deepcopy(self)`; an env whose state is cheaper to copy overrides it."""
        return copy.deepcopy(self)

    def require_reset(self) -> None:
        """Raise a clear error when `step` comes before `reset`."""
        if not self._has_reset:
            raise EnvNotResetError(
                f"{type(self).__name__}.step() was called before reset(); "
                "call env.reset(seed=...) first."
            )
