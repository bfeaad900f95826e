"""Are the `policy-iteration` preset's labels right? Score them against the Sokoban solver.

Runs the preset's rollouts (episodes at the rollout temperature, every answer tried at up to
`trainer.branch_states` of their states, each played on greedily) from a fixed policy, with no
update, and labels each state as the trainer would (`state-best`: the answers with the best
return-to-go where the answers returned differently). For every labelled state the solver
then says whether the room could still be solved in the actions left, whether each labelled
answer keeps it solvable in budget (feasible), and whether it is a move of a shortest solution
(optimal). It also counts how often the label is the answer the greedy policy gives there.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/policy_iteration_labels.py \\
        --model results/sokoban-rl/weak-start-45/start --steps 3

Prints one table row per kind of labelled state; `--set key=value` changes the run config
(e.g. `--set trainer.branch_states=512`).
"""

from __future__ import annotations

import argparse
import collections
import functools
import tempfile
from typing import Any


def _after(env_factory: Any, seed: int, answers: list[str]) -> tuple[Any, bool]:
    """A fresh env after `answers` from `reset(seed)`, and whether the last one ended it."""
    env = env_factory()
    env.reset(seed=seed)
    terminated = False
    for a in answers:
        terminated = bool(env.step(a)[2])
    return env, terminated


def label_table(model: str, steps: int, overrides: list[str]) -> dict[str, Any]:
    """Label the states of `steps` rollouts of `model` and score the labels with the solver."""
    from agentrl.algos.presets import load_preset
    from agentrl.config import load_config
    from agentrl.envs import make
    from agentrl.envs.sokoban.solver import solve
    from agentrl.rollout.engine import GenerationRequest, generate_sync
    from agentrl.train import branch
    from agentrl.train.batch import to_batch
    from agentrl.train.trainer import Trainer

    limit = 10
    env_factory = functools.partial(make, "sokoban", max_turns=limit, max_actions_per_turn=1)
    cfg = load_config(
        overrides=[
            "env.name=sokoban", f"env.max_turns={limit}", "env.kwargs.max_actions_per_turn=1",
            f"model.name={model}", "rollout.group_size=1", f"rollout.max_turns={limit}",
            "rollout.history_turns=0", "rollout.sampling.max_new_tokens=16",
            "rollout.sampling.temperature=1.0", "trainer.num_groups=64", "checkpoint.every=0",
            "logging.progress=false", "logging.tensorboard=false", "logging.save_trajectories=0",
            *overrides,
        ],
        base=load_preset("policy-iteration"),
    )  # fmt: skip
    counts: collections.Counter[tuple[str, ...]] = collections.Counter()
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(cfg, run_dir)
        try:
            for step in range(1, steps + 1):
                trajs = [
                    t
                    for t in trainer.rollout(step).trajectories
                    if branch.is_branch(t) and t.status.trainable
                ]
                batch = to_batch(trajs, pad_id=trainer.pad_id)
                trainer.advantages(batch)
                labels: dict[int, set[str]] = collections.defaultdict(set)
                where: dict[int, tuple[int, list[str], list[int]]] = {}
                for r in range(batch.num_rows):
                    m = batch.loss_mask[r].bool()
                    if not (batch.advantages[r][m] > 0).any():
                        continue
                    traj = trajs[int(batch.traj_ids[r])]
                    k = int(batch.turn_ids[r][m][0])
                    state = int(batch.turn_states[r, k])
                    info = traj.reset_info[branch.BRANCH_KEY]
                    before = info["prefix"] + [t.action_text for t in traj.turns[:k]]
                    labels[state].add(traj.turns[k].action_text)
                    prompt = batch.input_ids[r][: int(m.nonzero()[0])].tolist()
                    where[state] = (traj.seed, before, prompt)
                greedy = trainer.sampling(step, temperature=0.0)
                requests = [GenerationRequest(where[s][2], greedy) for s in labels]
                outs = generate_sync(trainer.engine, requests) if requests else []
                for state, out in zip(labels, outs, strict=True):
                    seed, before, _ = where[state]
                    env, _ = _after(env_factory, seed, before)
                    left = limit - len(before)
                    solution = solve(env.room)
                    solvable = solution is not None and len(solution) <= left
                    feasible, optimal = set(), set()
                    for answer in env.candidate_answers():
                        nxt, solved = _after(env_factory, seed, [*before, answer])
                        rest = None if solved else solve(nxt.room)
                        if solved or (rest is not None and len(rest) <= left - 1):
                            feasible.add(answer)
                        if solution and (
                            solved or (rest is not None and len(rest) == len(solution) - 1)
                        ):
                            optimal.add(answer)
                    greedy_text = trainer.tokenizer.decode(out.token_ids, skip_special_tokens=True)
                    counts[
                        (
                            "solvable" if solvable else "lost",
                            "feasible" if labels[state] <= feasible else "not feasible",
                            "optimal" if labels[state] <= optimal else "not optimal",
                            "= greedy" if greedy_text.strip() in labels[state] else "!= greedy",
                        )
                    ] += 1
        finally:
            trainer.close()
    total = sum(counts.values())
    return {"total": total, "rows": sorted(counts.items(), key=lambda kv: -kv[1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="Policy model folder (or tiny).")
    parser.add_argument("--steps", type=int, default=3, help="Rollout steps to label.")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="Run config override key=value (repeatable).")  # fmt: skip
    args = parser.parse_args()
    table = label_table(args.model, args.steps, args.overrides)
    print(f"{table['total']} labelled states from {args.steps} steps of {args.model}")
    print("| room state | labels | shortest-path move | vs greedy answer | states | share |")
    print("|---|---|---|---|---|---|")
    for key, n in table["rows"]:
        print(f"| {' | '.join(key)} | {n} | {n / max(table['total'], 1):.1%} |")


if __name__ == "__main__":
    main()
