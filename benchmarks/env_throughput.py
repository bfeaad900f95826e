"""Sokoban throughput on one core: resets/s and steps/s, text render included.

Run: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/env_throughput.py [--seconds 2]`.
Targets for 6x6 / 1 box: >= 2,000 resets/s and >= 20,000 steps/s.

`--compare-ragen` also sets our 6x6/1-box generator beside RAGEN's 512 reference rooms:
optimal-length histogram, and the success rate of a uniform random policy (one action per
turn, 10-action budget) and of the solver within the budget.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

SETTINGS = {
    "6x6 / 1 box": "sokoban",
    "8x8 / 2 boxes": "sokoban-8x8-2box",
}


def bench(name: str, seconds: float) -> tuple[float, float]:
    """(resets/s, steps/s) for the registered env `name`, each measured for `seconds`."""
    import numpy as np

    from agentrl.envs import make

    env = make(name)
    n, seed, start = 0, 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(50):
            env.reset(seed=seed)
            seed += 1
        n += 50
    resets_per_s = n / (time.perf_counter() - start)

    # One action per step (the env's hardest case per action): observation text every step.
    rng = np.random.default_rng(0)
    actions = [f"<answer>{a}</answer>" for a in rng.choice(["Up", "Down", "Left", "Right"], 4096)]
    env.reset(seed=0)
    steps, k, reset_time, start = 0, 0, 0.0, time.perf_counter()
    while time.perf_counter() - start < seconds + reset_time:
        for _ in range(200):
            _, _, terminated, truncated, _ = env.step(actions[k % 4096])
            k += 1
            if terminated or truncated:  # time the reset apart: it is not a step
                t0 = time.perf_counter()
                env.reset(seed=k)
                reset_time += time.perf_counter() - t0
        steps += 200
    steps_per_s = steps / (time.perf_counter() - start - reset_time)
    return resets_per_s, steps_per_s


def random_policy_success(env_name: str, seeds: range, **kwargs: object) -> float:
    """Fraction of `seeds` a uniform random policy solves, one action per turn, 10 actions."""
    import numpy as np

    from agentrl.envs import make

    env = make(env_name, max_actions=10, max_turns=10, **kwargs)
    rng = np.random.default_rng(12345)
    moves = [
        "<answer>Up</answer>",
        "<answer>Down</answer>",
        "<answer>Left</answer>",
        "<answer>Right</answer>",
    ]
    wins = 0
    for seed in seeds:
        env.reset(seed=seed)
        while True:
            *_, terminated, truncated, info = env.step(moves[int(rng.integers(4))])
            if terminated or truncated:
                wins += info["success"]
                break
    return wins / len(seeds)


def compare_ragen(num_rooms: int = 2000) -> None:
    """Print optimal-length histograms and policy success rates, ours vs RAGEN's rooms."""
    from collections import Counter

    from agentrl.envs import make
    from agentrl.envs.sokoban import load_rooms

    ragen = Counter(optimal for _, _, optimal in load_rooms("ragen", "6x6_1box"))
    env = make("sokoban")
    ours = Counter(env.reset(seed=seed)[1]["optimal_len"] for seed in range(num_rooms))
    n_ragen, n_ours = sum(ragen.values()), sum(ours.values())
    print("optimal solution length, 6x6 / 1 box: share of rooms (RAGEN | ours)")
    for length in range(1, max(max(ragen), max(ours)) + 1):
        print(f"  {length:2d}: {ragen[length] / n_ragen:6.1%} | {ours[length] / n_ours:6.1%}")
    for name, counts in (("RAGEN", ragen), ("ours", ours)):
        items = sorted(counts.elements())
        within = sum(v for k, v in counts.items() if k <= 10) / len(items)
        print(
            f"{name:5s}: median {items[len(items) // 2]}, mean {sum(items) / len(items):.2f}, "
            f"solver solves {within:.1%} within 10 actions"
        )
    ragen_rand = random_policy_success("sokoban-ragen-6x6", range(512))
    ours_rand = random_policy_success("sokoban", range(num_rooms))
    print(f"uniform random policy, 10 actions: RAGEN rooms {ragen_rand:.1%}, ours {ours_rand:.1%}")


def main() -> None:
    """Print resets/s and steps/s for each setting."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    parser.add_argument("--compare-ragen", action="store_true", help="also compare with RAGEN")
    args = parser.parse_args()
    if args.compare_ragen:
        compare_ragen()
    for label, name in SETTINGS.items():
        resets, steps = bench(name, args.seconds)
        print(f"{label:14s} ({name}): {resets:9,.0f} resets/s  {steps:9,.0f} steps/s")


if __name__ == "__main__":
    main()
