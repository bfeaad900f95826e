"""Room parsing, rendering and generation (always solvable, seed-stable)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from agentrl.envs.sokoban import Room, RoomGenerationError, generate_room, reverse_distances, solve

# Golden rooms: the same seed must give these exact grids on every machine.
GOLDEN_6X6_SEED3 = "######\n#O_X_#\n#_#P_#\n#__###\n######\n######"
GOLDEN_8X8_SEED0 = "########\n########\n########\n####_###\n####P__#\n###O_X_#\n#_O_X__#\n########"


def test_render_symbols_round_trip() -> None:
    rows = ["#######", "#P_X_O#", "#_√_S_#", "#######"]
    with pytest.raises(ValueError, match="exactly one player"):
        Room.from_grid(rows)
    rows = ["#######", "#P_X_O#", "#_√___#", "#######"]
    room = Room.from_grid(rows)
    assert room.render() == "\n".join(rows)
    assert room.num_boxes == 2 and len(room.targets) == 2 and not room.is_solved()
    on_target = Room.from_grid(["#####", "#S_√#", "#_X_#", "#####"])
    assert on_target.render() == "#####\n#S_√#\n#_X_#\n#####"
    assert on_target.player in on_target.targets


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        (["###", "#P#"], "at least 3x3"),
        (["####", "#PX#", "####"], "as many boxes as targets"),
        (["####", "#PZ#", "####"], "unknown symbol"),
        (["##_#", "#PXO", "####"], "outer ring"),
        (["#####", "#PXO#", "####"], "rectangle"),
    ],
)
def test_bad_grids_are_clear_errors(rows: list[str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Room.from_grid(rows)


def test_same_seed_same_room_golden() -> None:
    a, length_a = generate_room(np.random.default_rng(3))
    b, length_b = generate_room(np.random.default_rng(3))
    assert a == b and length_a == length_b
    from agentrl.envs import make

    env = make("sokoban")
    env.reset(seed=3)
    assert env.render() == GOLDEN_6X6_SEED3
    env.reset(seed=3)
    assert env.render() == GOLDEN_6X6_SEED3
    env8 = make("sokoban-8x8-2box")
    env8.reset(seed=0)
    assert env8.render() == GOLDEN_8X8_SEED0


def test_thousand_seeds_all_solved_with_the_promised_length() -> None:
    start = time.perf_counter()
    lengths = []
    for seed in range(1000):
        room, length = generate_room(np.random.default_rng(seed))
        solution = solve(room)
        assert solution is not None and len(solution) == length, seed
        assert 1 <= length <= 10
        assert room.render().count("\n") == 5 and room.num_boxes == 1
        lengths.append(length)
    assert len(set(lengths)) >= 8  # a spread of difficulties, not one fixed length
    assert time.perf_counter() - start < 20


def test_two_box_rooms_solved_with_the_promised_length() -> None:
    for seed in range(40):
        room, length = generate_room(
            np.random.default_rng(seed), height=8, width=8, num_boxes=2, max_solution_len=20
        )
        solution = solve(room)
        assert solution is not None and len(solution) == length and room.num_boxes == 2


def test_difficulty_and_length_range() -> None:
    easy = [generate_room(np.random.default_rng(s), difficulty=0.0)[1] for s in range(60)]
    hard = [generate_room(np.random.default_rng(s), difficulty=1.0)[1] for s in range(60)]
    assert np.mean(hard) > np.mean(easy) + 2
    assert set(easy) == {1}
    ranged = [
        generate_room(np.random.default_rng(s), min_solution_len=5, max_solution_len=6)[1]
        for s in range(60)
    ]
    assert set(ranged) <= {5, 6}
    with pytest.raises(ValueError, match="difficulty"):
        generate_room(np.random.default_rng(0), difficulty=2.0)
    with pytest.raises(RoomGenerationError, match="widen"):
        generate_room(
            np.random.default_rng(0),
            height=4,
            width=4,
            min_solution_len=9,
            max_solution_len=9,
            max_attempts=5,
        )


def test_reverse_distances_are_forward_optimal() -> None:
    room = Room.from_grid(["#######", "#P_X_O#", "#######"])
    dist = reverse_distances(room.floor, room.width, room.targets, max_depth=20)
    assert dist[(room.player, room.boxes)] == len(solve(room)) == 3
