"""One step of the Sokoban default's search, with the env's `clone()` against `copy.deepcopy`.

Runs the `expert-iteration` preset's search (greedy play on every room, the beam of 8 on the rooms
it fails, 30% of the greedy solutions kept) from a fixed policy, alternating the two ways of
copying an env mid-episode on the same rooms, and checks that both find the same solutions
with the same scores. Prints the wall time of each round and the median ratio.

    .venv/bin/python benchmarks/search_step.py \\
        --model results/sokoban-rl/warm_start --rounds 3

On 2 threads (2026-12-05, the 88.4% warm start, 1,024 rooms a round, two runs of 2 and 3
rounds): deepcopy 13.0-16.4 s a step, clone 11.2-15.5 s; the median ratio was 1.06x and
1.09-1.16x (the model's forward passes are most of a step).
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import time


def compare(model_dir: str, rooms: int, rounds: int) -> dict[str, list[float]]:
    """Seconds of each round's search, by way of copying; raises where the two differ."""
    from agentrl.envs.base import TokenEnv
    from agentrl.envs.registry import make
    from agentrl.envs.sokoban.env import SokobanEnv
    from agentrl.rollout.models import load_model, load_tokenizer
    from agentrl.rollout.search import timed_search
    from agentrl.trajectory.bridge import ChatBridge

    model = load_model(model_dir)
    bridge = ChatBridge(load_tokenizer(model_dir))
    factory = functools.partial(make, "sokoban", max_turns=10, max_actions_per_turn=1)
    copies = {"deepcopy": TokenEnv.clone, "clone": SokobanEnv.clone}
    times: dict[str, list[float]] = {name: [] for name in copies}
    try:
        for round_ in range(rounds):
            seeds = list(range(500_000 + round_ * rooms, 500_000 + (round_ + 1) * rooms))
            found = {}
            for name, method in copies.items():
                SokobanEnv.clone = method  # type: ignore[method-assign]
                start = time.perf_counter()
                trajs, metrics = timed_search(
                    factory,
                    bridge,
                    model,
                    seeds,
                    beam_width=8,
                    max_depth=10,
                    env_name="sokoban",
                    easy_keep=0.3,
                    rng=random.Random(round_),
                )
                times[name].append(time.perf_counter() - start)
                found[name] = [(t.seed, t.samples, t.reset_info) for t in trajs]
            if found["deepcopy"] != found["clone"]:
                raise RuntimeError(f"round {round_}: the two copies found different solutions")
            print(
                f"round {round_}: deepcopy {times['deepcopy'][-1]:.2f} s, clone "
                f"{times['clone'][-1]:.2f} s; {len(trajs)} solutions, greedy solved "
                f"{metrics['search/greedy_solved_frac']:.3f}, identical",
                flush=True,
            )
    finally:
        SokobanEnv.clone = copies["clone"]  # type: ignore[method-assign]
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="results/sokoban-rl/warm_start")
    parser.add_argument("--rooms", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    times = compare(args.model, args.rooms, args.rounds)
    ratio = statistics.median(d / c for d, c in zip(times["deepcopy"], times["clone"], strict=True))
    print(f"median deepcopy/clone: {ratio:.2f}x over {args.rounds} rounds of {args.rooms} rooms")


if __name__ == "__main__":
    main()
