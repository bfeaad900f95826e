"""`agentrl rollout --ray` end to end: sokoban, the tiny model, 2 HF replicas on loopback Ray."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.cli import rollout as _cli
from agentrl.trajectory.io import read_trajectories

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_rollout_ray_two_replicas(ray_local, tmp_path, monkeypatch) -> None:
    built: list[Any] = []
    original = _cli.build_engine

    def build_engine(*args: Any, **kwargs: Any) -> Any:
        engine = original(*args, **kwargs)
        built.append(engine)
        return engine

    monkeypatch.setattr(_cli, "build_engine", build_engine)
    args = [
        "rollout", "--env", "sokoban", "--model", "tiny", "--engine", "hf", "--ray",
        "--episodes", "4", "--max-new-tokens", "16", "--out", str(tmp_path), "--no-progress",
    ]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "tokens_per_s" in res.output

    (engine,) = built
    assert type(engine).__name__ == "RayEngine" and engine.num_replicas == 2
    # every episode was routed to one of the 2 replicas (least busy first: which ones serve
    # depends on timing; balancing itself is tested in test_ray_engine.py)
    assert len(engine._sessions) == 4 and set(engine._sessions.values()) <= {0, 1}

    data = read_trajectories(tmp_path / "trajectories" / "step_000000.jsonl")
    assert data.metadata["engine"] == "hf"
    assert [t.seed for t in data.trajectories] == [0, 1, 2, 3]
    for traj in data.trajectories:
        assert traj.status in ("ok", "truncated"), traj.error
        (sample,) = traj.samples
        assert sum(sample.loss_mask) == traj.num_sampled_tokens > 0
