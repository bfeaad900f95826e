"""SokobanEnv: RAGEN rewards, action parsing, budgets, rooms files, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agentrl.envs import check_env, make
from agentrl.envs.sokoban import SokobanEnv


def _env_on(tmp_path: Path, grid: list[str], **kwargs: object) -> SokobanEnv:
    path = tmp_path / "rooms.jsonl"
    path.write_text(json.dumps({"seed": 0, "grid": grid}) + "\n", encoding="utf-8")
    env = SokobanEnv(rooms_file=str(path), **kwargs)
    env.reset(seed=0)
    return env


def test_reset_observation_and_info() -> None:
    env = make("sokoban")
    obs, info = env.reset(seed=3)
    assert obs.endswith("\n" + env.render())  # the grid last, next to the answer
    assert "Symbols: # wall" in env.system_prompt
    assert obs.startswith("Actions left: 10.") and "<answer>" in obs
    assert info == {"optimal_len": 4, "num_boxes": 1}
    assert len(obs) < 300  # short prompts: tokens are expensive on CPU


def test_rewards_golden_push_onto_target_and_solve(tmp_path: Path) -> None:
    env = _env_on(tmp_path, ["########", "#PX_O__#", "########"])
    obs, reward, terminated, truncated, info = env.step("<answer>Left</answer>")  # wall
    assert reward == pytest.approx(-0.1) and not terminated
    obs, reward, *_ = env.step("<answer>Right</answer>")  # push, not yet on target
    assert reward == pytest.approx(-0.1)
    assert env.render() == "########\n#_PXO__#\n########"
    obs, reward, terminated, truncated, info = env.step("<answer>right</answer>")
    assert reward == pytest.approx(-0.1 + 1.0 + 10.0)
    assert terminated and not truncated and info["success"] is True
    assert env.render() == "########\n#__P√__#\n########"
    assert obs.startswith("Solved!")


def test_rewards_golden_box_off_target_and_blocked(tmp_path: Path) -> None:
    env = _env_on(tmp_path, ["#########", "#P√_XO__#", "#_______#", "#########"])
    obs, reward, terminated, truncated, info = env.step("<answer>Right || Right</answer>")
    # Push the box off its target (-1.1), then into the other box (blocked, -0.1).
    assert reward == pytest.approx(-1.1 - 0.1)
    assert env.render() == "#########\n#_SXXO__#\n#_______#\n#########"
    assert info["boxes_on_target"] == 0 and info["actions_taken"] == 2
    assert info["actions_left"] == 8 and not terminated
    assert info["valid"] and info["blocked"] == 1 and info["moved"]


def test_move_into_a_wall_says_the_player_did_not_move(tmp_path: Path) -> None:
    env = _env_on(tmp_path, ["#######", "#P_XO_#", "#######"], max_actions_per_turn=3)
    before = env.render()
    obs, reward, _, _, info = env.step("<answer>Up || Left</answer>")
    assert reward == pytest.approx(-0.2) and info["valid"] and info["actions_taken"] == 2
    assert (info["blocked"], info["moved"]) == (2, False) and env.render() == before
    obs, reward, _, _, info = env.step("<answer>Up || Right</answer>")
    assert (info["blocked"], info["moved"]) == (1, True)
    _, _, _, _, info = env.step("nothing")
    assert (info["actions_taken"], info["blocked"], info["moved"]) == (0, 0, False)


def test_multi_action_cap_case_and_separators(tmp_path: Path) -> None:
    env = _env_on(tmp_path, ["##########", "#P_____XO#", "##########"], max_actions_per_turn=2)
    _, _, _, _, info = env.step("<answer>RIGHT || right || Right</answer>")
    assert info["actions_taken"] == 2 and env.room.player == 13


def test_invalid_actions_penalty_and_feedback(tmp_path: Path) -> None:
    env = _env_on(tmp_path, ["########", "#PX_O__#", "########"], invalid_penalty=-0.5)
    obs, reward, terminated, truncated, info = env.step("Up")
    assert reward == -0.5 and info["valid"] is False and info["actions_taken"] == 0
    assert obs.startswith("No <answer>...</answer> found.")
    obs, reward, *_, info = env.step("<answer>Right || Jump || Right</answer>")
    # The valid prefix runs, then the unknown word stops the turn with a penalty.
    assert reward == pytest.approx(-0.5 - 0.1) and info["actions_taken"] == 1
    assert "Unknown action 'Jump'" in obs
    obs, reward, *_ = env.step("<answer></answer>")
    assert reward == -0.5 and obs.startswith("Empty answer.")


def test_action_budget_and_turn_limit() -> None:
    env = make("sokoban", max_actions=3)
    env.reset(seed=1)
    # Left/Right ping-pong does not solve this room; the 3-action budget ends the episode.
    _, _, terminated, truncated, info = env.step("<answer>Left || Right</answer>")
    assert not (terminated or truncated) and info["actions_left"] == 1
    obs, _, terminated, truncated, info = env.step("<answer>Left || Right || Left</answer>")
    assert truncated and not terminated and info["success"] is False
    assert info["actions_taken"] == 1 and obs.startswith("Out of actions.")
    after = env.step("<answer>Up</answer>")
    assert after[0] == "The episode is over; call reset()." and after[1] == 0.0

    env = make("sokoban", max_turns=2)
    env.reset(seed=1)
    assert env.step("nothing")[3] is False
    obs, _, _, truncated, info = env.step("nothing")
    assert truncated and "\nOut of turns.\n" in obs and info["success"] is False


def test_expert_solves_every_seed_within_budget() -> None:
    env = make("sokoban")
    for seed in range(200):
        _, info = env.reset(seed=seed)
        total = 0.0
        for _turn in range(env.max_turns):
            plan = env.expert_actions(env.max_actions_per_turn)
            *_, reward, terminated, truncated, info = env.step(
                "<answer>" + " || ".join(plan) + "</answer>"
            )
            total += reward
            if terminated or truncated:
                break
        assert terminated and info["success"], seed
        assert total == pytest.approx(10.0 + 1.0 - 0.1 * info_len(env, seed))


def info_len(env: SokobanEnv, seed: int) -> int:
    """Optimal length for `seed` (a second reset: the same room)."""
    return make("sokoban").reset(seed=seed)[1]["optimal_len"]


def test_random_policy_sometimes_wins() -> None:
    env = make("sokoban")
    rng = np.random.default_rng(0)
    wins = []
    for seed in range(200):
        env.reset(seed=seed)
        while True:
            *_, terminated, truncated, info = env.step(env.sample_action(rng))
            if terminated or truncated:
                break
        wins.append(info["success"])
    assert 0.05 < np.mean(wins) < 0.6


def test_ragen_rooms_side_by_side() -> None:
    env = make("sokoban-ragen-6x6")
    obs, info = env.reset(seed=0)
    assert env.render() == "######\n#____#\n##O_P#\n###X_#\n###__#\n######"
    assert info["optimal_len"] == 7
    env8 = make("sokoban", rooms_file="ragen", rooms_set="8x8_2box")
    assert env8.reset(seed=5)[1]["num_boxes"] == 2


def test_bad_arguments_and_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="room_size"):
        SokobanEnv(room_size=2)
    with pytest.raises(ValueError, match="max_turns"):
        SokobanEnv(max_turns=0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"grid": ["###", "#P#", "###"]}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        SokobanEnv(rooms_file=str(bad))
    with pytest.raises(ValueError, match="no rooms in set"):
        SokobanEnv(rooms_file="ragen", rooms_set="nope")


@pytest.mark.parametrize("kwargs", [{"room_size": [7, 9], "num_boxes": 2, "difficulty": 1.0}])
def test_check_env_passes_with_options(kwargs: dict[str, object]) -> None:
    report = check_env(SokobanEnv, num_episodes=2, **kwargs)
    assert report.ok, str(report)


def test_clone_plays_as_a_deep_copy_and_shares_no_state() -> None:
    """`clone` (the search's cheap copy) steps exactly as `copy.deepcopy` would, and neither
    the clone's moves nor its random draws reach the source."""
    import copy

    rng = np.random.default_rng(0)
    env = make("sokoban", max_turns=10, max_actions_per_turn=1)
    for seed in range(40):
        env.reset(seed=seed)
        env.step(env.sample_action(rng))
        before = (env.render(), env.state_key(), env._actions_left, env._turns)
        clone, reference = env.clone(), copy.deepcopy(env)
        assert clone.render() == reference.render()
        for _ in range(9):
            action = env.sample_action(rng)
            assert clone.step(action) == reference.step(action)
        assert (env.render(), env.state_key(), env._actions_left, env._turns) == before
    draws = env.clone().np_random.integers(1 << 30, size=4)
    assert (env.np_random.integers(1 << 30, size=4) == draws).all()  # a copy, not a share
    fresh = SokobanEnv()
    assert fresh.clone().reset(seed=3)[0] == fresh.reset(seed=3)[0]  # cloned before any reset


def test_the_llm_observation_says_where_boxes_and_targets_are() -> None:
    plain = SokobanEnv()
    llm = SokobanEnv(positions=True)
    obs, _ = plain.reset(seed=5)
    llm_obs, _ = llm.reset(seed=5)
    assert llm_obs.splitlines()[:-1] == obs.splitlines()  # the same grid, one more line
    assert llm_obs.splitlines()[-1] == "Boxes at 2 down 1 right. Targets at 3 down 1 right."
    obs, *_ = llm.step("<answer>Down</answer>")  # the line is measured from the player
    assert obs.splitlines()[-1] == "Boxes at 1 down 1 right. Targets at 2 down 1 right."


def test_a_box_on_its_target_is_named_as_such() -> None:
    env = SokobanEnv(positions=True)
    env.reset(seed=3)
    actions = env.expert_actions()
    obs, _, terminated, _, info = env.step("<answer>" + " || ".join(actions) + "</answer>")
    assert terminated and info["success"]
    assert obs.splitlines()[-1].startswith("Boxes on targets at ")
    assert "Targets at" not in obs.splitlines()[-1]
