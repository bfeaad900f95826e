"""All-action branches: credit for the moves a near-deterministic policy never tries.

`state-rloo` credits a move against the batch's other visits of the same state. Where the
policy is confidently wrong (a Sokoban move into a wall it misreads), every episode makes the
same move there, no visit did otherwise, and the move gets no credit. A branch replays a base
episode up to one of its states, plays another of the env's candidate answers there
(`TokenEnv.candidate_answers`) and lets the policy play on: each answer tried in that state
then has a Monte-Carlo return from it, and `state-rloo` credits each against the others.

The forced answers were not sampled. Their rows carry the policy's own logprob as their
sampler logprob (importance weight 1), so over a state's answers the update is the
all-action form `sum_a (G(s, a) - baseline) * grad log pi(a | s)`, every answer weighted
alike rather than by its probability: an answer the policy gives 1% that solves the room is
pushed up as hard as one it gives 99%. The branch's later turns are ordinary samples.

Needs a Markov prompt (`rollout.history_turns: 0`: the prompt is the state, so a branch's
later prompts are the ones the policy would have seen) and an env whose `reset(seed)` and
steps are deterministic (replays are checked against the base episode's observations).

    branches, skipped = choose_branches(trajs, env_factory, max_states=64, rng=rng)
    going = [b for b in branches if continues(b, limit)]
    continuations = rollout(engine, branch_env_factory(env_factory, trajs, going, limit),
                            tokenizer, list(range(len(going))), group_size=1).trajectories
    extra = [branch_trajectory(trajs[b.base], b, next_continuation_or_None, bridge,
                               turn_limit=limit) for b in branches]

`Trainer.with_branches` does this each step; `Trainer._fill_forced_logp` then gives the forced
answers their logprobs.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.envs.base import Observation, TokenEnv
from agentrl.runtime.batch import turn_prompts, turn_state_ids
from agentrl.sft.data import expert_ids
from agentrl.trajectory.bridge import ChatBridge
from agentrl.trajectory.types import Sample, Status, Trajectory, Turn

BRANCH_KEY = "branch"
"""`Trajectory.reset_info` key of a branch: `{"turn": t, "answer": text, "prefix": [...]}` (the
base episode's turn it branched at, the forced answer, and the base episode's answers before
that turn: `reset(seed)` then these answers replays the branch's first state)."""


def is_branch(traj: Trajectory) -> bool:
    """Whether `traj` is a branch (its first answer was forced), not a sampled episode."""
    return BRANCH_KEY in traj.reset_info


@dataclass(frozen=True)
class Branch:
    """One forced answer in one state of a base episode, and what the env answered."""

    base: int
    """Index of the base trajectory."""
    turn: int
    """The state is the one before the base episode's turn `turn`."""
    answer: str
    """The forced answer text."""
    reward: float = 0.0
    observation: Observation = ""
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)


def replay(
    env_factory: Callable[[], TokenEnv], traj: Trajectory, turn: int
) -> tuple[TokenEnv, Observation]:
    """A new env in the state before `traj`'s turn `turn` (reset with its seed, then its first
    `turn` answers), and the observation that state showed."""
    env = env_factory()
    observation, _ = env.reset(seed=traj.seed)
    for t in traj.turns[:turn]:
        observation = env.step(t.action_text)[0]
    return env, observation


def _observation_before(traj: Trajectory, turn: int) -> Observation:
    return traj.first_observation if turn == 0 else traj.turns[turn - 1].observation


def choose_branches(
    trajs: Sequence[Trajectory],
    env_factory: Callable[[], TokenEnv],
    *,
    max_states: int,
    rng: random.Random,
    failed_first: bool = False,
    all_answers: bool = False,
) -> tuple[list[Branch], int]:
    """Up to `max_states` distinct states visited by `trajs` (drawn with `rng`), and at each
    a `Branch` for every candidate answer that no visit of the state gave (with
    `all_answers`, for every candidate answer). With `failed_first`, states that an episode
    which failed passed through are drawn first.

    Returns the branches and the number of drawn states skipped because the replay did not
    reproduce the base episode's observation (a nondeterministic env).
    """
    first_visit: dict[int, tuple[int, int]] = {}
    answered: dict[int, set[str]] = {}
    on_failed_path: set[int] = set()
    for i, traj in enumerate(trajs):
        if not traj.status.trainable or is_branch(traj):
            continue
        for t, sid in enumerate(turn_state_ids(traj, traj.num_turns)):
            if sid < 0:
                continue
            first_visit.setdefault(sid, (i, t))
            answered.setdefault(sid, set()).add(traj.turns[t].action_text)
            if not traj.success:
                on_failed_path.add(sid)
    states = sorted(first_visit)
    rng.shuffle(states)
    if failed_first:
        states.sort(key=lambda sid: sid not in on_failed_path)  # stable: shuffled within
    branches: list[Branch] = []
    skipped = 0
    for sid in states[:max_states]:
        i, t = first_visit[sid]
        env, observation = replay(env_factory, trajs[i], t)
        try:
            if observation != _observation_before(trajs[i], t):
                skipped += 1
                continue
            answers = [a for a in env.candidate_answers() if all_answers or a not in answered[sid]]
        finally:
            env.close()
        for answer in answers:
            fork, _ = replay(env_factory, trajs[i], t)
            try:
                obs, reward, terminated, truncated, info = fork.step(answer)
            finally:
                fork.close()
            branches.append(
                Branch(i, t, answer, float(reward), obs, bool(terminated), bool(truncated), info)
            )
    return branches, skipped


class BranchEnv(TokenEnv):
    """The env of a branch's continuation: `reset(seed=k)` replays branch `k`'s base episode,
    plays its forced answer and shows the state after it; the episode ends where the base
    episode's turn limit would have ended it.

    `specs[k]` is `(env seed, base answers before the state, forced answer, state's turn)`.
    """

    def __init__(
        self,
        env_factory: Callable[[], TokenEnv],
        specs: Sequence[tuple[int, tuple[str, ...], str, int]],
        turn_limit: int,
    ) -> None:
        super().__init__()
        self.inner = env_factory()
        self.system_prompt = self.inner.system_prompt  # type: ignore[misc]
        self.max_turns = turn_limit  # type: ignore[misc]
        self.specs = specs
        self.turn_limit = turn_limit
        self._turns_left = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Replay branch `seed` up to the state after its forced answer."""
        super().reset(seed=seed)
        env_seed, prefix, answer, turn = self.specs[int(seed or 0)]
        self.inner.reset(seed=env_seed)
        for text in prefix:
            self.inner.step(text)
        observation, _, terminated, truncated, _ = self.inner.step(answer)
        if terminated or truncated:
            raise ValueError(f"branch {seed}: the forced answer ended the episode")
        self._turns_left = self.turn_limit - turn - 1
        return observation, {}

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """The inner env's step; truncated once the base episode's turns are spent."""
        self.require_reset()
        observation, reward, terminated, truncated, info = self.inner.step(action)
        self._turns_left -= 1
        return observation, reward, terminated, truncated or self._turns_left <= 0, info

    def close(self) -> None:
        self.inner.close()


def branch_specs(
    trajs: Sequence[Trajectory], branches: Sequence[Branch]
) -> list[tuple[int, tuple[str, ...], str, int]]:
    """`BranchEnv` specs of `branches` (picklable, for env worker processes)."""
    return [
        (
            trajs[b.base].seed,
            tuple(t.action_text for t in trajs[b.base].turns[: b.turn]),
            b.answer,
            b.turn,
        )
        for b in branches
    ]


def continues(branch: Branch, turn_limit: int) -> bool:
    """Whether the policy plays on after the forced answer."""
    return not (branch.terminated or branch.truncated) and branch.turn + 1 < turn_limit


def branch_env_factory(
    env_factory: Callable[[], TokenEnv],
    trajs: Sequence[Trajectory],
    branches: Sequence[Branch],
    turn_limit: int,
) -> Callable[[], TokenEnv]:
    """A factory of `BranchEnv`s whose `reset(seed=k)` starts `branches[k]`'s continuation."""
    return functools.partial(BranchEnv, env_factory, branch_specs(trajs, branches), turn_limit)


def state_prompt_ids(traj: Trajectory, turn: int) -> list[int]:
    """The ids the engine was given before `traj`'s turn `turn` (the state's prompt)."""
    for t, prompt in turn_prompts(traj):
        if t == turn:
            return prompt
    raise ValueError(f"trajectory has no sampled ids for turn {turn}")


def branch_trajectory(
    base: Trajectory,
    branch: Branch,
    continuation: Trajectory | None,
    bridge: ChatBridge,
    *,
    turn_limit: int,
) -> Trajectory:
    """The branch as a trajectory that starts in its state: turn 0 is the forced answer
    (one per-turn sample: the state's prompt, then the answer's ids and the stop id, sampler
    logprobs 0 until the trainer fills them), then the continuation's turns, renumbered."""
    prompt = state_prompt_ids(base, branch.turn)
    ids = expert_ids(bridge, branch.answer)
    forced = Sample(
        token_ids=prompt + ids,
        loss_mask=[0] * len(prompt) + [1] * len(ids),
        sampler_logp=[0.0] * (len(prompt) + len(ids)),
        turn_ids=[-1] * len(prompt) + [0] * len(ids),
    )
    first = Turn(
        num_sampled=len(ids),
        action_text=branch.answer,
        finish_reason="stop",
        weight_version=base.turns[branch.turn].weight_version,
        reward=branch.reward,
        observation=branch.observation,
        terminated=branch.terminated,
        truncated=branch.truncated,
        info=dict(branch.info),
    )
    traj = Trajectory(
        samples=[forced],
        turns=[first],
        env_name=base.env_name,
        seed=base.seed,
        group_id=base.group_id,
        system_prompt=base.system_prompt,
        first_observation=_observation_before(base, branch.turn),
        reset_info={
            BRANCH_KEY: {
                "turn": branch.turn,
                "answer": branch.answer,
                "prefix": [t.action_text for t in base.turns[: branch.turn]],
            }
        },
        per_turn_samples=True,
    )
    if continuation is not None:
        for sample in continuation.samples:
            traj.samples.append(
                Sample(
                    list(sample.token_ids),
                    list(sample.loss_mask),
                    list(sample.sampler_logp),
                    [t + 1 for t in sample.turn_ids],  # its first prompt follows turn 0
                )
            )
        traj.turns += continuation.turns
        traj.status, traj.error = continuation.status, continuation.error
    elif not branch.terminated:
        traj.status = Status.TRUNCATED
        traj.error = "env truncated" if branch.truncated else f"turn limit ({turn_limit})"
    traj.metrics = {"num_sampled_tokens": float(traj.num_sampled_tokens)}
    return traj
