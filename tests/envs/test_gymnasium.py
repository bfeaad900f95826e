"""Gymnasium compatibility: every registered env passes Gymnasium's own `check_env`, and
`gymnasium.make("agentrl/NAME")` builds it with no checker warnings."""

from __future__ import annotations

import warnings

import gymnasium
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env as gymnasium_check_env

from agentrl.envs import AnyText, TextOrMessages, make, register, registry, spec
from agentrl.envs.guess_number import GuessNumber

NAMES = sorted(registry())  # built-ins and entry points (envs_contrib), none left out


def _needs(name: str, request: pytest.FixtureRequest) -> None:
    if "docker" in spec(name).requires:
        request.getfixturevalue("require_docker")  # skips without Docker; fails in CI


def test_the_envs_of_the_entry_points_are_included() -> None:
    for name in ("frozenlake", "countdown-ragen", "gym-taxi", "textarena-sudoku", "tool-calc"):
        assert name in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_gymnasium_check_env_passes(name: str, request: pytest.FixtureRequest) -> None:
    """Gymnasium's checker, warnings as errors, on the env as `gymnasium.make` builds it
    (so it has a spec and the render modes are checked too)."""
    _needs(name, request)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gymnasium.make(f"agentrl/{name}")
        gymnasium_check_env(env.unwrapped)
        env.close()


@pytest.mark.parametrize("name", NAMES)
def test_gymnasium_make_plays_episodes_without_warnings(
    name: str, request: pytest.FixtureRequest
) -> None:
    """Through `gymnasium.make`'s wrappers (the passive checker included): every
    observation is in the observation space, every action sampled from the action space
    is taken."""
    _needs(name, request)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gymnasium.make(f"agentrl/{name}")
        env.action_space.seed(0)
        for seed in range(2):
            obs, _ = env.reset(seed=seed)
            assert obs in env.observation_space
            for _ in range(4):
                obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
                assert obs in env.observation_space
                if terminated or truncated:
                    break
        env.close()


def test_gymnasium_make_passes_keyword_arguments_and_follows_register() -> None:
    env = gymnasium.make("agentrl/sokoban-8x8-2box", max_actions=7)
    assert env.unwrapped.max_actions == 7 and env.unwrapped.num_boxes == 2
    register("test-gym-guess", GuessNumber, high=3)
    assert gymnasium.make("agentrl/test-gym-guess").unwrapped.high == 3
    register("test-gym-guess", GuessNumber, high=5)  # a later register wins, as in make
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and re-registering warns nothing
        register("test-gym-guess", GuessNumber, high=5)
    assert gymnasium.make("agentrl/test-gym-guess").unwrapped.high == 5


def test_sokoban_renders_text_through_gymnasium() -> None:
    env = gymnasium.make("agentrl/sokoban", render_mode="ansi")
    env.reset(seed=0)
    assert "P" in env.render()


def test_text_spaces_hold_what_envs_return() -> None:
    obs, _ = make("sokoban").reset(seed=0)
    assert obs not in spaces.Text(max_length=10_000)  # Gymnasium's default charset: the bug
    assert obs in AnyText()
    assert "" in AnyText() and "\x00 上 🚀\n" in AnyText() and b"x" not in AnyText()
    assert "x" * 11 not in AnyText(10)
    space = AnyText()
    space.seed(0)
    samples = [space.sample() for _ in range(50)]
    assert all(s in space and len(s) <= space.max_sample_length for s in samples)


def test_text_or_messages() -> None:
    space = TextOrMessages()
    assert "text" in space
    assert [{"role": "tool", "content": "4"}, {"role": "user", "content": ""}] in space
    assert [{"role": "tool", "content": "4", "tool_call_id": "1"}] in space
    assert [] not in space and [{"role": "assistant", "content": "4"}] not in space
    assert [{"role": "tool", "content": 4}] not in space and [{"role": "tool"}] not in space
    assert [{"role": "tool", "content": "4", "extra": 1}] not in space and 4 not in space
    space.seed(0)
    assert all(space.sample() in space for _ in range(50))
    masked = space.sample(mask=(3, None))  # a mask constrains the text: a str of 3 characters
    assert isinstance(masked, str) and len(masked) == 3 and masked in space
    assert make("tool-calc").observation_space == space
    assert make("math-arithmetic").observation_space == AnyText()
