"""`check_env`: every registered env passes; broken envs fail the right named check."""

from __future__ import annotations

import random
from typing import Any, ClassVar

import pytest
from gymnasium import spaces

from agentrl.envs import TextOrMessages, TokenEnv, check_env, registry, spec


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_registered_env_passes_check_env(name: str, request: pytest.FixtureRequest) -> None:
    """Runs over `registry()`, so envs registered later by other packages are included."""
    if "docker" in spec(name).requires:
        request.getfixturevalue("require_docker")  # skips without Docker; fails in CI
    report = check_env(name, num_episodes=2)
    assert report.ok, str(report)


class Good(TokenEnv):
    """A well-behaved one-turn env."""

    system_prompt: ClassVar[str] = "Say yes."
    max_turns: ClassVar[int] = 1

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.word = str(int(self.np_random.integers(10)))
        return f"Number {self.word}", {}

    def step(self, action: str):
        self.require_reset()
        ok = self.word in action
        return "done", float(ok), True, False, {"success": ok}


class Unseeded(Good):
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.word = str(random.randint(0, 10**9))  # global RNG: not reproducible
        return f"Number {self.word}", {}


class NoResetGuard(Good):
    def step(self, action: str):
        return "done", 0.0, True, False, {"success": False}


class Raises(Good):
    def step(self, action: str):
        self.require_reset()
        if not action.strip():
            raise ValueError("empty action")
        return super().step(action)


class BadReward(Good):
    def step(self, action: str):
        self.require_reset()
        return "done", float("nan"), True, False, {"success": False}


class IntReward(Good):
    def step(self, action: str):
        self.require_reset()
        return "done", 1, True, False, {"success": True}


class NoSuccess(Good):
    def step(self, action: str):
        self.require_reset()
        return "done", 0.0, True, False, {}


class NeverEnds(Good):
    max_turns: ClassVar[int] = 3

    def step(self, action: str):
        self.require_reset()
        return "again", 0.0, False, False, {}


class NeverEndsDocumented(NeverEnds):
    ends_within_max_turns: ClassVar[bool] = False


class BadObservation(Good):
    def step(self, action: str):
        self.require_reset()
        return [{"role": "assistant", "content": "x"}], 0.0, True, False, {"success": False}


class NoPrompt(Good):
    system_prompt: ClassVar[str] = ""


def _failed(env_cls: type[TokenEnv]) -> set[str]:
    return {r.name for r in check_env(env_cls).failures}


def test_good_env_passes_and_renders() -> None:
    report = check_env(Good)
    assert report.ok and bool(report)
    from rich.console import Console

    console = Console(record=True, width=120)
    console.print(report)
    assert "determinism" in console.export_text()


@pytest.mark.parametrize(
    ("env_cls", "expected"),
    [
        (Unseeded, {"determinism"}),
        (NoResetGuard, {"step before reset"}),
        (Raises, {"malformed actions"}),
        (
            BadReward,
            {"determinism", "malformed actions", "rewards and types", "random episode ends"},
        ),
        (
            IntReward,
            {"determinism", "malformed actions", "rewards and types", "random episode ends"},
        ),
        (
            NoSuccess,
            {"determinism", "malformed actions", "rewards and types", "random episode ends"},
        ),
        (NeverEnds, {"random episode ends"}),
        (
            BadObservation,
            {"determinism", "malformed actions", "rewards and types", "random episode ends"},
        ),
        (NoPrompt, {"system_prompt"}),
    ],
)
def test_broken_envs_fail_the_named_checks(env_cls: type[TokenEnv], expected: set[str]) -> None:
    report = check_env(env_cls)
    assert {r.name for r in report.failures} == expected
    assert all(r.fix for r in report.failures), str(report)


def test_documented_rollout_truncation_passes() -> None:
    report = check_env(NeverEndsDocumented)
    assert report.ok, str(report)
    assert "rollout truncates" in next(
        r.detail for r in report.results if r.name == "random episode ends"
    )


def test_instance_already_reset_skips_step_before_reset() -> None:
    env = Good()
    env.reset(seed=0)
    result = next(r for r in check_env(env).results if r.name == "step before reset")
    assert result.passed and "skipped" in result.detail


def test_unbuildable_env_is_a_failed_check() -> None:
    report = check_env("no-such-env-here")
    assert not report.ok and report.failures[0].name == "construct"


def test_unknown_name_lists_every_known_env_and_no_wrong_fix() -> None:
    (failure,) = check_env("sokobn").failures
    assert failure.detail.startswith("unknown env 'sokobn'. Did you mean: sokoban,")
    assert all(name in failure.detail for name in registry())  # the list is not cut off
    assert "constructible" not in failure.fix


class UndeclaredMessages(Good):
    """Returns tool messages but keeps the default `AnyText` observation space."""

    def step(self, action: str):
        self.require_reset()
        return [{"role": "tool", "content": "42"}], 0.0, True, False, {"success": False}


class DeclaredMessages(UndeclaredMessages):
    observation_space = TextOrMessages()


class NarrowActions(Good):
    action_space = spaces.Text(max_length=100)  # Gymnasium's default charset: letters, digits


def test_spaces_must_hold_what_the_env_returns_and_takes() -> None:
    """What Gymnasium's own `check_env` needs; the fix names the space to declare."""
    (failure,) = check_env(UndeclaredMessages).failures
    assert failure.name == "spaces" and "TextOrMessages()" in failure.fix
    assert check_env(DeclaredMessages).ok
    (failure,) = check_env(NarrowActions).failures
    assert failure.name == "spaces" and "AnyText()" in failure.fix


class HangsOnSeed4(Good):
    """`step()` loops forever in the episode with seed 4."""

    def reset(self, *, seed=None, options=None):
        self.hang = seed == 4
        return super().reset(seed=seed, options=options)

    def step(self, action: str):
        while self.hang:
            pass
        return super().step(action)


class ResetRaisesOnSeed1(Good):
    def reset(self, *, seed=None, options=None):
        if seed == 1:
            raise KeyError("room 1")
        return super().reset(seed=seed, options=options)


def test_a_hung_call_fails_its_check_within_the_limit_naming_seed_and_place() -> None:
    import time

    start = time.monotonic()
    report = check_env(HangsOnSeed4, seed=4, num_episodes=1, call_timeout_s=0.2)
    assert time.monotonic() - start < 5
    failed = {r.name: r for r in report.failures}
    det = failed["determinism"]
    assert det.detail == "step() in the episode with seed 4 did not return within 0.2 s"
    assert "agentrl play HangsOnSeed4 --seed 4" in det.fix
    assert "in step\n    while self.hang:" in det.traceback  # where it was stopped
    assert "agentrl/envs/check.py" not in det.traceback
    assert not failed["malformed actions"].traceback  # shown once, not on every row


def test_a_raising_reset_shows_the_env_frames_only() -> None:
    report = check_env(ResetRaisesOnSeed1, num_episodes=2)
    failed = {r.name: r for r in report.failures}
    tb = failed["determinism"].traceback
    assert tb.startswith("Traceback (the env's frames):\n")
    assert 'raise KeyError("room 1")' in tb and tb.endswith("KeyError: 'room 1'")
    assert (
        "agentrl/envs/check.py" not in tb and "see the traceback below" in failed["determinism"].fix
    )
    assert "         KeyError: 'room 1'" in str(report).splitlines()


def test_an_observation_outside_the_declared_space_fails_spaces() -> None:
    class Digits(Good):
        observation_space = spaces.Text(max_length=20, charset="0123456789")

    failed = {r.name: r for r in check_env(Digits, num_episodes=1).failures}
    assert "not in observation_space" in failed["spaces"].detail
