"""Expert trajectories are token-exact: the rollout loop builds the same sequences."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from agentrl.envs import make
from agentrl.envs.sokoban import ACTIONS
from agentrl.rollout.engine import Completion, GenerationRequest
from agentrl.rollout.loop import rollout
from agentrl.rollout.models import load_tokenizer
from agentrl.sft.data import expert_trajectories, policy_success_rate
from agentrl.sft.expert import format_actions, solver_expert
from agentrl.trajectory.io import read_trajectories, write_trajectories
from agentrl.trajectory.types import Status


class ReplayEngine:
    """Answers each prompt with the ids an expert trajectory recorded after that prefix."""

    weight_version = 0

    def __init__(self, answers: dict[tuple[int, ...], list[int]]) -> None:
        self.answers = answers

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        out = []
        for r in requests:
            ids = self.answers[tuple(r.prompt_ids)]
            assert ids[-1] in r.params.stop_token_ids  # stops like a real engine would
            out.append(Completion(list(ids), [0.0] * len(ids), "stop", 0))
        return out

    def update_weights(self, state_dict: object, version: int) -> None:
        self.weight_version = version

    def close(self) -> None:
        pass


def _answers(trajs) -> dict[tuple[int, ...], list[int]]:
    answers = {}
    for traj in trajs:
        (sample,) = traj.samples
        i = 0
        while i < len(sample.token_ids):
            if sample.loss_mask[i]:
                j = i
                while j < len(sample.token_ids) and sample.loss_mask[j]:
                    j += 1
                answers[tuple(sample.token_ids[:i])] = sample.token_ids[i:j]
                i = j
            else:
                i += 1
    return answers


def test_expert_trajectories_equal_what_the_rollout_builds(tiny_model_path: Path) -> None:
    tokenizer = load_tokenizer(str(tiny_model_path))
    factory = functools.partial(make, "sokoban")
    seeds = [5, 6, 7, 8]
    trajs = expert_trajectories(
        factory, tokenizer, seeds, solver_expert, max_actions_per_turn=2, env_name="sokoban"
    )
    assert all(t.success and t.status == Status.OK for t in trajs)
    multi_turn = [t for t in trajs if t.num_turns > 1]
    assert multi_turn, "expected a seed whose solution needs two turns"

    result = rollout(
        ReplayEngine(_answers(trajs)), factory, tokenizer, seeds, group_size=1, env_name="sokoban"
    )
    for mine, theirs in zip(trajs, result.trajectories, strict=True):
        assert theirs.success
        assert mine.samples[0].token_ids == theirs.samples[0].token_ids
        assert mine.samples[0].loss_mask == theirs.samples[0].loss_mask
        assert mine.samples[0].turn_ids == theirs.samples[0].turn_ids
        assert [t.action_text for t in mine.turns] == [t.action_text for t in theirs.turns]
        assert mine.total_reward == theirs.total_reward


def test_expert_ids_decode_to_the_answer_and_end_on_end_of_turn(tiny_model_path: Path) -> None:
    tokenizer = load_tokenizer(str(tiny_model_path))
    (traj,) = expert_trajectories(
        functools.partial(make, "sokoban"), tokenizer, [3], solver_expert, max_actions_per_turn=2
    )
    sample = traj.samples[0]
    sampled = [i for i, m in zip(sample.token_ids, sample.loss_mask, strict=True) if m]
    assert sampled[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert "".join(t.action_text for t in traj.turns) == tokenizer.decode(
        sampled, skip_special_tokens=True
    )
    assert all(t.action_text.count("||") <= 1 for t in traj.turns)  # at most 2 actions


def test_trajectories_round_trip_through_io(tmp_path: Path, tiny_model_path: Path) -> None:
    tokenizer = load_tokenizer(str(tiny_model_path))
    trajs = expert_trajectories(
        functools.partial(make, "sokoban"), tokenizer, [1, 2], solver_expert
    )
    path = write_trajectories(tmp_path / "expert.jsonl", trajs)
    back = read_trajectories(path).trajectories
    assert [t.samples[0].token_ids for t in back] == [t.samples[0].token_ids for t in trajs]


def test_floor_and_ceiling_on_validation_seeds() -> None:
    factory = functools.partial(make, "sokoban")
    seeds = range(1_000_000, 1_000_064)
    rng = np.random.default_rng(0)

    def random_policy(env) -> str:
        return format_actions([ACTIONS[i] for i in rng.integers(4, size=5)])

    floor = policy_success_rate(factory, random_policy, seeds)
    ceiling = policy_success_rate(factory, solver_expert, seeds)
    assert ceiling == 1.0
    assert 0.02 < floor < 0.5


def _sokoban(**kwargs):
    return functools.partial(make, "sokoban", max_turns=10, **kwargs)


def test_noisy_expert_trains_only_on_expert_answers_from_off_path_states(
    tiny_model_path: Path,
) -> None:
    """DART: random turns stay in the episode with mask 0; every trained answer is the
    solver's answer for the state it was given."""
    tokenizer = load_tokenizer(str(tiny_model_path))
    kwargs = dict(max_actions_per_turn=1, env_name="sokoban", history_turns=0)
    clean = expert_trajectories(_sokoban(), tokenizer, range(40), solver_expert, **kwargs)
    noisy = expert_trajectories(
        _sokoban(), tokenizer, range(40), solver_expert, noise=0.3, noise_seed=1, **kwargs
    )
    assert all(t.success for t in clean)
    random_turns = trained = off_path = 0
    env = _sokoban()()
    for traj in noisy:
        env.reset(seed=traj.seed)
        answers = {}  # turn -> the ids trained on
        for sample in traj.samples:
            for t, i, m in zip(sample.turn_ids, sample.token_ids, sample.loss_mask, strict=True):
                if m:
                    answers.setdefault(t, []).append(i)
        strayed = False
        for t, turn in enumerate(traj.turns):
            if t in answers:
                expected = solver_expert(env, 1)
                assert tokenizer.decode(answers[t], skip_special_tokens=True) == expected
                assert turn.action_text == expected
                trained += 1
                off_path += strayed
            else:  # a random turn: nothing trains on it
                random_turns += 1
                strayed = True
            env.step(turn.action_text)
        assert len(traj.samples) == len(answers)
    assert random_turns > 10 and off_path > 10 and trained > 3 * random_turns // 2
    assert sum(t.success for t in noisy) < len(noisy)  # some random moves cost the episode


def test_noisy_expert_in_one_sequence_masks_random_answers(tiny_model_path: Path) -> None:
    tokenizer = load_tokenizer(str(tiny_model_path))
    (traj,) = expert_trajectories(
        _sokoban(), tokenizer, [3], solver_expert, noise=0.5, noise_seed=0, max_actions_per_turn=1
    )
    (sample,) = traj.samples
    trained_turns = {t for t, m in zip(sample.turn_ids, sample.loss_mask, strict=True) if m}
    sampled_turns = set(range(traj.num_turns))
    assert trained_turns < sampled_turns  # some turns were random and are not trained on
    assert sum(sample.loss_mask) < traj.num_sampled_tokens
