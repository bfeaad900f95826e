"""Why does a Sokoban policy fail? The first fatal move of every failed validation episode.

Plays the validation seeds (from 1,000,000, one episode each, as `agentrl eval`) with the
settings of `agentrl train --env sokoban` (10 actions, one per turn, prompts of the current
grid only), then replays each failed episode and, after every
move, asks the exact solver whether the room can still be solved within the actions left. The
first move after which it cannot is the episode's fatal move, of one of three kinds:

- `blocked`: a move into a wall or an unpushable box (the grid does not change, an action is
  lost);
- `deadlock`: a push after which the room has no solution at all (a box in a corner);
- `detour`: a legal move after which the solution no longer fits the actions left.

It also prints success by the room's optimal solution length. For example, the default warm
start (`results/sokoban-default/runs/warm_start`, 1,024 seeds, T=0.5): 93 of 151 failures
begin with a blocked move, and 98 are rooms of 7 or more moves.

    .venv/bin/python benchmarks/sokoban_failures.py results/sokoban-default/runs/warm_start
"""

from __future__ import annotations

import argparse
import collections
import functools
from typing import Any

SEED_OFFSET = 1_000_000


def fatal_move(env: Any, trajectory: Any) -> tuple[str, int] | None:
    """Replay `trajectory` in `env` (reset to its seed): `(kind, turn)` of its first fatal
    move, or None when the room stayed solvable within budget to the end."""
    from agentrl.envs.sokoban.solver import solve

    env.reset(seed=trajectory.seed)
    for turn_index, turn in enumerate(trajectory.turns):
        _, _, terminated, truncated, info = env.step(turn.action_text)
        room = env.room
        solution = [] if room.is_solved() else solve(room)
        if solution is None:
            return "deadlock", turn_index
        if len(solution) > env._actions_left:
            return ("blocked" if info.get("blocked") else "detour"), turn_index
        if terminated or truncated:
            break
    return None


def play(
    model: str,
    seeds: list[int],
    *,
    group_size: int,
    temperature: float,
    threads: int,
    max_new_tokens: int = 24,
) -> tuple[list[Any], Any]:
    """Play `seeds` (`group_size` episodes each) with `model` under the settings of
    `agentrl train --env sokoban` (its env kwargs, `history_turns`, context); the finished
    trajectories and the env factory."""
    import torch

    from agentrl.config import TrainConfig
    from agentrl.envs import make
    from agentrl.rollout.config import RolloutConfig, SamplingConfig
    from agentrl.rollout.loop import rollout
    from agentrl.rollout.models import load_tokenizer, resolve_model
    from agentrl.train._cli import resolve_train_config
    from agentrl.train.engines import SeededEngine, build_engine

    torch.set_num_threads(threads)
    cfg = resolve_train_config(
        config_file=None, overrides=[], preset=None, flags={"env.name": "sokoban"}
    )
    factory = functools.partial(make, "sokoban", **cfg.env.kwargs)
    path = resolve_model(model)
    engine = SeededEngine(build_engine(TrainConfig(), path))
    try:
        result = rollout(
            engine,
            factory,
            load_tokenizer(str(path)),
            seeds,
            group_size=group_size,
            cfg=RolloutConfig(
                history_turns=cfg.rollout.history_turns,
                max_context_tokens=cfg.rollout.max_context_tokens,
            ),
            sampling=SamplingConfig(
                temperature=temperature, max_new_tokens=max_new_tokens, seed=0
            ).to_params(),
            env_name="sokoban",
        )
    finally:
        engine.close()
    return result.trajectories, factory


def main() -> None:
    """Parse flags, play the seeds, print the breakdown."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="A model folder (or alias) trained on `sokoban`.")
    p.add_argument("--episodes", type=int, default=1024, help="Validation seeds to play.")
    p.add_argument("--temperature", type=float, default=0.5, help="Sampling temperature.")
    p.add_argument("--threads", type=int, default=2, help="Torch threads.")
    args = p.parse_args()
    trajs, factory = play(
        args.model,
        [SEED_OFFSET + i for i in range(args.episodes)],
        group_size=1,
        temperature=args.temperature,
        threads=args.threads,
    )
    kinds: collections.Counter[str] = collections.Counter()
    by_length: dict[int, list[bool]] = collections.defaultdict(list)
    env = factory()
    for t in trajs:
        by_length[int(t.reset_info["optimal_len"])].append(t.success)
        if not t.success:
            found = fatal_move(env, t)
            kinds[found[0] if found else "none (solvable to the end)"] += 1
    failures = sum(kinds.values())
    print(f"{args.model}: {len(trajs) - failures}/{len(trajs)} solved at T={args.temperature}")
    print(f"first fatal move of the {failures} failures:")
    for kind, count in kinds.most_common():
        print(f"  {kind:28s} {count:5d}  ({count / max(failures, 1):.0%})")
    print("success by optimal solution length:")
    for length, wins in sorted(by_length.items()):
        print(f"  {length:2d} moves: {sum(wins) / len(wins):6.1%} of {len(wins)}")


if __name__ == "__main__":
    main()
