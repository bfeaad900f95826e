"""Trajectories -> padded batches, and the mini/micro splits."""

from __future__ import annotations

import pytest
import torch

from agentrl.runtime.batch import concat_batches, micro_batches, mini_batches, to_batch
from agentrl.trajectory.types import Sample, Status, Trajectory, Turn


def _turn(reward: float) -> Turn:
    return Turn(
        num_sampled=2, action_text="a", finish_reason="stop", weight_version=0, reward=reward
    )


def _sample(n_prompt: int, n_sampled: int, turn: int = 0) -> Sample:
    ids = list(range(1, n_prompt + n_sampled + 1))
    mask = [0] * n_prompt + [1] * n_sampled
    return Sample(
        token_ids=ids,
        loss_mask=mask,
        sampler_logp=[-0.5 * m for m in mask],
        turn_ids=[-1] * n_prompt + [turn] * n_sampled,
    )


def _traj(group: int, rewards: list[float], samples: list[Sample], status=Status.OK) -> Trajectory:
    return Trajectory(
        samples=samples,
        turns=[_turn(r) for r in rewards],
        env_name="x",
        seed=group,
        group_id=group,
        status=status,
        per_turn_samples=len(samples) > 1,
    )


def test_to_batch_pads_and_skips_untrainable() -> None:
    trajs = [
        _traj(0, [0.0, 1.0], [_sample(3, 2)]),
        _traj(0, [0.5], [_sample(2, 1)], status=Status.ENV_ERROR),
        _traj(1, [0.25], [_sample(1, 1)], status=Status.TRUNCATED),
    ]
    batch = to_batch(trajs, pad_id=99)
    assert batch.input_ids.shape == (2, 5)
    assert batch.input_ids[1].tolist() == [1, 2, 99, 99, 99]
    assert batch.attention_mask[1].tolist() == [1, 1, 0, 0, 0]
    assert batch.loss_mask[0].tolist() == [0, 0, 0, 1, 1]
    assert batch.sampler_logp[0].tolist() == [0, 0, 0, -0.5, -0.5]
    assert batch.turn_ids[1].tolist() == [-1, 0, -1, -1, -1]
    assert batch.returns.tolist() == [1.0, 0.25]
    assert batch.group_ids.tolist() == [0, 1]
    assert batch.traj_ids.tolist() == [0, 2]
    assert batch.turn_rewards.tolist() == [[0.0, 1.0], [0.25, 0.0]]


def test_per_turn_samples_share_return_and_group() -> None:
    traj = _traj(7, [0.5, 1.0], [_sample(2, 1, turn=0), _sample(4, 2, turn=1)])
    batch = to_batch([traj], pad_id=0)
    assert batch.num_rows == 2
    assert batch.returns.tolist() == [1.5, 1.5]
    assert batch.group_ids.tolist() == [7, 7]
    assert batch.traj_ids.tolist() == [0, 0]


def test_no_trainable_trajectory_is_an_error() -> None:
    with pytest.raises(ValueError, match="no trainable"):
        to_batch([_traj(0, [1.0], [_sample(1, 1)], status=Status.ENGINE_ERROR)], pad_id=0)


def test_micro_batches_respect_budget_and_cover_rows() -> None:
    trajs = [_traj(i, [float(i)], [_sample(i + 1, 3)]) for i in range(6)]
    batch = to_batch(trajs, pad_id=0)
    parts = micro_batches(batch, max_tokens=16)
    for part in parts:
        assert part.input_ids.numel() <= 16 or part.num_rows == 1
        assert part.attention_mask[:, -1].any()  # trimmed to its longest row
    assert sorted(r for p in parts for r in p.returns.tolist()) == batch.returns.tolist()
    assert sum(p.num_loss_tokens for p in parts) == batch.num_loss_tokens


def test_mini_batches_partition_rows() -> None:
    batch = to_batch([_traj(i, [float(i)], [_sample(2, 2)]) for i in range(5)], pad_id=0)
    parts = mini_batches(batch, 2, generator=torch.Generator().manual_seed(0))
    assert [p.num_rows for p in parts] == [3, 2]
    assert sorted(r for p in parts for r in p.returns.tolist()) == batch.returns.tolist()
    assert len(mini_batches(batch, 10)) == 5


def test_mini_batches_keep_groups_and_trajectories_whole() -> None:
    # 3 groups: 2 one-row trajectories, a trajectory of 2 per-turn rows plus one of 1, and one
    trajs = [
        _traj(0, [1.0], [_sample(2, 2)]),
        _traj(0, [0.0], [_sample(2, 2)]),
        _traj(1, [1.0, 0.0], [_sample(2, 1, 0), _sample(3, 1, 1)]),
        _traj(1, [2.0], [_sample(2, 2)]),
        _traj(2, [3.0], [_sample(2, 2)]),
    ]
    batch = to_batch(trajs, pad_id=0)
    for seed in range(4):
        parts = mini_batches(batch, 4, generator=torch.Generator().manual_seed(seed))
        assert len(parts) == 3  # never more parts than groups
        for p in parts:
            assert p.group_ids.unique().numel() == 1
            (group,) = p.group_ids.unique().tolist()
            assert p.num_rows == int((batch.group_ids == group).sum())


def test_concat_batches_pads_and_keeps_groups_apart() -> None:
    a = to_batch([_traj(0, [1.0], [_sample(2, 1)]), _traj(3, [0.0], [_sample(1, 1)])], pad_id=0)
    b = to_batch([_traj(0, [0.5, 0.5], [_sample(3, 2), _sample(1, 1, turn=1)])], pad_id=9)
    a.advantages = torch.ones_like(a.loss_mask)
    b.advantages = 2 * torch.ones_like(b.loss_mask)
    c = concat_batches([a, b], pad_id=9)
    assert c.num_rows == 4 and c.input_ids.shape[1] == 5 and c.turn_rewards.shape[1] == 2
    assert c.input_ids[0].tolist() == [1, 2, 3, 9, 9]  # a's rows padded with the pad id
    assert c.loss_mask[0].tolist() == [0, 0, 1, 0, 0] and c.turn_ids[0, 3:].tolist() == [-1, -1]
    assert c.group_ids.tolist() == [0, 3, 4, 4]  # b's group 0 is not a's group 0
    assert c.traj_ids.tolist() == [0, 1, 2, 2]
    assert c.row_index.tolist() == [0, 1, 2, 3]
    assert torch.equal(c.advantages[2:], b.advantages)
    assert c.turn_states[0, 1] == -1  # a turn a's rows never had
    b.old_logp = torch.zeros_like(b.loss_mask)
    with pytest.raises(ValueError, match="old_logp is set in some batches"):
        concat_batches([a, b], pad_id=9)
