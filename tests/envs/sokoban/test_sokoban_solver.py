"""The exact solver agrees with RAGEN's BFS lengths and acts as an expert policy."""

from __future__ import annotations

import pytest

from agentrl.envs.sokoban import RAGEN_ROOMS, Room, expert_actions, load_rooms, solve


def test_trivial_and_unsolvable() -> None:
    assert solve(Room.from_grid(["#####", "#P√_#", "#####"])) == []
    # The box sits in a corner off target: no solution.
    assert solve(Room.from_grid(["#####", "#X_O#", "#_P_#", "#####"])) is None
    # A box whose target is walled off.
    assert solve(Room.from_grid(["######", "#PX#O#", "######"])) is None


def test_pushes_and_detours_are_counted() -> None:
    # The player must walk around the box to push it left onto the target.
    room = Room.from_grid(["######", "#O_X_#", "#__P_#", "######"])
    assert solve(room) == ["Right", "Up", "Left", "Left"]


@pytest.mark.parametrize("room_set", ["6x6_1box", "8x8_2box"])
def test_matches_ragen_optimal_lengths(room_set: str) -> None:
    rooms = load_rooms("ragen", room_set)
    assert len(rooms) == 512 and RAGEN_ROOMS.exists()
    step = 4 if room_set == "8x8_2box" else 1  # keep the test fast
    for _, room, optimal in rooms[::step]:
        assert len(solve(room)) == optimal


def test_expert_policy_prefix() -> None:
    room = Room.from_grid(["######", "#O_X_#", "#__P_#", "######"])
    assert expert_actions(room, max_actions=2) == ["Right", "Up"]
