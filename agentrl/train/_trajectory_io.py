"""Sampled trajectories of each step as JSON lines: `<run>/trajectories/step-NNNNNN.jsonl`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agentrl.trajectory.types import Trajectory


def trajectory_record(traj: Trajectory, tokenizer: Any | None = None) -> dict[str, Any]:
    """A JSON-ready dict of one trajectory: summary, turns and samples (token ids, masks,
    logprobs), plus the decoded text of each sample when a tokenizer is given."""
    record = {
        "env": traj.env_name,
        "seed": traj.seed,
        "group_id": traj.group_id,
        "status": str(traj.status),
        "error": traj.error,
        "total_reward": traj.total_reward,
        "success": traj.success,
        "system_prompt": traj.system_prompt,
        "first_observation": traj.first_observation,
        "per_turn_samples": traj.per_turn_samples,
        "turns": [asdict(t) for t in traj.turns],
        "samples": [asdict(s) for s in traj.samples],
        "metrics": traj.metrics,
    }
    if tokenizer is not None:
        record["texts"] = [tokenizer.decode(s.token_ids) for s in traj.samples]
    return record


def write_step(
    directory: Path, step: int, trajs: Sequence[Trajectory], *, tokenizer: Any | None = None
) -> Path:
    """Write one step's trajectories to `directory/step-NNNNNN.jsonl` (replacing it)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step-{step:06d}.jsonl"
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as f:
        for traj in trajs:
            f.write(json.dumps(trajectory_record(traj, tokenizer), default=str) + "\n")
    tmp.replace(path)
    return path
