"""`GuessNumber`: the smallest useful multi-turn env (STYLE.md's example), for smoke tests.

>>> env = GuessNumber(high=10)
>>> obs, info = env.reset(seed=0)
>>> obs
'The number is in [1, 10].'
>>> env.step("<answer>11</answer>")[0]
'11 is outside [1, 10]. Use <answer>N</answer>.'
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from agentrl.envs.base import Observation, TokenEnv
from agentrl.envs.parsing import parse_answer_int


class GuessNumber(TokenEnv):
    """Find a hidden integer; the env answers 'higher' or 'lower'."""

    system_prompt: ClassVar[str] = (
        "Guess my number. Reply with <answer>N</answer>; I say higher or lower."
    )
    max_turns: ClassVar[int] = 8

    def __init__(self, high: int = 100, invalid_penalty: float = -0.1) -> None:
        """`high`: the number is drawn uniformly from 1..high; `invalid_penalty`: reward for
        an answer that is not an integer in range."""
        super().__init__()
        if high < 1:
            raise ValueError(f"high must be >= 1, got {high}")
        self.high = high
        self.invalid_penalty = float(invalid_penalty)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Draw the secret from `self.np_random`."""
        super().reset(seed=seed)
        self.secret = int(self.np_random.integers(1, self.high + 1))
        self.turns = 0
        return f"The number is in [1, {self.high}].", {}

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Compare the guess; the episode ends on a hit or after `max_turns` guesses."""
        self.require_reset()
        self.turns += 1
        out_of_turns = self.turns >= self.max_turns
        guess = parse_answer_int(action)
        if guess is None or not 1 <= guess <= self.high:
            shown = (
                "No integer found." if guess is None else f"{guess} is outside [1, {self.high}]."
            )
            info = {"valid": False, "success": False}
            return (
                f"{shown} Use <answer>N</answer>.",
                self.invalid_penalty,
                False,
                out_of_turns,
                info,
            )
        if guess == self.secret:
            return "Correct!", 1.0, True, False, {"valid": True, "success": True}
        hint = "higher" if guess < self.secret else "lower"
        return hint, 0.0, False, out_of_turns, {"valid": True, "success": False}

    def sample_action(self, rng: np.random.Generator) -> str:
        """A random guess in range."""
        return f"<answer>{int(rng.integers(1, self.high + 1))}</answer>"
