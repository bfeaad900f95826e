"""Trajectories -> padded tensors, and the mini-/micro-batch splits the update loop uses.

A trajectory holds one sample (one token sequence over all turns) or, when the chat template
is not prefix-preserving, one sample per turn; every sample becomes one row of the batch and
the per-turn samples of one trajectory share its return, group and turn rewards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from agentrl.trajectory.types import Trajectory


@dataclass
class TrainBatch:
    """Right-padded rows, one per sample. Token tensors are [B, T]; row tensors are [B].

    The `old_logp` ... `old_values` fields start as None; the trainer fills them in before
    the update epochs.
    """

    input_ids: torch.Tensor  # [B, T] long
    attention_mask: torch.Tensor  # [B, T] long, 1 on real tokens
    loss_mask: torch.Tensor  # [B, T] float, 1 exactly on sampled tokens
    sampler_logp: torch.Tensor  # [B, T] float, 0 where loss_mask is 0
    turn_ids: torch.Tensor  # [B, T] long, -1 on the first prompt and on padding
    returns: torch.Tensor  # [B] float, the trajectory's return (sum of turn rewards)
    group_ids: torch.Tensor  # [B] long, same initial state -> same group
    traj_ids: torch.Tensor  # [B] long, index of the trajectory this row came from
    turn_rewards: torch.Tensor  # [B, K] float, reward of turn k (0 past the last turn)
    row_index: torch.Tensor  # [B] long, row in the batch built by `to_batch`
    old_logp: torch.Tensor | None = None  # [B, T] trainer logprobs before the update
    ref_logp: torch.Tensor | None = None  # [B, T] reference-model logprobs
    old_values: torch.Tensor | None = None  # [B, T] critic values before the update
    advantages: torch.Tensor | None = None  # [B, T]
    value_targets: torch.Tensor | None = None  # [B, T] critic regression targets
    traj_num_tokens: torch.Tensor | None = None  # [B] trained tokens of the row's trajectory
    turn_states: torch.Tensor | None = None  # [B, K] long, the trajectory's `turn_state_ids`

    @property
    def num_rows(self) -> int:
        """B, the number of rows (samples)."""
        return int(self.input_ids.shape[0])

    @property
    def num_loss_tokens(self) -> int:
        """Sampled tokens in the batch (the loss is averaged over these)."""
        return int(self.loss_mask.sum().item())

    def rows(self, index: torch.Tensor | Sequence[int]) -> TrainBatch:
        """The rows `index` (a new batch), trimmed to their longest sequence."""
        index = torch.as_tensor(index, dtype=torch.long)
        picked = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            picked[f.name] = None if value is None else value[index]
        return TrainBatch(**picked).trimmed()

    def trimmed(self) -> TrainBatch:
        """Drop trailing columns that are padding in every row."""
        lengths = self.attention_mask.sum(dim=1)
        max_len = int(lengths.max().item()) if lengths.numel() else 0
        if max_len == self.input_ids.shape[1]:
            return self
        cut = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            is_token = value is not None and value.dim() == 2 and f.name not in _TURN_FIELDS
            cut[f.name] = value[:, :max_len] if is_token else value
        return TrainBatch(**cut)


_TURN_FIELDS = ("turn_rewards", "turn_states")
"""`[B, K]` fields (one entry per turn, not per token): `trimmed` leaves them whole."""


def turn_state_ids(traj: Trajectory, num_turns: int) -> list[int]:
    """An id of the state each turn of `traj` acted in, `num_turns` long: a hash of the token
    ids the engine was given before the turn's first sampled id (the turn's prompt, history
    included), -1 for a turn without sampled ids or past the last turn.

    Equal prompts give equal ids, in any trajectory: the policy saw the same input there.

    >>> from agentrl.trajectory.types import Sample, Trajectory
    >>> def traj(ids, mask, turns):
    ...     return Trajectory([Sample(ids, mask, [0.0] * len(ids), turns)], [], "env", 0, 0)
    >>> a = turn_state_ids(traj([5, 6, 1, 7, 2], [0, 0, 1, 0, 1], [-1, -1, 0, 0, 1]), 3)
    >>> b = turn_state_ids(traj([5, 6, 3, 7, 2], [0, 0, 1, 0, 1], [-1, -1, 0, 0, 1]), 3)
    >>> a[0] == b[0], a[1] == b[1], a[2]
    (True, False, -1)
    """
    ids = [-1] * num_turns
    for t, prompt in turn_prompts(traj):
        if t < num_turns:
            ids[t] = hash(tuple(prompt)) & (2**62 - 1)
    return ids


def turn_prompts(traj: Trajectory) -> Iterator[tuple[int, list[int]]]:
    """`(turn, ids the engine was given before the turn's first sampled id)` for each turn
    with sampled ids, sample by sample."""
    for sample in traj.samples:
        seen: set[int] = set()
        for i, (m, t) in enumerate(zip(sample.loss_mask, sample.turn_ids, strict=True)):
            if m and t >= 0 and t not in seen:
                seen.add(t)
                yield t, list(sample.token_ids[:i])


def to_batch(trajectories: Sequence[Trajectory], *, pad_id: int) -> TrainBatch:
    """Pad every trainable trajectory's samples into one batch (untrainable ones are skipped).

    Raises ValueError when no trajectory is trainable.
    """
    rows, row_traj, row_group, row_return, row_traj_tokens = [], [], [], [], []
    turn_reward_lists = []
    for traj_index, traj in enumerate(trajectories):
        if not traj.status.trainable:
            continue
        traj_tokens = sum(sum(s.loss_mask) for s in traj.samples)
        for sample in traj.samples:
            rows.append(sample)
            row_traj.append(traj_index)
            row_group.append(traj.group_id)
            row_return.append(traj.total_reward)
            row_traj_tokens.append(traj_tokens)
            turn_reward_lists.append([t.reward for t in traj.turns])
    if not rows:
        raise ValueError("no trainable trajectory in the batch (all env or engine errors)")

    num_rows = len(rows)
    max_len = max(len(s) for s in rows)
    max_turns = max(1, max(len(r) for r in turn_reward_lists))
    input_ids = torch.full((num_rows, max_len), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((num_rows, max_len), dtype=torch.long)
    loss_mask = torch.zeros((num_rows, max_len), dtype=torch.float32)
    sampler_logp = torch.zeros((num_rows, max_len), dtype=torch.float32)
    turn_ids = torch.full((num_rows, max_len), -1, dtype=torch.long)
    turn_rewards = torch.zeros((num_rows, max_turns), dtype=torch.float32)
    states = {i: turn_state_ids(trajectories[i], max_turns) for i in set(row_traj)}
    turn_states = torch.tensor([states[i] for i in row_traj], dtype=torch.long)
    for i, sample in enumerate(rows):
        n = len(sample)
        input_ids[i, :n] = torch.tensor(sample.token_ids, dtype=torch.long)
        attention_mask[i, :n] = 1
        loss_mask[i, :n] = torch.tensor(sample.loss_mask, dtype=torch.float32)
        sampler_logp[i, :n] = torch.tensor(sample.sampler_logp, dtype=torch.float32)
        turn_ids[i, :n] = torch.tensor(sample.turn_ids, dtype=torch.long)
        rewards = turn_reward_lists[i]
        turn_rewards[i, : len(rewards)] = torch.tensor(rewards, dtype=torch.float32)
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask,
        sampler_logp=sampler_logp * loss_mask,
        turn_ids=turn_ids,
        returns=torch.tensor(row_return, dtype=torch.float32),
        group_ids=torch.tensor(row_group, dtype=torch.long),
        traj_ids=torch.tensor(row_traj, dtype=torch.long),
        traj_num_tokens=torch.tensor(row_traj_tokens, dtype=torch.float32),
        turn_rewards=turn_rewards,
        row_index=torch.arange(num_rows),
        turn_states=turn_states,
    )


def concat_batches(batches: Sequence[TrainBatch], *, pad_id: int) -> TrainBatch:
    """The rows of `batches`, in order, in one batch: token fields padded to the longest row,
    turn fields to the most turns, and group and trajectory ids offset so that no two
    batches share one (a group's rows stay a group; rows of different batches never are).
    An optional field must be set in every batch or in none.
    """
    if not batches:
        raise ValueError("concat_batches: no batch")
    width = max(b.input_ids.shape[1] for b in batches)
    turns = max(b.turn_rewards.shape[1] for b in batches)
    out: dict[str, torch.Tensor | None] = {}
    for f in dataclasses.fields(TrainBatch):
        values = [getattr(b, f.name) for b in batches]
        if all(v is None for v in values):
            out[f.name] = None
            continue
        if any(v is None for v in values):
            raise ValueError(f"concat_batches: {f.name} is set in some batches, not all")
        if f.name in ("group_ids", "traj_ids"):
            offset, shifted = 0, []
            for v in values:
                shifted.append(v + offset)
                offset += int(v.max()) + 1 if v.numel() else 0
            values = shifted
        elif values[0].dim() == 2:
            size = turns if f.name in _TURN_FIELDS else width
            fill = {"input_ids": pad_id, "turn_ids": -1, "turn_states": -1}.get(f.name, 0)
            values = [
                torch.nn.functional.pad(v, (0, size - v.shape[1]), value=fill) for v in values
            ]
        out[f.name] = torch.cat(values)
    out["row_index"] = torch.arange(sum(b.num_rows for b in batches))
    return TrainBatch(**out)


def mini_batches(
    batch: TrainBatch, num_mini_batches: int, *, generator: torch.Generator | None = None
) -> list[TrainBatch]:
    """Shuffle groups (with `generator`, else in order) and split them into
    `num_mini_batches` near-equal parts: the trajectories of one group, and the rows of one
    trajectory, stay together, and there are never more parts than groups.

    A group's advantages are relative to each other (a group baseline, or the other visits of
    a state, which episodes of one room share): split across optimizer steps, the parts that
    cancel in one gradient would pull separately.
    """
    group_keys, inverse = torch.unique(batch.group_ids, return_inverse=True)
    num = max(1, min(num_mini_batches, group_keys.numel()))
    order = (
        torch.randperm(group_keys.numel(), generator=generator)
        if generator is not None
        else torch.arange(group_keys.numel())
    )
    parts = []
    for groups in torch.tensor_split(order, num):
        picked = torch.isin(inverse, groups).nonzero().squeeze(-1)
        parts.append(batch.rows(picked))
    return parts


def micro_batches(batch: TrainBatch, max_tokens: int) -> list[TrainBatch]:
    """Split into micro-batches whose padded size (rows x longest row) stays within
    `max_tokens`; a row longer than the budget gets a micro-batch of its own.

    Rows are grouped by length (longest first) so little compute goes to padding; a batch
    without rows gives no micro-batch.
    """
    lengths = batch.attention_mask.sum(dim=1)
    order = torch.argsort(lengths, descending=True, stable=True).tolist()
    parts: list[list[int]] = []
    current: list[int] = []
    current_max = 0
    for row in order:
        length = int(lengths[row].item())
        new_max = max(current_max, length)
        if current and new_max * (len(current) + 1) > max_tokens:
            parts.append(current)
            current, new_max = [], length
        current.append(row)
        current_max = new_max
    if current:
        parts.append(current)
    return [batch.rows(part) for part in parts]
