"""Time of the critic's forward and backward on Sokoban's per-turn rows: the shared-prefix
forward (the system prompt run once per micro-batch) against the plain one, side by side.

Rows as `agentrl train --env sokoban` trains them: one row per turn (`history_turns: 0`),
each the system prompt, the current grid and the answer, from the solver's episodes. The
critic is a value head on the `tiny` model's trunk (`build_critic`); each timed pass is one
forward and backward of a value loss over every micro-batch of 64 rows, the two variants
alternating, and the medians are over `--rounds` passes each (the first of each skipped).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/critic_step_time.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> None:
    """Build the rows, time both variants alternately, print the medians and the ratio."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=64, help="Solver episodes (rows: their turns).")
    p.add_argument("--rounds", type=int, default=5, help="Timed passes per variant.")
    p.add_argument("--threads", type=int, default=1, help="Torch threads.")
    args = p.parse_args()

    import torch

    from agentrl.envs import make
    from agentrl.rollout.models import load_model, load_tokenizer, resolve_model
    from agentrl.runtime.batch import micro_batches, to_batch
    from agentrl.sft.data import expert_trajectories
    from agentrl.sft.expert import solver_expert
    from agentrl.train.critic import build_critic, token_values, value_head
    from agentrl.train.learner import trained_positions

    torch.set_num_threads(args.threads)
    path = str(resolve_model("tiny"))
    tokenizer = load_tokenizer(path)
    trajs = expert_trajectories(
        functools.partial(make, "sokoban", max_turns=10),
        tokenizer,
        range(args.episodes),
        solver_expert,
        max_actions_per_turn=1,
        history_turns=0,
        env_name="sokoban",
    )
    batch = to_batch(trajs, pad_id=tokenizer.pad_token_id)
    micros = [m for m in micro_batches(batch, 64 * batch.input_ids.shape[1]) if m.loss_mask.any()]
    critic = build_critic(load_model(path, dtype="float32"))
    torch.nn.init.normal_(value_head(critic).weight, std=0.02)

    def one_pass(shared: bool) -> float:
        start = time.perf_counter()
        for m in micros:
            first = int(trained_positions(m.loss_mask)[0]) if shared else None
            values = token_values(critic, m.input_ids, m.attention_mask, first_position=first)
            (values.square() * m.loss_mask).sum().backward()
        critic.zero_grad()
        return time.perf_counter() - start

    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.rounds + 1):
        for shared in (False, True):
            times[shared].append(one_pass(shared))
    plain, shared = (statistics.median(times[k][1:]) for k in (False, True))
    print(
        f"{batch.input_ids.shape[0]} rows of up to {batch.input_ids.shape[1]} ids, "
        f"{len(micros)} micro-batches, {args.threads} thread(s)"
    )
    print(f"plain forward + backward:         {plain:.3f} s")
    print(f"shared-prefix forward + backward: {shared:.3f} s")
    print(f"speed-up: {plain / shared:.2f}x")


if __name__ == "__main__":
    main()
