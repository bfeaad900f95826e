"""Writing trajectory files: time and size, JSONL vs Parquet, and the old dict conversion.

Run: `.venv/bin/python benchmarks/trajectory_io.py [--episodes 2048]`.

The episodes are the Sokoban solver's, in the warm start's format (one sample per turn,
`tiny`'s tokenizer), so the numbers are those of `agentrl sft`'s and the warm start's
`expert_trajectories.parquet`. The baseline conversion is the one `trajectory_to_dict` used
before (a deep `dataclasses.asdict`, then `_jsonable` over every element), measured
alternately with the current one in the same process.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch

    from agentrl.envs import make
    from agentrl.rollout.models import load_tokenizer, resolve_model
    from agentrl.sft.data import expert_trajectories
    from agentrl.sft.expert import get_expert
    from agentrl.trajectory import io

    torch.set_num_threads(1)
    tokenizer = load_tokenizer(str(resolve_model("tiny")))
    trajs = expert_trajectories(
        functools.partial(make, "sokoban"),
        tokenizer,
        range(args.episodes),
        get_expert("solver"),
        max_actions_per_turn=1,
        max_context_tokens=2048,
        env_name="sokoban",
        history_turns=0,
    )

    def baseline(traj: object) -> dict:
        out = asdict(traj)  # type: ignore[call-overload]
        out["status"] = str(traj.status)  # type: ignore[attr-defined]
        return io._jsonable(out)

    times: dict[str, float] = {"baseline": 0.0, "current": 0.0}
    for _ in range(args.repeats):  # alternated, so machine noise hits both alike
        for name, convert in (("baseline", baseline), ("current", io.trajectory_to_dict)):
            start = time.perf_counter()
            rows = [convert(t) for t in trajs]
            times[name] += time.perf_counter() - start
    assert rows == [baseline(t) for t in trajs], "the conversions disagree"
    per_1k = {k: 1000 * v / args.repeats / len(trajs) for k, v in times.items()}
    print(f"{len(trajs)} solver episodes, {sum(len(t.samples) for t in trajs)} samples")
    print(
        f"to dict, s per 1,000 episodes: asdict baseline {per_1k['baseline']:.3f}, "
        f"current {per_1k['current']:.3f} ({per_1k['baseline'] / per_1k['current']:.1f}x faster)"
    )

    with tempfile.TemporaryDirectory() as tmp:
        sizes = {}
        for suffix in ("jsonl", "parquet"):
            path = Path(tmp) / f"expert.{suffix}"
            start = time.perf_counter()
            io.write_trajectories(path, trajs)
            wrote = time.perf_counter() - start
            start = time.perf_counter()
            back = io.read_trajectories(path).trajectories
            read = time.perf_counter() - start
            assert back == trajs, f"{suffix} did not round-trip"
            sizes[suffix] = os.path.getsize(path)
            print(
                f"{suffix:8s} {sizes[suffix] / 1e6:8.2f} MB  write {wrote:.2f} s  read {read:.2f} s"
                f"  ({sizes[suffix] / len(trajs) / 1e3:.2f} kB per episode)"
            )
        print(f"parquet is {sizes['jsonl'] / sizes['parquet']:.0f}x smaller than jsonl")


if __name__ == "__main__":
    main()
