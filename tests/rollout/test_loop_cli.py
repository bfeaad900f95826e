"""`agentrl rollout` end to end with the tiny model on the HF engine."""

from __future__ import annotations

from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.trajectory.io import read_trajectories


def test_rollout_cli_writes_trajectories_and_summary(tmp_path) -> None:
    args = [
        "rollout", "--env", "agentrl.trajectory.testing:ScriptedEnv", "--model", "tiny",
        "--engine", "hf", "--episodes", "2", "--group-size", "2", "--max-new-tokens", "8",
        "--out", str(tmp_path), "--no-progress",
    ]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "success_rate" in res.output and "tokens_per_s" in res.output
    data = read_trajectories(tmp_path / "trajectories" / "step_000000.jsonl")
    assert data.metadata["model"] == "tiny" and data.metadata["engine"] == "hf"
    assert [t.group_id for t in data.trajectories] == [0, 0, 1, 1]
    for traj in data.trajectories:
        assert traj.status in ("ok", "truncated")
        (sample,) = traj.samples
        assert sum(sample.loss_mask) == traj.num_sampled_tokens > 0
    res = CliRunner().invoke(app, ["view", str(tmp_path / "trajectories" / "step_000000.jsonl")])
    assert res.exit_code == 0, res.output


def test_rollout_cli_names_the_engine_it_picks(tmp_path) -> None:
    """Without --engine: vllm where installed, but hf for the tiny model (faster there)."""
    args = [
        "rollout", "--env", "agentrl.trajectory.testing:ScriptedEnv", "--model", "tiny",
        "--episodes", "1", "--max-new-tokens", "4", "--out", str(tmp_path), "--no-progress",
    ]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert res.output.startswith("engine: hf (")
    data = read_trajectories(tmp_path / "trajectories" / "step_000000.jsonl")
    assert data.metadata["engine"] == "hf"


def test_rollout_cli_rejects_unknown_env(tmp_path) -> None:
    args = ["rollout", "--env", "no-such-env", "--model", "tiny", "--out", str(tmp_path)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0 and "unknown env" in res.output
