"""`TokenRows` pads the same rows `to_batch` does, from packed arrays."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.runtime.batch import to_batch
from agentrl.sft.dataset import TokenRows
from agentrl.trajectory.types import Sample, Status, Trajectory


def _trajectories(num: int, seed: int = 0) -> list[Trajectory]:
    rng = np.random.default_rng(seed)
    trajs = []
    for i in range(num):
        samples = []
        for _ in range(int(rng.integers(1, 4))):
            n = int(rng.integers(2, 12))
            ids = rng.integers(0, 60_000, size=n).tolist()
            mask = rng.integers(0, 2, size=n).tolist()
            samples.append(Sample(ids, mask, [0.0] * n, rng.integers(-1, 5, size=n).tolist()))
        status = Status.ENV_ERROR if i % 7 == 3 else Status.OK
        trajs.append(Trajectory(samples, [], "demo", seed=i, group_id=i, status=status))
    return trajs


@pytest.mark.parametrize("vocab_size", [None, 65_536])  # int32 ids, then uint16 ids
def test_rows_equal_to_batch_rows(vocab_size: int | None) -> None:
    trajs = _trajectories(1500)  # ~3000 samples: crosses a pack of 4096 only with the next
    trajs += _trajectories(1500, seed=1)
    rows = TokenRows.from_trajectories(trajs, pad_id=7, vocab_size=vocab_size)
    full = to_batch(trajs, pad_id=7)
    assert rows.num_rows == full.num_rows > 4096
    assert rows.num_trajectories == len(trajs)
    assert rows.num_loss_tokens == full.num_loss_tokens
    assert rows.ids.dtype == (np.uint16 if vocab_size else np.int32)
    for pick in ([0], [5, 2, 4000, 17], list(range(full.num_rows - 50, full.num_rows))):
        want, got = full.rows(pick), rows.batch(pick)
        for name in ("input_ids", "attention_mask", "loss_mask", "turn_ids", "traj_ids"):
            assert torch.equal(getattr(got, name), getattr(want, name)), name
        assert torch.equal(got.group_ids, want.group_ids)


def test_mini_batches_cover_every_row_once_and_skip_resumes_the_order() -> None:
    rows = TokenRows.from_trajectories(_trajectories(40), pad_id=0)
    parts = list(rows.mini_batches(6, torch.Generator().manual_seed(3)))
    seen = torch.cat([p.row_index for p in parts]).sort().values
    assert torch.equal(seen, torch.arange(rows.num_rows))
    later = list(rows.mini_batches(6, torch.Generator().manual_seed(3), skip=4))
    assert [p.row_index.tolist() for p in later] == [p.row_index.tolist() for p in parts[4:]]
