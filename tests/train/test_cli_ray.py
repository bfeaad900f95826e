"""`agentrl train --ray`: the engine runs as Ray replicas and receives every weight update."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.trajectory.io import read_trajectories

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_train_with_ray_engine_replicas_syncs_weights(ray_local, tmp_path) -> None:
    run = tmp_path / "run"
    args = [
        "train", "--env", "sokoban", "--model", "tiny", "--steps", "2", "--ray", "--no-warm-start",
        "--preset", "grpo",  # sampled episodes (Sokoban's default is a local search)
        "--set", "trainer.num_groups=2",
        "--run-dir", str(run), "--set", "rollout.group_size=2",
        "--set", "rollout.sampling.max_new_tokens=16",
    ]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["weight_version"] for r in rows] == [1, 2]  # one sync after each step
    files = sorted((run / "trajectories").glob("step_*.jsonl"))
    assert len(files) == 2
    versions = [
        {turn.weight_version for traj in read_trajectories(f).trajectories for turn in traj.turns}
        for f in files
    ]
    # step 1 sampled with the initial weights, step 2 with the weights synced after step 1
    assert versions == [{0}, {1}]
