"""Small broken envs for the fault tests: each breaks in one way on some seeds.

Used by name (`broken_envs:HangsInStep`) with this folder on PYTHONPATH."""

from __future__ import annotations

import os
import time
from typing import Any

from agentrl.envs.guess_number import GuessNumber


class HangsInStep(GuessNumber):
    """`step()` never returns on every fifth seed (0, 5, 10, ...)."""

    hangs = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
        self.hangs = seed is not None and seed % 5 == 0
        return super().reset(seed=seed, options=options)

    def step(self, action: str):  # type: ignore[no-untyped-def]
        while self.hangs:
            time.sleep(1.0)
        return super().step(action)


class ResetRaises(GuessNumber):
    """`reset()` raises on odd seeds."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
        if seed is not None and seed % 2 == 1:
            raise ValueError(f"no room for seed {seed}")
        return super().reset(seed=seed, options=options)


class HangsInReset(GuessNumber):
    """`reset()` never returns on every fifth seed."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
        while seed is not None and seed % 5 == 0:
            time.sleep(1.0)
        return super().reset(seed=seed, options=options)


class ExitsInStep(GuessNumber):
    """`step()` ends its process (as a crash would) on every fifth seed."""

    exits = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
        self.exits = seed is not None and seed % 5 == 0
        return super().reset(seed=seed, options=options)

    def step(self, action: str):  # type: ignore[no-untyped-def]
        if self.exits:
            os._exit(3)
        return super().step(action)


class ResetRaisesMostly(GuessNumber):
    """`reset()` raises on three seeds of four."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
        if seed is not None and seed % 4 != 0:
            raise ValueError(f"no room for seed {seed}")
        return super().reset(seed=seed, options=options)
