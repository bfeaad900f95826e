"""TextArena adapter: offline games only, own random state, final rewards, check_env."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("textarena", reason="install the extra: pip install 'agentrl[textarena]'")

from agentrl.envs import check_env, make  # noqa: E402
from envs_contrib.textarena_adapter import (  # noqa: E402
    LEFT_OUT,
    Mastermind,
    TextArenaEnv,
)


def test_solving_mastermind_gives_reward_one_and_success() -> None:
    env = Mastermind()
    obs, _ = env.reset(seed=5)
    assert "Mastermind" in obs
    code = env.game.state.game_state["secret_code"]
    wrong = [d for d in range(1, 7) if d not in code][:1] + code[1:]
    obs, reward, terminated, _, info = env.step(f"<answer>[{' '.join(map(str, wrong))}]</answer>")
    assert (reward, terminated, info["valid"]) == (0.0, False, True) and "black peg" in obs
    obs, reward, terminated, _, info = env.step(f"I guess [{' '.join(map(str, code))}]")
    assert (reward, terminated, info["success"]) == (1.0, True, True)


def test_invalid_moves_get_feedback_then_end_the_game() -> None:
    env = Mastermind()
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step("<answer>hello</answer>")
    assert not terminated and not info["valid"] and "invalid move" in obs
    obs, reward, terminated, _, info = env.step("<answer>hello</answer>")
    assert terminated and info["success"] is False and not info["valid"]


def test_seeded_and_independent_of_the_global_random_state() -> None:
    env = make("textarena-mastermind")
    random.seed(1)
    before = random.random()
    random.seed(1)
    env.reset(seed=3)
    first = env.game.state.game_state["secret_code"]
    assert random.random() == before  # the caller's random state is untouched
    random.seed(99)
    env.reset(seed=3)
    assert env.game.state.game_state["secret_code"] == first
    codes = set()
    for seed in range(10):
        env.reset(seed=seed)
        codes.add(tuple(env.game.state.game_state["secret_code"]))
    assert len(codes) > 5


def test_games_that_need_the_network_are_refused() -> None:
    assert "Wordle" in LEFT_OUT
    with pytest.raises(ValueError, match="nltk"):
        TextArenaEnv("Wordle-v0")
    with pytest.raises(ValueError, match="not a known offline"):
        TextArenaEnv("Chess-v0")
    env = make("textarena:GuessTheNumber-v0")
    assert "Guess The Number" in env.reset(seed=0)[0]


@pytest.mark.parametrize(
    "name",
    [
        "textarena-mastermind",
        "textarena-sudoku",
        "textarena-tower-of-hanoi",
        "textarena-guess-the-number",
        "textarena-minesweeper",
        "textarena-lights-out",
    ],
)
def test_check_env(name: str) -> None:
    report = check_env(name)
    assert report.ok, str(report)
