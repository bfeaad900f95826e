"""How well can the critic fit a Sokoban policy's returns, given enough rooms?

Plays `--rooms` training rooms (seeds from 700,000) `--group-size` times each and 512 other
rooms twice (seeds from 600,000, held out) with the settings of `agentrl train --env sokoban`
(T=1.0, prompts of the current grid only). Then it trains the critic as `agentrl train`
builds it (`agentrl.train.critic.build_critic`: the policy's backbone and a zero value head)
to regress each turn's return-to-go from the turn's prompt, the plain returns, no bootstrap:
AdamW, `--batch-size` turns a step drawn from every room, cosine lr from `--lr`. It prints
the explained variance `1 - Var(G - V) / Var(G)` on the held-out rooms (and on 2,048 training
turns) `--evals-per-pass` times a pass.

For example, the default warm start (`results/sokoban-rl/warm_start_3cycles`, 1,024 rooms x 8,
37,658 turns). At `--lr 1e-3` (the default until 2026-12-05; two threads, about 20 minutes):
held-out 0.19 after a quarter pass, 0.29 after one pass, 0.30 after 1.25 passes, 0.28 at 1.5
(in sample 0.43: it starts to overfit; the run was stopped there); with 256 rooms x 8 (another
draw of rooms) it peaked at 0.23 and overfit (in sample 0.65 after three passes). On one cached
draw of the same rooms, one thread, one pass, the peak lr decided the fit: 0.25 at 1e-4, 0.32
at 3e-4 (in sample 0.48), 0.24 at 1e-3 (0.24 after 1.5 passes too) and 0.22 at 3e-3 after
three quarters of a pass (`results/sokoban-rl/critic/README.md`), hence the default of 3e-4.

    .venv/bin/python benchmarks/sokoban_critic_fit.py results/sokoban-rl/warm_start_3cycles --threads 2
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

TRAIN_SEED = 700_000
HELD_OUT_SEED = 600_000


def turn_rows(trajectories: Sequence[Any]) -> list[tuple[list[int], float]]:
    """`(prompt ids, return-to-go)` of every turn (one sample per turn: `history_turns: 0`)."""
    rows = []
    for traj in trajectories:
        rewards = [turn.reward for turn in traj.turns]
        for k, sample in enumerate(traj.samples):
            rows.append((sample.token_ids[: sample.loss_mask.index(1)], float(sum(rewards[k:]))))
    return rows


def prompt_values(critic: Any, prompts: Sequence[list[int]]) -> Any:
    """The critic's value at each prompt's last token (the state the turn was sampled in)."""
    import torch

    ids = torch.zeros(len(prompts), max(len(p) for p in prompts), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, : len(p)] = torch.tensor(p)
        mask[i, : len(p)] = 1
    out = critic(input_ids=ids, attention_mask=mask).logits[..., 0]
    return out[torch.arange(len(prompts)), mask.sum(1) - 1]


def explained(
    critic: Any, rows: Sequence[tuple[list[int], float]], mean: float, std: float
) -> float:
    """Explained variance of the returns-to-go of `rows` by the critic's (unscaled) values."""
    import torch

    from agentrl.algos.losses import explained_variance  # the trainer's `critic/explained_var`

    with torch.no_grad():
        pred = torch.cat(
            [
                prompt_values(critic, [r[0] for r in rows[i : i + 256]])
                for i in range(0, len(rows), 256)
            ]
        )
    y = torch.tensor([[r[1] for r in rows]])
    return explained_variance((pred * std + mean).unsqueeze(0), y, torch.ones_like(y))


def main() -> None:
    """Parse flags, play the rooms, train the critic, print its held-out fit."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="A model folder (or alias) trained on `sokoban`.")
    p.add_argument("--rooms", type=int, default=1024, help="Training rooms to play.")
    p.add_argument("--group-size", type=int, default=8, help="Episodes per training room.")
    p.add_argument("--passes", type=float, default=2.0, help="Passes over the training turns.")
    p.add_argument("--batch-size", type=int, default=64, help="Turns per optimizer step.")
    p.add_argument("--lr", type=float, default=3e-4, help="Peak learning rate (cosine to 0).")
    p.add_argument("--evals-per-pass", type=int, default=4, help="Held-out scores per pass.")
    p.add_argument("--threads", type=int, default=1, help="Torch threads.")
    args = p.parse_args()

    import torch
    from sokoban_failures import play  # this folder's failure breakdown plays the same way
    from transformers import AutoModelForCausalLM

    from agentrl.rollout.models import resolve_model
    from agentrl.train.critic import build_critic

    def episodes(first: int, rooms: int, group_size: int) -> list[Any]:
        seeds = [first + i for i in range(rooms)]
        trajs, _ = play(
            args.model, seeds, group_size=group_size, temperature=1.0, threads=args.threads,
            max_new_tokens=16,
        )  # fmt: skip
        return trajs

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    start = time.time()
    train = turn_rows(episodes(TRAIN_SEED, args.rooms, args.group_size))
    held = turn_rows(episodes(HELD_OUT_SEED, 512, 2))
    y = np.array([r[1] for r in train])
    mean, std = float(y.mean()), float(y.std())
    print(
        f"{len(train)} training turns (return-to-go variance {y.var():.2f}), {len(held)} held out;"
    )
    print(f"played in {time.time() - start:.0f} s")
    policy = AutoModelForCausalLM.from_pretrained(resolve_model(args.model), dtype=torch.float32)
    critic = build_critic(policy)
    del policy
    opt = torch.optim.AdamW(critic.parameters(), lr=args.lr, weight_decay=0.0)
    per_pass = len(train) // args.batch_size
    total = int(args.passes * per_pass)
    every = max(1, per_pass // args.evals_per_pass)
    rng = random.Random(0)
    sample = rng.sample(train, min(2048, len(train)))
    order: list[int] = []
    for step in range(1, total + 1):
        if not order:
            order = list(range(len(train)))
            rng.shuffle(order)
        batch = [train[order.pop()] for _ in range(min(args.batch_size, len(order)))]
        for group in opt.param_groups:
            group["lr"] = args.lr * 0.5 * (1 + np.cos(np.pi * (step - 1) / total))
        target = (torch.tensor([b[1] for b in batch]) - mean) / std
        loss = torch.nn.functional.mse_loss(prompt_values(critic, [b[0] for b in batch]), target)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(critic.parameters(), 1.0)
        opt.step()
        if step % every == 0 or step == total:
            print(
                f"pass {step / per_pass:.2f}: explained variance held out "
                f"{explained(critic, held, mean, std):.3f}, in sample "
                f"{explained(critic, sample, mean, std):.3f} ({time.time() - start:.0f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
