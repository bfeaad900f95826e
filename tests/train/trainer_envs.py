"""Small envs for trainer tests: rewards that vary with what a random tiny model samples."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from agentrl.envs.base import TokenEnv


class VowelCount(TokenEnv):
    """Two turns; each turn's reward is the fraction of vowels in the answer (varies a lot
    between samples of a random model, so group advantages are non-zero)."""

    system_prompt = "Answer with many vowels."
    max_turns = 2

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.turn = 0
        return f"Round {int(self.np_random.integers(100))}.", {}

    def step(self, action: str):
        self.require_reset()
        self.turn += 1
        letters = [c for c in action.lower() if c.isalpha()]
        reward = sum(c in "aeiou" for c in letters) / max(1, len(letters))
        done = self.turn >= self.max_turns
        return "Again.", reward, done, False, {"success": reward > 0.3} if done else {}


class FourTuple(VowelCount):
    """Breaks the contract: `step` returns 4 values (the old Gym API), not 5."""

    def step(self, action: str):
        observation, reward, terminated, _, info = super().step(action)
        return observation, reward, terminated, info


class IntObservation(VowelCount):
    """Breaks the contract: `reset` returns an int observation."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return 7, {}


class BreaksOnThirdSeed(VowelCount):
    """Plays well on the first two seeds it sees in this process (one step of two groups),
    then returns an int observation; fixed (never breaks) with `TRAINER_ENVS_FIXED=1`."""

    seen: ClassVar[set[int | None]] = set()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = super().reset(seed=seed)
        self.seen.add(seed)
        if len(self.seen) > 2 and not os.environ.get("TRAINER_ENVS_FIXED"):
            return 7, info
        return observation, info
