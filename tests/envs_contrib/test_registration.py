"""The contrib envs arrive through the `agentrl.envs` entry points; CLI list, check and play."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.envs import check_env, make, registry, spec

CONTRIB = [
    "frozenlake",
    "frozenlake-nonslippery",
    "bandit",
    "bandit-reversed",
    "countdown-ragen",
    "gym-frozenlake",
    "gym-taxi",
    "gym-cliffwalking",
    "gym-blackjack",
]
runner = CliRunner()


def test_entry_points_register_every_contrib_env() -> None:
    known = registry()
    for name in CONTRIB:
        assert name in known, f"{name} missing: reinstall with pip install -e ."
        assert str(known[name].entry_point).startswith("envs_contrib.")


def test_prefix_names_pass_the_id() -> None:
    s = spec("gym:Blackjack-v1")
    assert s.defaults == {"env_id": "Blackjack-v1"} and s.source == "gym"
    assert spec("textarena:Mastermind-v0").defaults == {"game_id": "Mastermind-v0"}
    assert spec("envs_contrib.bandit:BanditEnv").entry_point == "envs_contrib.bandit:BanditEnv"


@pytest.mark.parametrize("name", CONTRIB)
def test_check_env_by_name(name: str) -> None:
    report = check_env(name)
    assert report.ok, str(report)


def test_cli_lists_and_checks() -> None:
    result = runner.invoke(app, ["envs", "list"])
    assert result.exit_code == 0 and "frozenlake" in result.output and "bandit" in result.output
    result = runner.invoke(app, ["envs", "check", "gym:Taxi-v3"])
    assert result.exit_code == 0, result.output


def test_play_frozenlake_to_the_goal() -> None:
    env = make("frozenlake-nonslippery")
    _, info = env.reset(seed=4)
    moves = info["shortest_path"]
    turns = [" || ".join(moves[i : i + 5]) for i in range(0, len(moves), 5)]
    result = runner.invoke(
        app, ["play", "frozenlake-nonslippery", "--seed", "4"], input="\n".join(turns) + "\n"
    )
    assert result.exit_code == 0, result.output
    assert "success=True" in result.output


def test_play_bandit_and_gym_blackjack() -> None:
    result = runner.invoke(app, ["play", "bandit", "--seed", "0"], input="Dragon\n")
    assert result.exit_code == 0 and "success=True" in result.output, result.output
    result = runner.invoke(app, ["play", "gym:Blackjack-v1", "--seed", "0"], input="Stick\n")
    assert result.exit_code == 0 and "success=" in result.output, result.output
