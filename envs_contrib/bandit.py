"""`BanditEnv`: RAGEN's two-armed bandit with named arms, for studying reasoning collapse.

One arm is safe (always `lo_arm_score`, 0.1), the other risky (`hi_arm_hiscore`, 1.0, with
probability `hi_arm_hiscore_prob`, 0.25, else 0.0), so the risky arm has the higher mean
(0.25 vs 0.1). The names carry the hint: by default the safe arm is "Phoenix" and the risky
one "Dragon" (RAGEN's setting). The reversed variant (`bandit-reversed`) swaps them, so a
policy that only learned "pick the Dragon" fails; it tests whether the model reasons from the
rewards rather than from the names. Which arm is listed first is random per episode.
One turn: the model answers `<answer>Dragon</answer>`. Success = picked the arm with the
higher mean. With `name_fallback=True` an answer without the tag counts as the arm it names
last (`I pick the dragon.` pulls Dragon), as the math env's `last_number_fallback` does for
numbers: a small chat model rarely writes the tag at first, and this separates choosing the
arm from following the format.

>>> env = BanditEnv()
>>> obs, info = env.reset(seed=0)
>>> env.step("<answer>Dragon</answer>")[4]["success"]
True
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import numpy as np

from agentrl.envs.base import Observation, TokenEnv
from agentrl.envs.parsing import parse_answer

_PROMPT = (
    "You are playing a bandit game. Goal: maximize your reward by choosing which arm to pull.\n"
    "There are 2 arms, named {a} and {b}. Each arm has its own reward distribution, related "
    "to its name. Think about what each name suggests about how its rewards behave, then "
    "choose the arm more likely to give a higher reward on average.\n"
    "Answer <answer>{a}</answer> or <answer>{b}</answer>."
)


def _word(name: str) -> re.Pattern[str]:
    return re.compile(rf"\b{re.escape(name)}\b", re.IGNORECASE)


class BanditEnv(TokenEnv):
    """Two-armed bandit with named arms: pick the arm with the higher expected reward."""

    system_prompt: ClassVar[str] = (
        "You are playing a two-armed bandit game. Pull one arm by answering with its name, "
        "e.g. <answer>Phoenix</answer>."
    )
    max_turns: ClassVar[int] = 1

    def __init__(
        self,
        lo_arm_name: str = "Phoenix",
        hi_arm_name: str = "Dragon",
        lo_arm_score: float = 0.1,
        hi_arm_loscore: float = 0.0,
        hi_arm_hiscore: float = 1.0,
        hi_arm_hiscore_prob: float = 0.25,
        invalid_penalty: float = 0.0,
        name_fallback: bool = False,
    ) -> None:
        """Configure the arms (defaults are RAGEN's).

        Args:
            lo_arm_name: the safe arm (always `lo_arm_score`).
            hi_arm_name: the risky arm (`hi_arm_hiscore` with probability
                `hi_arm_hiscore_prob`, else `hi_arm_loscore`).
            lo_arm_score: reward of the safe arm.
            hi_arm_loscore: the risky arm's usual reward.
            hi_arm_hiscore: the risky arm's rare reward.
            hi_arm_hiscore_prob: probability of the rare reward.
            invalid_penalty: reward when the answer names neither arm (RAGEN: 0).
            name_fallback: without an `<answer>` tag, take the arm named last in the text
                (RAGEN: off; the tag is then required).
        """
        super().__init__()
        if lo_arm_name.strip().lower() == hi_arm_name.strip().lower():
            raise ValueError(f"the two arm names must differ, got {lo_arm_name!r} twice")
        if not 0.0 <= hi_arm_hiscore_prob <= 1.0:
            raise ValueError(f"hi_arm_hiscore_prob must be in [0, 1], got {hi_arm_hiscore_prob}")
        self.lo_arm_name, self.hi_arm_name = lo_arm_name.strip(), hi_arm_name.strip()
        self.lo_arm_score = float(lo_arm_score)
        self.hi_arm_loscore = float(hi_arm_loscore)
        self.hi_arm_hiscore = float(hi_arm_hiscore)
        self.hi_arm_hiscore_prob = float(hi_arm_hiscore_prob)
        self.invalid_penalty = float(invalid_penalty)
        self.name_fallback = bool(name_fallback)

    @property
    def hi_arm_mean(self) -> float:
        """Expected reward of the risky arm."""
        p = self.hi_arm_hiscore_prob
        return p * self.hi_arm_hiscore + (1 - p) * self.hi_arm_loscore

    @property
    def best_arm(self) -> str:
        """The arm with the higher expected reward (ties go to the safe arm)."""
        return self.hi_arm_name if self.hi_arm_mean > self.lo_arm_score else self.lo_arm_name

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Shuffle the order the arms are listed in and show the prompt."""
        super().reset(seed=seed)
        arms = [self.lo_arm_name, self.hi_arm_name]
        if self.np_random.random() < 0.5:
            arms.reverse()
        self.arms = arms
        self._done = False
        return _PROMPT.format(a=arms[0], b=arms[1]), {"arms": list(arms)}

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Pull the named arm; the episode ends after one pull."""
        self.require_reset()
        if self._done:
            return "The episode is over; call reset().", 0.0, True, False, {"success": False}
        self._done = True
        chosen = self._chosen_arm(action)
        if chosen is None:
            text = f"Invalid answer. Choose {self.arms[0]} or {self.arms[1]}."
            return text, self.invalid_penalty, True, False, {"success": False, "valid": False}
        if chosen == self.lo_arm_name:
            reward = self.lo_arm_score
        elif self.np_random.random() < self.hi_arm_hiscore_prob:
            reward = self.hi_arm_hiscore
        else:
            reward = self.hi_arm_loscore
        info = {"success": chosen == self.best_arm, "valid": True, "arm": chosen}
        return f"{chosen}: {reward:g} points", float(reward), True, False, info

    def _chosen_arm(self, action: str) -> str | None:
        """The arm the answer names, or None."""
        answer = parse_answer(action)
        if answer is not None:
            return {a.lower(): a for a in self.arms}.get(answer.strip().strip(".").lower())
        if not self.name_fallback:
            return None
        found = {m.start(): a for a in self.arms for m in _word(a).finditer(action)}
        return found[max(found)] if found else None

    def sample_action(self, rng: np.random.Generator) -> str:
        """One of the two arm names."""
        arms = getattr(self, "arms", [self.lo_arm_name, self.hi_arm_name])
        return f"<answer>{arms[int(rng.integers(2))]}</answer>"


class ReversedBanditEnv(BanditEnv):
    """The bandit with the arm names swapped: "Dragon" is safe and "Phoenix" risky."""

    def __init__(self, **kwargs: Any) -> None:
        """`BanditEnv(lo_arm_name="Dragon", hi_arm_name="Phoenix", **kwargs)`."""
        super().__init__(**{"lo_arm_name": "Dragon", "hi_arm_name": "Phoenix", **kwargs})
