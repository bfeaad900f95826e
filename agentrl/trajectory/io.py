"""Write and read trajectories: JSONL or Parquet, one file per training step.

A run directory keeps `<run>/trajectories/step_000001.jsonl` (or `.parquet`). Each file
carries metadata (the model name, so `agentrl view` can decode ids; the step; anything else
the writer adds). Files are written to a temporary name and renamed, so a crash never leaves
half a file.

>>> from agentrl.trajectory.types import Sample, Trajectory
>>> t = Trajectory([Sample([1, 2], [0, 1], [0.0, -0.5], [-1, 0])], [], "demo", seed=3, group_id=0)
>>> trajectory_from_dict(trajectory_to_dict(t)) == t
True
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal

from agentrl.trajectory.types import Sample, Status, Trajectory, Turn

FORMAT_VERSION = 1
"""Bumped when the stored layout changes."""

Format = Literal["jsonl", "parquet"]


@dataclass
class TrajectoryFile:
    """The contents of one trajectory file."""

    trajectories: list[Trajectory]
    metadata: dict[str, Any] = field(default_factory=dict)


_PLAIN = frozenset({int, float, str, bool, type(None)})


def _jsonable(value: Any) -> Any:
    """`value` with numpy scalars/arrays and other odd types made JSON-safe."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if _PLAIN.issuperset(map(type, value)):  # ids, masks, logprobs: copy, no recursion
            return list(value)
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if is_dataclass(value) and not isinstance(value, type):
        # Shallow field reads: the recursion copies each field once (`dataclasses.asdict`
        # deep-copied first and took 3/4 of the time to write a trajectory file).
        return {f.name: _jsonable(getattr(value, f.name)) for f in fields(value)}
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return _jsonable(value.tolist())
    return str(value)


def trajectory_to_dict(traj: Trajectory) -> dict[str, Any]:
    """A JSON-safe dict of `traj` (the inverse of `trajectory_from_dict`)."""
    out = _jsonable(traj)
    out["status"] = str(traj.status)
    return out


def trajectory_from_dict(data: dict[str, Any]) -> Trajectory:
    """Rebuild a `Trajectory` from `trajectory_to_dict` output."""
    data = dict(data)
    data["samples"] = [Sample(**s) for s in data["samples"]]
    data["turns"] = [Turn(**t) for t in data["turns"]]
    data["status"] = Status(data["status"])
    return Trajectory(**data)


def step_path(run_dir: str | Path, step: int, fmt: Format = "jsonl") -> Path:
    """Where step `step`'s trajectories live: `<run>/trajectories/step_000001.jsonl`."""
    return Path(run_dir) / "trajectories" / f"step_{step:06d}.{fmt}"


def write_trajectories(
    path: str | Path, trajs: Sequence[Trajectory], metadata: dict[str, Any] | None = None
) -> Path:
    """Write `trajs` to `path` (`.jsonl` or `.parquet`) atomically; returns the path."""
    path = Path(path)
    meta = {"format_version": FORMAT_VERSION, **_jsonable(metadata or {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    rows = [trajectory_to_dict(t) for t in trajs]
    if path.suffix == ".jsonl":
        with tmp.open("w") as f:
            f.write(json.dumps({"agentrl_metadata": meta}) + "\n")
            for row in rows:
                f.write(json.dumps(row) + "\n")
    elif path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist([_flatten(row) for row in rows], schema=_schema(pa))
        table = table.replace_schema_metadata({"agentrl_metadata": json.dumps(meta)})
        pq.write_table(table, tmp)
    else:
        raise ValueError(f"{path}: trajectory files end in .jsonl or .parquet")
    os.replace(tmp, path)
    return path


def write_parquet_chunks(
    path: str | Path,
    chunks: Iterable[Sequence[Trajectory]],
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write a `.parquet` trajectory file one row group per chunk of `chunks` (an iterable,
    so the trajectories need never all be in memory), atomically as `write_trajectories`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if path.suffix != ".parquet":
        raise ValueError(f"{path}: write_parquet_chunks writes .parquet files")
    meta = {"format_version": FORMAT_VERSION, **_jsonable(metadata or {})}
    schema = _schema(pa).with_metadata({"agentrl_metadata": json.dumps(meta)})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with pq.ParquetWriter(tmp, schema) as writer:
        for chunk in chunks:
            rows = [_flatten(trajectory_to_dict(t)) for t in chunk]
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
    os.replace(tmp, path)
    return path


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The metadata of a `.parquet` trajectory file, without reading its rows."""
    import pyarrow.parquet as pq

    raw = (pq.read_schema(path).metadata or {}).get(b"agentrl_metadata", b"{}")
    return json.loads(raw)


def write_step(
    run_dir: str | Path,
    step: int,
    trajs: Sequence[Trajectory],
    metadata: dict[str, Any] | None = None,
    fmt: Format = "jsonl",
) -> Path:
    """Write one training step's trajectories into the run directory."""
    return write_trajectories(
        step_path(run_dir, step, fmt), trajs, {"step": step, **(metadata or {})}
    )


def read_trajectories(path: str | Path) -> TrajectoryFile:
    """Read a `.jsonl` or `.parquet` trajectory file; errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no trajectory file at {path}")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        raw = (table.schema.metadata or {}).get(b"agentrl_metadata", b"{}")
        trajs = [trajectory_from_dict(_unflatten(row)) for row in table.to_pylist()]
        return TrajectoryFile(trajs, json.loads(raw))
    meta: dict[str, Any] = {}
    trajs = []
    with path.open() as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if "agentrl_metadata" in row:
                    meta = row["agentrl_metadata"]
                else:
                    trajs.append(trajectory_from_dict(row))
            except (ValueError, TypeError, KeyError) as e:
                raise ValueError(f"{path}:{lineno}: not a trajectory record: {e}") from e
    return TrajectoryFile(trajs, meta)


# Parquet keeps token data as typed list columns; free-form fields (env info, observations,
# metrics) are JSON strings so rows with different keys share one schema.
_JSON_FIELDS = ("first_observation", "reset_info", "metrics")
_TURN_JSON_FIELDS = ("observation", "info")


def _flatten(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    for key in _JSON_FIELDS:
        row[key] = json.dumps(row[key])
    row["turns"] = [
        {**t, **{key: json.dumps(t[key]) for key in _TURN_JSON_FIELDS}} for t in row["turns"]
    ]
    return row


def _unflatten(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    for key in _JSON_FIELDS:
        if row.get(key) is not None:  # files written before `reset_info` lack its column
            row[key] = json.loads(row[key])
        else:
            row.pop(key, None)
    row["turns"] = [
        {**t, **{key: json.loads(t[key]) for key in _TURN_JSON_FIELDS}} for t in row["turns"]
    ]
    return row


def _schema(pa: Any) -> Any:
    sample = pa.struct(
        [
            ("token_ids", pa.list_(pa.int64())),
            ("loss_mask", pa.list_(pa.int8())),
            ("sampler_logp", pa.list_(pa.float64())),
            ("turn_ids", pa.list_(pa.int32())),
        ]
    )
    turn = pa.struct(
        [
            ("num_sampled", pa.int64()),
            ("action_text", pa.string()),
            ("finish_reason", pa.string()),
            ("weight_version", pa.int64()),
            ("reward", pa.float64()),
            ("observation", pa.string()),
            ("terminated", pa.bool_()),
            ("truncated", pa.bool_()),
            ("info", pa.string()),
        ]
    )
    return pa.schema(
        [
            ("samples", pa.list_(sample)),
            ("turns", pa.list_(turn)),
            ("env_name", pa.string()),
            ("seed", pa.int64()),
            ("group_id", pa.int64()),
            ("status", pa.string()),
            ("system_prompt", pa.string()),
            ("first_observation", pa.string()),
            ("reset_info", pa.string()),
            ("per_turn_samples", pa.bool_()),
            ("error", pa.string()),
            ("metrics", pa.string()),
        ]
    )
