"""`TokenRows`: the SFT rows packed into flat numpy arrays, padded one mini-batch at a time.

The default warm start trains on about a quarter of a million per-turn samples. Kept as
`Trajectory` objects (Python lists of ints and floats) and padded into one `TrainBatch`, they
held several GB; packed here they take 5 bytes per token (a uint16 id when the vocabulary
fits, else int32; an int16 turn id; a uint8 loss mask), and only the rows of the current
mini-batch are ever padded.

>>> from agentrl.trajectory.types import Sample, Trajectory
>>> t = Trajectory([Sample([5, 6, 7], [0, 1, 1], [0.0] * 3, [-1, 0, 0])], [], "demo", 0, 0)
>>> rows = TokenRows.from_trajectories([t], pad_id=0)
>>> rows.num_rows, rows.num_loss_tokens, rows.batch([0]).input_ids.tolist()
(1, 2, [[5, 6, 7]])
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from agentrl.runtime.batch import TrainBatch
from agentrl.trajectory.types import Status, Trajectory


class TokenRows:
    """Every trainable sample of some trajectories, one row each, as `to_batch` orders them.

    `batch(rows)` pads the rows asked for into a `TrainBatch` equal to
    `to_batch(trajectories).rows(rows)` (sampler logprobs are 0: expert ids have none).
    """

    def __init__(self, pad_id: int, *, vocab_size: int | None = None) -> None:
        self.pad_id = pad_id
        small = vocab_size is not None and vocab_size <= np.iinfo(np.uint16).max + 1
        self._id_dtype = np.uint16 if small else np.int32
        self._ids: list[np.ndarray] = []  # per sample, then per 4096 samples; see `_pack`
        self._turns: list[np.ndarray] = []
        self._loss: list[np.ndarray] = []
        self._lengths: list[int] = []
        self._traj: list[int] = []
        self._group: list[int] = []
        self._returns: list[float] = []
        self._num_trajectories = 0
        self._packed = 0  # samples of the lists above already packed into one array each
        self.ids = self.turn_ids = self.loss_mask = np.zeros(0)
        self.offsets = np.zeros(1, dtype=np.int64)

    @classmethod
    def from_trajectories(
        cls, trajs: Iterable[Trajectory], *, pad_id: int, vocab_size: int | None = None
    ) -> TokenRows:
        """Pack `trajs` (an iterable: they need not all be in memory). Ids take 2 bytes when
        `vocab_size` fits, else 4."""
        rows = cls(pad_id, vocab_size=vocab_size)
        for traj in trajs:
            rows.add(traj)
        return rows.freeze()

    def add(self, traj: Trajectory) -> None:
        """Append the samples of `traj` (none when it is not trainable)."""
        self.add_samples(
            [(s.token_ids, s.loss_mask, s.turn_ids) for s in traj.samples],
            status=traj.status,
            group_id=traj.group_id,
            total_reward=traj.total_reward,
        )

    def add_samples(
        self,
        samples: Sequence[tuple[Sequence[int], Sequence[int], Sequence[int]]],
        *,
        status: Status | str,
        group_id: int,
        total_reward: float,
    ) -> None:
        """Append one trajectory given as `(token_ids, loss_mask, turn_ids)` per sample
        (what a trajectory file's `samples` column holds)."""
        traj_index = self._num_trajectories
        self._num_trajectories += 1
        if not Status(status).trainable:
            return
        for token_ids, loss_mask, turn_ids in samples:
            self._ids.append(np.asarray(token_ids, dtype=self._id_dtype))
            self._loss.append(np.asarray(loss_mask, dtype=np.uint8))
            self._turns.append(np.asarray(turn_ids, dtype=np.int16))
            self._lengths.append(len(token_ids))
            self._traj.append(traj_index)
            self._group.append(group_id)
            self._returns.append(total_reward)
        if len(self._ids) - self._packed >= 4096:
            self._pack()

    def _pack(self) -> None:
        """Join the per-sample arrays added since the last call into one array each (a small
        array costs ~100 bytes of header, more than its ids)."""
        for parts in (self._ids, self._loss, self._turns):
            parts[self._packed :] = [np.concatenate(parts[self._packed :])]
        self._packed = len(self._ids)

    def freeze(self) -> TokenRows:
        """Finish adding: join the packs into one flat array each; returns self."""
        flat = []
        for parts, dtype in (
            (self._ids, self._id_dtype),
            (self._loss, np.uint8),
            (self._turns, np.int16),
        ):
            flat.append(np.concatenate(parts) if parts else np.zeros(0, dtype=dtype))
            parts[:] = [flat[-1]]  # the packs are freed one array at a time
        self.ids, self.loss_mask, self.turn_ids = flat
        self._packed = len(self._ids)
        self.offsets = np.zeros(len(self._lengths) + 1, dtype=np.int64)
        np.cumsum(self._lengths, out=self.offsets[1:])
        self.traj_ids = torch.tensor(self._traj, dtype=torch.long)
        self.group_ids = torch.tensor(self._group, dtype=torch.long)
        self.returns = torch.tensor(self._returns, dtype=torch.float32)
        return self

    @property
    def num_rows(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_trajectories(self) -> int:
        """Trajectories added, trainable or not."""
        return self._num_trajectories

    @property
    def num_loss_tokens(self) -> int:
        """Ids trained on (loss_mask 1) over all rows."""
        return int(self.loss_mask.sum(dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Memory held by the packed arrays."""
        return sum(a.nbytes for a in (self.ids, self.loss_mask, self.turn_ids, self.offsets))

    def batch(self, rows: Sequence[int] | torch.Tensor) -> TrainBatch:
        """The rows `rows` right-padded to their longest one."""
        index = torch.as_tensor(rows, dtype=torch.long)
        starts = self.offsets[index.numpy()]
        lengths = self.offsets[index.numpy() + 1] - starts
        num, width = len(index), int(lengths.max()) if len(index) else 0
        input_ids = np.full((num, width), self.pad_id, dtype=np.int64)
        turn_ids = np.full((num, width), -1, dtype=np.int64)
        loss_mask = np.zeros((num, width), dtype=np.float32)
        attention_mask = np.zeros((num, width), dtype=np.int64)
        for i, (start, n) in enumerate(zip(starts.tolist(), lengths.tolist(), strict=True)):
            input_ids[i, :n] = self.ids[start : start + n]
            turn_ids[i, :n] = self.turn_ids[start : start + n]
            loss_mask[i, :n] = self.loss_mask[start : start + n]
            attention_mask[i, :n] = 1
        return TrainBatch(
            input_ids=torch.from_numpy(input_ids),
            attention_mask=torch.from_numpy(attention_mask),
            loss_mask=torch.from_numpy(loss_mask),
            sampler_logp=torch.zeros((num, width), dtype=torch.float32),
            turn_ids=torch.from_numpy(turn_ids),
            returns=self.returns[index],
            group_ids=self.group_ids[index],
            traj_ids=self.traj_ids[index],
            turn_rewards=torch.zeros((num, 1), dtype=torch.float32),
            row_index=index,
        )

    def mini_batches(
        self, num_mini_batches: int, generator: torch.Generator, *, skip: int = 0
    ) -> Iterator[TrainBatch]:
        """Shuffle the rows with `generator` and yield `num_mini_batches` near-equal parts,
        one at a time (the order `agentrl.runtime.batch.mini_batches` gives); the first `skip`
        parts are drawn but not built (a resumed epoch)."""
        num = max(1, min(num_mini_batches, self.num_rows))
        order = torch.randperm(self.num_rows, generator=generator)
        for part in torch.tensor_split(order, num)[skip:]:
            yield self.batch(part)


def rows_from_table_batch(rows: TokenRows, record_batch: Any) -> None:
    """Add the trajectories of one pyarrow record batch of a trajectory file (columns
    `samples`, `status`, `group_id`, `turns`) to `rows`."""
    samples = record_batch.column("samples").to_pylist()
    status = record_batch.column("status").to_pylist()
    group = record_batch.column("group_id").to_pylist()
    rewards = record_batch.column("turns").to_pylist()
    for traj_samples, traj_status, group_id, turns in zip(
        samples, status, group, rewards, strict=True
    ):
        rows.add_samples(
            [(s["token_ids"], s["loss_mask"], s["turn_ids"]) for s in traj_samples],
            status=traj_status,
            group_id=group_id,
            total_reward=float(sum(t["reward"] for t in turns)),
        )
