"""Trajectory files: JSONL and Parquet round trips, one file per step."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest

from agentrl.rollout.config import RolloutConfig
from agentrl.rollout.loop import rollout
from agentrl.rollout.testing import ScriptedEngine
from agentrl.trajectory.io import (
    read_trajectories,
    step_path,
    trajectory_from_dict,
    trajectory_to_dict,
    write_step,
    write_trajectories,
)
from agentrl.trajectory.testing import ScriptedEnv, build_tokenizer, plain_vocab_ids
from agentrl.trajectory.types import Status, Trajectory, Turn


@pytest.fixture(scope="module")
def trajectories() -> list[Trajectory]:
    tok = build_tokenizer("chatml")
    engine = ScriptedEngine(plain_vocab_ids(tok), seed=3)
    result = rollout(engine, ScriptedEnv, tok, [0, 1], group_size=2, cfg=RolloutConfig())
    trajs = result.trajectories
    trajs[0].status, trajs[0].error = Status.ENV_ERROR, "boom"
    trajs[1].turns[0].info["np"] = np.float32(0.5)  # numpy values in info are made JSON-safe
    trajs[2].reset_info = {"optimal_len": 4}
    return trajs


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_round_trip(tmp_path, trajectories, fmt) -> None:
    path = write_step(tmp_path, 1, trajectories, {"model": "tiny"}, fmt=fmt)
    assert path == tmp_path / "trajectories" / f"step_000001.{fmt}" == step_path(tmp_path, 1, fmt)
    loaded = read_trajectories(path)
    assert loaded.metadata["model"] == "tiny" and loaded.metadata["step"] == 1
    assert len(loaded.trajectories) == len(trajectories)
    trajectories[1].turns[0].info["np"] = 0.5
    for got, want in zip(loaded.trajectories, trajectories, strict=True):
        assert got == want
    assert not list(tmp_path.rglob(".*.tmp"))


def test_parquet_written_before_reset_info_reads(tmp_path, trajectories) -> None:
    import pyarrow.parquet as pq

    path = write_trajectories(tmp_path / "new.parquet", trajectories)
    table = pq.read_table(path)
    old = tmp_path / "old.parquet"
    pq.write_table(table.drop_columns(["reset_info"]), old)
    loaded = read_trajectories(old).trajectories
    assert [t.reset_info for t in loaded] == [{}] * len(trajectories)
    assert [t.seed for t in loaded] == [t.seed for t in trajectories]


def test_parquet_schema_covers_every_field() -> None:
    import pyarrow as pa

    from agentrl.trajectory.io import _schema

    schema = _schema(pa)
    assert set(schema.names) == {f.name for f in dataclasses.fields(Trajectory)}
    turn_type = schema.field("turns").type.value_type
    assert {turn_type.field(i).name for i in range(turn_type.num_fields)} == {
        f.name for f in dataclasses.fields(Turn)
    }


def test_bad_files_are_named(tmp_path) -> None:
    bad = tmp_path / "x.jsonl"
    bad.write_text(json.dumps({"agentrl_metadata": {}}) + '\n{"samples": 1}\n')
    with pytest.raises(ValueError, match="x.jsonl:2"):
        read_trajectories(bad)
    with pytest.raises(ValueError, match="end in .jsonl or .parquet"):
        write_trajectories(tmp_path / "x.csv", [])
    with pytest.raises(FileNotFoundError, match="no trajectory file"):
        read_trajectories(tmp_path / "missing.jsonl")


def test_to_dict_copies_and_makes_numpy_values_plain(trajectories) -> None:
    traj = copy.deepcopy(trajectories[0])
    sample = traj.samples[0]
    sample.sampler_logp = [np.float32(-0.25), *sample.sampler_logp[1:]]
    sample.token_ids = list(np.asarray(sample.token_ids, dtype=np.int64))
    row = trajectory_to_dict(traj)
    assert type(row["samples"][0]["sampler_logp"][0]) is float
    assert {type(i) for i in row["samples"][0]["token_ids"]} == {int}
    assert json.loads(json.dumps(row)) == row
    row["samples"][0]["loss_mask"].append(-1)  # a copy: the trajectory is untouched
    row["turns"][0]["info"]["added"] = 1
    assert sample.loss_mask[-1] != -1 and "added" not in traj.turns[0].info
    assert trajectory_from_dict(row).samples[0].sampler_logp[0] == -0.25
