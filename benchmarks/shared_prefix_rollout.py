"""Rollout time of the HF engine with the prompts' shared prefix prefilled once, against the
full prefill of every prompt, side by side on `agentrl train --env sokoban`'s rollouts.

Each turn's prompt there is the system prompt (125 ids) and the current grid: the engine runs
most of its time in prefill, and most of a prefill is the system prompt again. With
`HFEngine(min_shared_prefix=16)` (the default) the rows prefilled together run their common
prefix once and share its keys and values; `min_shared_prefix=0` turns that off.

Each round plays `--groups` x 8 episodes from the policy `--model` (default: the committed
default warm start) at temperature 1, one action a turn, current grid only, with each
variant in turn on the same seeds. The sampling is seeded per request and the logits differ
only by float rounding, so the episodes' sampled ids agree between the variants except where
rounding moves a draw across a boundary (1 episode of 320 in the run below). The table gives
each variant's median wall time per rollout and the ratio. Measured (one thread, another job
on the second core): 2.55 s against 1.16 s for 64 episodes, 2.19x.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/shared_prefix_rollout.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]


def play(engine: object, tokenizer: object, seeds: list[int]) -> tuple[float, list[list[int]]]:
    """One rollout of 8 episodes per seed; its wall time and every episode's sampled ids."""
    from agentrl.envs import make
    from agentrl.rollout.config import RolloutConfig, SamplingConfig
    from agentrl.rollout.loop import rollout

    sampling = SamplingConfig(temperature=1.0, max_new_tokens=16)
    start = time.perf_counter()
    result = rollout(
        engine,
        functools.partial(make, "sokoban", max_turns=10),
        tokenizer,
        seeds,
        group_size=8,
        cfg=RolloutConfig(max_turns=10, history_turns=0, max_context_tokens=2048),
        sampling=sampling.to_params(seed=0),
        env_name="sokoban",
    )
    wall = time.perf_counter() - start
    ids = [
        [i for s in t.samples for i, m in zip(s.token_ids, s.loss_mask, strict=True) if m]
        for t in result.trajectories
    ]
    return wall, ids


def main() -> None:
    """Time both variants alternately; print the medians, the ratio and the agreement."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(ROOT / "results" / "sokoban-rl" / "warm_start"))
    p.add_argument("--groups", type=int, default=8, help="Rooms per rollout (8 episodes each).")
    p.add_argument("--rounds", type=int, default=5, help="Timed rollouts per variant.")
    p.add_argument("--threads", type=int, default=1, help="Torch threads.")
    args = p.parse_args()

    import torch

    from agentrl.rollout.engines import SeededEngine
    from agentrl.rollout.hf_engine import HFEngine
    from agentrl.rollout.models import load_model, load_tokenizer

    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer(args.model)
    model = load_model(args.model, dtype="float32")
    variants = {"full prefill": 0, "shared prefix": 16}
    engines = {
        name: SeededEngine(HFEngine(model, max_batch_size=64, min_shared_prefix=k))
        for name, k in variants.items()
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    agree = total = 0
    try:
        for r in range(args.rounds + 1):  # round 0 warms up
            seeds = list(range(500_000 + r * args.groups, 500_000 + (r + 1) * args.groups))
            outputs = {}
            for name, engine in engines.items():
                wall, outputs[name] = play(engine, tokenizer, seeds)
                if r:
                    times[name].append(wall)
            pairs = zip(outputs["full prefill"], outputs["shared prefix"], strict=True)
            agree += sum(a == b for a, b in pairs)
            total += len(outputs["full prefill"])
            if r:
                done = ", ".join(f"{n} {t[-1]:.2f} s" for n, t in times.items())
                print(f"round {r}: {done}", flush=True)
    finally:
        for engine in engines.values():
            engine.close()
    saved = engines["shared prefix"].inner.stats["shared_prefix_ids"]
    full, shared = (statistics.median(times[n]) for n in variants)
    print(f"\n{args.groups * 8} episodes a rollout, {args.rounds} rounds, median wall per rollout:")
    print("| variant | s a rollout |")
    print("|---|---|")
    print(f"| full prefill | {full:.2f} |")
    print(f"| shared prefix | {shared:.2f} |")
    print(f"speed-up: {full / shared:.2f}x; prompt ids not prefilled again: {saved:,}")
    print(f"episodes with the same sampled ids in both variants: {agree} of {total}")


if __name__ == "__main__":
    main()
