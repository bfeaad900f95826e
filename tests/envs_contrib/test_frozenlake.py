"""FrozenLake: solvable random maps, RAGEN render, slipping, rewards and budgets."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.envs import check_env
from envs_contrib.frozenlake import (
    FrozenLakeEnv,
    NonSlipperyFrozenLakeEnv,
    _shortest_path,
    generate_map,
)


def test_random_maps_are_always_solvable_and_vary() -> None:
    rng = np.random.default_rng(0)
    maps = [generate_map(rng, size=4, p=0.6) for _ in range(500)]
    for board in maps:
        flat = "".join(board)
        assert flat.count("S") == 1 and flat.count("G") == 1
        start = divmod(flat.index("S"), 4)
        assert _shortest_path(board, start) is not None
    assert len({tuple(b) for b in maps}) > 400


def test_render_uses_ragen_symbols() -> None:
    env = FrozenLakeEnv(desc=["SFFH", "FHFF", "FFFG", "HFFF"], is_slippery=False)
    obs, info = env.reset(seed=0)
    assert obs.splitlines()[:4] == ["P__O", "_O__", "___G", "O___"]
    assert info["optimal_len"] == 5
    obs, reward, terminated, truncated, info = env.step("<answer>Down || Right</answer>")
    assert obs.splitlines()[1] == "_X__" and (reward, terminated, info["success"]) == (
        0.0,
        True,
        False,
    )


def test_shortest_path_solves_every_nonslippery_map() -> None:
    env = NonSlipperyFrozenLakeEnv(max_actions=20, max_actions_per_turn=20)
    for seed in range(100):
        _, info = env.reset(seed=seed)
        answer = " || ".join(info["shortest_path"])
        obs, reward, terminated, _, info = env.step(f"<answer>{answer}</answer>")
        assert (reward, terminated, info["success"]) == (1.0, True, True), seed
        assert "√" in obs


def test_slipping_goes_intended_or_perpendicular_a_third_each() -> None:
    env = FrozenLakeEnv(desc=["FFF", "FSF", "FFG"], max_actions=1)
    ends = {}
    for seed in range(3000):
        env.reset(seed=seed)
        env.step("<answer>Up</answer>")
        ends[env.pos] = ends.get(env.pos, 0) + 1
    assert set(ends) == {(0, 1), (1, 0), (1, 2)}  # up, left, right; never down
    assert all(800 < n < 1200 for n in ends.values())


def test_invalid_answer_penalty_and_budget_truncation() -> None:
    env = FrozenLakeEnv(desc=["SFFF", "FFFF", "FFFF", "FFFG"], is_slippery=False, max_turns=2)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("go left")
    assert reward == -0.1 and not terminated and not truncated and not info["valid"]
    assert "No <answer>" in obs
    obs, reward, terminated, truncated, info = env.step("<answer>Left</answer>")
    assert truncated and not terminated and info["success"] is False and "Out of turns" in obs


@pytest.mark.parametrize("cls", [FrozenLakeEnv, NonSlipperyFrozenLakeEnv])
def test_check_env(cls) -> None:
    report = check_env(cls)
    assert report.ok, str(report)
