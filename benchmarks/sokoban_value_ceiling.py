"""How much of a Sokoban policy's per-turn return could a critic explain?

Plays `--rooms` training rooms (seeds from 500,000, as RL draws them) `--group-size` times each
with the settings of `agentrl train --env sokoban` (10 actions, one per turn, prompts of the
current grid only, T=1.0 as in training rollouts). For every turn it takes the return-to-go
(the sum of that turn's and later rewards) and prints the explained variance
`1 - Var(G - V) / Var(G)` of several value estimates V:

- `state mean, leave-one-out`: the mean return-to-go of the *other* visits of the same state
  (grid and actions left): the baseline of the `state-rloo` preset, held out by construction,
  over the turns whose state has another visit;
- tables fit on the even seeds and scored on the odd ones, keyed by (the solver's distance to
  solved, actions left), by (the room's optimal length, turn), and by actions left alone.

A learned critic is scored the same way in training (`critic/explained_var`); these numbers
say what it could reach. For example, the default warm start
(`results/sokoban-rl/warm_start_3cycles`, 256 rooms x 8, about 5 minutes on one core): 84% for the
state mean, 74% for (distance, actions left), 20% for actions left alone.

    .venv/bin/python benchmarks/sokoban_value_ceiling.py results/sokoban-rl/warm_start_3cycles
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

FIRST_SEED = 500_000


def turn_rows(env: Any, trajectories: Sequence[Any]) -> list[dict[str, Any]]:
    """One row per turn: seed, state key, solver distance, actions left, turn, the room's
    optimal length and the return-to-go, found by replaying each episode in `env`."""
    from agentrl.envs.sokoban.solver import solve

    rows = []
    for traj in trajectories:
        env.reset(seed=traj.seed)
        rewards = [turn.reward for turn in traj.turns]
        for k, turn in enumerate(traj.turns):
            room = env.room
            solution = [] if room.is_solved() else solve(room)
            left = env._actions_left
            rows.append(
                {
                    "seed": traj.seed,
                    "state": (env.render(), left),
                    "distance": len(solution) if solution is not None else -1,
                    "left": left,
                    "turn": k,
                    "optimal": int(traj.reset_info["optimal_len"]),
                    "to_go": float(sum(rewards[k:])),
                }
            )
            env.step(turn.action_text)
    return rows


def explained(target: np.ndarray, pred: np.ndarray) -> float:
    """`1 - Var(target - pred) / Var(target)`.

    >>> explained(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0]))
    1.0
    >>> explained(np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 2.0]))
    0.0
    """
    return float(1.0 - np.var(target - pred) / np.var(target))


def state_mean_loo(rows: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """(explained variance, share of turns scored) of the leave-one-out state mean."""
    y = np.array([r["to_go"] for r in rows])
    visits: dict[Any, list[int]] = collections.defaultdict(list)
    for i, r in enumerate(rows):
        visits[r["state"]].append(i)
    pred = np.full_like(y, np.nan)
    for idx in visits.values():
        if len(idx) > 1:
            total = y[idx].sum()
            pred[idx] = (total - y[idx]) / (len(idx) - 1)
    scored = ~np.isnan(pred)
    return explained(y[scored], pred[scored]), float(scored.mean())


def held_out_table(rows: Sequence[dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> float:
    """Explained variance on the odd seeds of a mean-per-key table fit on the even seeds."""
    fit: dict[Any, list[float]] = collections.defaultdict(list)
    for r in rows:
        if r["seed"] % 2 == 0:
            fit[key(r)].append(r["to_go"])
    means = {k: float(np.mean(v)) for k, v in fit.items()}
    overall = float(np.mean([r["to_go"] for r in rows if r["seed"] % 2 == 0]))
    test = [r for r in rows if r["seed"] % 2 == 1]
    y = np.array([r["to_go"] for r in test])
    return explained(y, np.array([means.get(key(r), overall) for r in test]))


def main() -> None:
    """Parse flags, play the rooms, print the explained variances."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="A model folder (or alias) trained on `sokoban`.")
    p.add_argument("--rooms", type=int, default=256, help="Training rooms to play.")
    p.add_argument("--group-size", type=int, default=8, help="Episodes per room.")
    p.add_argument("--temperature", type=float, default=1.0, help="Sampling temperature.")
    p.add_argument("--threads", type=int, default=1, help="Torch threads.")
    args = p.parse_args()

    from sokoban_failures import play  # this folder's failure breakdown plays the same way

    trajs, factory = play(
        args.model,
        [FIRST_SEED + i for i in range(args.rooms)],
        group_size=args.group_size,
        temperature=args.temperature,
        threads=args.threads,
        max_new_tokens=16,
    )
    rows = turn_rows(factory(), trajs)
    y = np.array([r["to_go"] for r in rows])
    success = np.mean([t.success for t in trajs])
    print(f"{args.model}: {len(trajs)} episodes at T={args.temperature}, success {success:.1%}")
    print(f"{len(rows)} turns; return-to-go mean {y.mean():.2f}, variance {y.var():.2f}")
    print("explained variance of the return-to-go:")
    ev, share = state_mean_loo(rows)
    print(f"  state mean, leave-one-out ({share:.0%} of turns)      {ev:6.3f}")
    tables = {
        "table (solver distance, actions left)": lambda r: (r["distance"], r["left"]),
        "table (room's optimal length, turn)": lambda r: (r["optimal"], r["turn"]),
        "table (actions left)": lambda r: r["left"],
    }
    for name, key in tables.items():
        print(f"  {name:44s} {held_out_table(rows, key):6.3f}  (odd seeds)")


if __name__ == "__main__":
    main()
