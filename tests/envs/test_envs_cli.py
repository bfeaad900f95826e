"""`agentrl envs list`, `agentrl envs check`, `agentrl play` (driven through stdin)."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.envs import make

runner = CliRunner()


def test_envs_list_shows_sokoban_variants() -> None:
    result = runner.invoke(app, ["envs", "list"])
    assert result.exit_code == 0, result.output
    for name in ("sokoban", "sokoban-8x8-2box", "sokoban-10x10-3box", "guess-number"):
        assert name in result.output
    assert "agentrl" in result.output  # the source column


def test_envs_list_and_check_show_the_training_defaults() -> None:
    """Sokoban registers 5 turns; `agentrl train --env sokoban` plays 10, one turn in context."""
    listed = runner.invoke(app, ["envs", "list"]).output
    assert "5 (train 10)" in listed
    assert "sokoban: `agentrl train` also sets history_turns 0, max_turns=10" in listed
    checked = runner.invoke(app, ["envs", "check", "sokoban", "--episodes", "1"])
    assert checked.exit_code == 0, checked.output
    text = " ".join(checked.output.split())
    assert "checked with env arguments: none (registered defaults otherwise, 5 turns)" in text
    assert "`agentrl train --env sokoban` plays it with 10 turns, history_turns 0" in text
    args = ["envs", "check", "sokoban", "--episodes", "1", "--train-defaults", "--set", "x=1"]
    trained = runner.invoke(app, args)
    assert trained.exit_code == 1  # the --set keyword is not Sokoban's
    assert "checked with env arguments: max_turns=10, x=1" in " ".join(trained.output.split())


def test_envs_check_exit_codes() -> None:
    ok = runner.invoke(app, ["envs", "check", "sokoban", "--episodes", "1"])
    assert ok.exit_code == 0, ok.output
    assert "determinism" in ok.output and "all checks passed" in ok.output
    bad = runner.invoke(app, ["envs", "check", "sokoban", "--set", "room_size=2"])
    assert bad.exit_code == 1
    assert "construct" in bad.output and "FAIL" in bad.output


def test_envs_check_of_a_misspelled_name_suggests_the_nearest() -> None:
    result = runner.invoke(app, ["envs", "check", "sokobn"])
    assert result.exit_code == 2, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("error: unknown env 'sokobn'. Did you mean: sokoban,")
    from agentrl.envs import registry

    for name in registry():  # every known env, the list not cut off
        assert name in result.output
    assert "constructible" not in result.output  # not the fix of an env that cannot be built


def test_play_sokoban_seed_3_with_solver_moves() -> None:
    env = make("sokoban")
    env.reset(seed=3)
    moves = env.expert_actions()
    # One answer per turn, as the model would type them; the last turn uses a bare word.
    lines = [f"<answer>{m}</answer>" for m in moves[:-1]] + [moves[-1]]
    result = runner.invoke(app, ["play", "sokoban", "--seed", "3"], input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.output
    assert env.system_prompt[:40] in result.output
    assert "Solved!" in result.output
    assert "success=True" in result.output


def test_play_quits_on_empty_line_and_takes_set() -> None:
    result = runner.invoke(
        app,
        ["play", "guess-number", "--seed", "0", "--set", "high=3"],
        input="<answer>9</answer>\n\n",
    )
    assert result.exit_code == 3  # not 2, which is bad usage
    assert "The number is in [1, 3]." in result.output and "outside" in result.output
    assert "quit: episode not finished (exit code 3)" in result.output


def test_play_input_ending_before_the_episode_exits_3() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "play", "sokoban", "--seed", "3"],
        input="Right",  # one move, then end of input without a newline
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3, proc.stderr
    assert "reward" in proc.stdout and "episode not finished (exit code 3)" in proc.stdout


def test_play_subprocess_end_to_end() -> None:
    env = make("guess-number", high=1)
    env.reset(seed=0)
    proc = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "play", "guess-number", "--set", "high=1", "--raw"],
        input="<answer>1</answer>\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "success=True" in proc.stdout


def test_play_of_a_misspelled_name_names_only_what_was_typed() -> None:
    result = runner.invoke(app, ["play", "sokobn"], input="\n")
    assert result.exit_code == 2
    text = " ".join(result.output.replace("│", " ").split())
    assert "Invalid value for NAME: unknown env 'sokobn'. Did you mean: sokoban" in text
    assert "--set" not in text
