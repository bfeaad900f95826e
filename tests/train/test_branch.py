"""All-action branches: replays land in the base episode's states, a branch's states carry the
ids the policy would have seen there, forced answers train with importance weight 1."""

from __future__ import annotations

import random
from functools import partial

import numpy as np
import pytest
import torch

from agentrl.algos.presets import load_preset
from agentrl.config import load_config
from agentrl.envs import make
from agentrl.rollout.models import load_tokenizer, resolve_model
from agentrl.runtime.batch import to_batch, turn_state_ids
from agentrl.sft.data import expert_episode, expert_ids
from agentrl.sft.expert import get_expert
from agentrl.train import branch
from agentrl.train.trainer import Trainer, token_logprobs
from agentrl.trajectory.bridge import ChatBridge

LIMIT = 10
ENV = partial(make, "sokoban", max_turns=LIMIT, max_actions_per_turn=1)


@pytest.fixture(scope="module")
def bridge() -> ChatBridge:
    return ChatBridge(load_tokenizer(str(resolve_model("tiny"))))


def _episode(bridge: ChatBridge, seed: int, noise: float = 0.0):
    return expert_episode(
        ENV(),
        bridge,
        get_expert("solver"),
        seed,
        history_turns=0,
        noise=noise,
        rng=np.random.default_rng(seed),
    )


def _long_episode(bridge: ChatBridge):
    for seed in range(100):
        traj = _episode(bridge, seed)
        if traj.num_turns >= 4:
            return traj
    raise AssertionError("no solver episode of 4 or more turns in 100 rooms")


def test_branches_try_every_other_answer_in_the_base_states(bridge) -> None:
    base = _long_episode(bridge)
    branches, skipped = branch.choose_branches([base], ENV, max_states=100, rng=random.Random(0))
    assert skipped == 0
    assert {b.turn for b in branches} == set(range(base.num_turns))
    for t in range(base.num_turns):
        tried = {b.answer for b in branches if b.turn == t}
        assert base.turns[t].action_text not in tried
        assert tried | {base.turns[t].action_text} == set(ENV().candidate_answers())
    for b in branches:  # the recorded outcome is the env's own answer in that state
        env, _ = branch.replay(ENV, base, b.turn)
        obs, reward, terminated, truncated, _ = env.step(b.answer)
        assert (b.observation, b.reward, b.terminated, b.truncated) == (
            obs, reward, terminated, truncated
        )  # fmt: skip


def test_max_states_caps_the_states_and_a_state_visited_twice_branches_once(bridge) -> None:
    base = _long_episode(bridge)
    twin = _episode(bridge, base.seed)  # the same room, the same moves: the same states
    branches, _ = branch.choose_branches([base, twin], ENV, max_states=2, rng=random.Random(1))
    assert len({b.turn for b in branches}) == 2
    assert {b.base for b in branches} == {0}  # each state from its first visit only
    assert len(branches) == 2 * 3


def test_failed_first_draws_the_states_of_failed_episodes_first(bridge) -> None:
    solved = _long_episode(bridge)
    failed = _episode(bridge, solved.seed + 1)
    failed.turns[-1].info = {**failed.turns[-1].info, "success": False}
    assert solved.success and not failed.success
    for seed in range(5):
        branches, _ = branch.choose_branches(
            [solved, failed], ENV, max_states=1, rng=random.Random(seed), failed_first=True
        )
        assert {b.base for b in branches} == {1}


def test_a_replay_that_differs_from_the_episode_is_skipped(bridge) -> None:
    base = _long_episode(bridge)
    base.turns[0].observation = "not what the env shows"
    branches, skipped = branch.choose_branches([base], ENV, max_states=100, rng=random.Random(0))
    assert skipped == 1 and 1 not in {b.turn for b in branches}


def test_a_branch_continues_in_the_states_the_base_episode_saw(bridge) -> None:
    # Force the solver's own answer at turn 1 and let the solver play on in the BranchEnv:
    # the branch then retraces the base episode, and every state id must match the base's.
    base = _long_episode(bridge)
    t = 1
    env, _ = branch.replay(ENV, base, t)
    obs, reward, terminated, truncated, info = env.step(base.turns[t].action_text)
    forced = branch.Branch(
        0, t, base.turns[t].action_text, reward, obs, terminated, truncated, info
    )
    assert branch.continues(forced, LIMIT)
    make_env = branch.branch_env_factory(ENV, [base], [forced], LIMIT)
    solver = get_expert("solver")
    continuation = expert_episode(
        make_env(), bridge, lambda env, n: solver(env.inner, n), 0, history_turns=0
    )
    traj = branch.branch_trajectory(base, forced, continuation, bridge, turn_limit=LIMIT)
    assert branch.is_branch(traj) and not branch.is_branch(base)
    assert traj.num_turns == base.num_turns - t
    assert [x.action_text for x in traj.turns] == [x.action_text for x in base.turns[t:]]
    assert traj.total_reward == pytest.approx(sum(x.reward for x in base.turns[t:]))
    assert traj.success and traj.status == base.status
    n = traj.num_turns
    assert turn_state_ids(traj, n) == turn_state_ids(base, base.num_turns)[t:]
    row = to_batch([traj], pad_id=0)
    assert row.turn_ids.max() == n - 1  # the continuation's turns follow the forced one
    # the branch names the answers that lead to its first state: a replay lands there
    info = traj.reset_info[branch.BRANCH_KEY]
    assert info["prefix"] == [x.action_text for x in base.turns[:t]]
    replayed = ENV()
    obs = replayed.reset(seed=traj.seed)[0]
    for answer in info["prefix"]:
        obs = replayed.step(answer)[0]
    assert obs == traj.first_observation


def test_branch_env_ends_where_the_base_turn_limit_would(bridge) -> None:
    base = _long_episode(bridge)
    specs = [(base.seed, tuple(x.action_text for x in base.turns[:2]), "<answer>Up</answer>", 2)]
    env = branch.BranchEnv(ENV, specs, turn_limit=5)
    env.reset(seed=0)
    first = env.step("<answer>Down</answer>")  # turn 3 of 5
    second = env.step("<answer>Down</answer>")  # turn 4: the last one
    assert not first[2] and not first[3]
    assert second[3] or second[2]


def _branch_config(preset: str, *overrides: str):
    """A one-step tiny-model Sokoban run with branches at 3 states a step."""
    return load_config(
        overrides=[
            "env.name=sokoban", "env.max_turns=3", "env.kwargs.max_actions_per_turn=1",
            "model.name=tiny", "rollout.group_size=2", "rollout.max_turns=3",
            "rollout.history_turns=0", "rollout.sampling.max_new_tokens=8",
            "rollout.sampling.temperature=1.0", "trainer.num_steps=1", "trainer.num_threads=1",
            "trainer.branch_states=3", "checkpoint.every=0", "logging.progress=false",
            "logging.tensorboard=false", "logging.save_trajectories=0", *overrides,
        ],
        base=load_preset(preset),
    )  # fmt: skip


def _record_updates(trainer: Trainer, monkeypatch) -> list:
    """The batches `trainer.update` is given, in order."""
    updated = []
    real_update = trainer.update

    def record(batch, **kwargs):
        updated.append(batch)
        return real_update(batch, **kwargs)

    monkeypatch.setattr(trainer, "update", record)
    return updated


def test_trainer_trains_forced_answers_with_importance_weight_one(tmp_path) -> None:
    cfg = _branch_config("state-rloo", "trainer.num_groups=2")
    trainer = Trainer(cfg, tmp_path)
    try:
        result = trainer.rollout(1)
        sampled = [t for t in result.trajectories if not branch.is_branch(t)]
        extra = [t for t in result.trajectories if branch.is_branch(t)]
        assert len(sampled) == 4 and extra
        assert result.metrics["branch/num_branches"] == len(extra)
        assert result.metrics["branch/num_states"] <= 3
        forced = to_batch(extra, pad_id=trainer.pad_id)
        mask = forced.loss_mask.bool() & (forced.turn_ids == 0)
        later = forced.loss_mask.bool() & (forced.turn_ids > 0)
        sampled_logp = forced.sampler_logp[later].clone()
        assert (forced.sampler_logp[mask] == 0).all()  # not sampled: nothing recorded
        trainer._fill_forced_logp(extra, forced)
        assert (forced.sampler_logp[mask] < 0).all()  # filled: the policy's own logprobs
        assert torch.equal(forced.sampler_logp[later], sampled_logp)  # the sampled ones kept
        with torch.no_grad():
            logp, _ = token_logprobs(trainer.policy.model, forced, temperature=trainer.temperature)
        assert torch.allclose(logp[mask], forced.sampler_logp[mask], atol=1e-5)
        metrics = trainer.train_step()
        assert metrics["actor/tis_weight_mean"] == pytest.approx(1.0, abs=1e-3)
        assert metrics["branch/num_branches"] > 0
    finally:
        trainer.close()


def test_branches_need_state_credit_and_markov_prompts(tmp_path) -> None:
    cfg = load_config(
        overrides=["env.name=sokoban", "model.name=tiny", "trainer.branch_states=4"],
        base=load_preset("grpo"),
    )
    with pytest.raises(ValueError, match="state-rloo.*history_turns: 0"):
        Trainer(cfg, tmp_path)


def test_all_answers_branches_every_candidate_answer_in_each_state(bridge) -> None:
    base = _long_episode(bridge)
    branches, _ = branch.choose_branches(
        [base], ENV, max_states=100, rng=random.Random(0), all_answers=True
    )
    for t in range(base.num_turns):
        assert sorted(b.answer for b in branches if b.turn == t) == sorted(
            ENV().candidate_answers()
        )


def test_policy_iteration_trains_the_best_answer_of_each_state_on_greedy_returns(
    tmp_path, monkeypatch
) -> None:
    # Room 500002 is solved by one move, Down: of the four answers tried in its first state,
    # Down alone returns 10.9, so it is that state's label, whatever the untrained policy does.
    from agentrl.train import trainer as trainer_module

    temperatures: list[float] = []
    real_rollout = trainer_module.rollout

    def spy(*args, **kwargs):
        temperatures.append(kwargs["sampling"].temperature)
        return real_rollout(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "rollout", spy)
    cfg = _branch_config("policy-iteration", "trainer.first_seed=500002", "trainer.num_groups=1")
    trainer = Trainer(cfg, tmp_path)
    updated = _record_updates(trainer, monkeypatch)
    try:
        assert trainer.train_seeds(1) == [500002]
        metrics = trainer.train_step()
    finally:
        trainer.close()
    assert temperatures == [1.0, 0.0]  # episodes at the rollout's temperature, branches greedy
    assert metrics["branch/greedy_cache_misses"] > 0  # continuations that meet play on once
    (batch,) = updated
    trained = batch.loss_mask.bool()
    assert (batch.advantages[trained] > 0).all()  # every trained row is a state's best answer
    assert (batch.turn_ids[trained] == 0).all()  # a forced answer, not a continuation's sample
    down = expert_ids(ChatBridge(trainer.tokenizer), "<answer>Down</answer>")
    first_state_rows = [
        r for r in range(batch.num_rows) if batch.input_ids[r, trained[r]].tolist() == down
    ]
    assert first_state_rows  # the solving move is among the labels
    # each labelled state weighs one, spread over its best visits' tokens (forced or not)
    weight = float(batch.advantages[trained].sum()) / len(down)
    assert 1.0 <= weight <= metrics["advantage/labelled_states"] + 1e-5
    assert metrics["actor/tis_weight_mean"] == pytest.approx(1.0, abs=1e-3)


def test_label_replay_trains_the_labels_of_earlier_steps_again(tmp_path, monkeypatch) -> None:
    cfg = _branch_config(
        "policy-iteration",
        "trainer.first_seed=500002",
        "trainer.num_groups=1",
        "trainer.label_replay_steps=2",
    )
    trainer = Trainer(cfg, tmp_path)
    updated = _record_updates(trainer, monkeypatch)
    monkeypatch.setattr(trainer, "train_seeds", lambda step: [500002])
    try:
        steps = [trainer.train_step() for _ in range(4)]
        new = [int((b.row_index >= 0).sum()) - int(m.get("replay/label_rows", 0))
               for b, m in zip(updated, steps, strict=True)]  # fmt: skip
        assert all(n > 0 for n in new)  # room 500002 has a label every step
        assert steps[0]["replay/label_rows"] == 0
        assert steps[1]["replay/label_rows"] == new[0]
        assert steps[3]["replay/label_rows"] == new[1] + new[2]  # two steps back, no more
        # the rows of step 1 come back in step 2 with their labels, after this step's rows
        first, second = updated[0], updated[1]
        replayed = second.rows(torch.arange(new[1], second.num_rows))
        assert torch.equal(replayed.advantages, first.advantages[:, : replayed.input_ids.shape[1]])
        # re-scored with the current weights: the replayed answers' importance weight is 1
        trained = replayed.loss_mask.bool()
        with torch.no_grad():
            logp, _ = token_logprobs(trainer.policy.model, replayed, temperature=1.0)
        assert (replayed.sampler_logp[trained] < 0).all()
        assert all(m["actor/tis_weight_mean"] == pytest.approx(1.0, abs=1e-3) for m in steps)
        assert len(set(second.group_ids.tolist())) == 2  # the two steps' rows: two groups
    finally:
        trainer.close()


def test_label_replay_needs_labels(tmp_path) -> None:
    cfg = _branch_config("state-rloo", "trainer.label_replay_steps=2")
    with pytest.raises(ValueError, match="label_replay_steps=2 needs algo.estimator: state-best"):
        Trainer(cfg, tmp_path)
