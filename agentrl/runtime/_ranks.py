"""What the single-controller loop needs from the process group: share, gather, agree.

Rank 0 runs the rollout with its engine; the other ranks only train. These helpers move the
rollout's records to every rank and keep the ranks making the same collective calls. With one
process (no process group, or a group of one) each is the identity, so `LocalBackend` runs
take the same code path without touching `torch.distributed`.
"""

from __future__ import annotations

from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


def world_size() -> int:
    """Ranks in the default process group (1 without one)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def broadcast_object(obj: T, src: int = 0) -> T:
    """`obj` from rank `src` on every rank (pickled; the others' `obj` is ignored)."""
    if world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def gather_objects(obj: T) -> list[T]:
    """Every rank's `obj`, in rank order, on every rank."""
    if world_size() == 1:
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def max_over_ranks(value: int) -> int:
    """The largest `value` any rank passed (e.g. micro-batch counts to pad to)."""
    if world_size() == 1:
        return value
    out = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(out, op=dist.ReduceOp.MAX)
    return int(out.item())


def shard_rows(num_rows: int, rank: int, num_ranks: int) -> list[int]:
    """The rows rank `rank` trains on: every `num_ranks`-th row from `rank` (may be empty).

    >>> shard_rows(5, 1, 2)
    [1, 3]
    """
    return list(range(rank, num_rows, num_ranks))


def barrier() -> None:
    """Wait until every rank got here (no-op on one process)."""
    if world_size() > 1:
        dist.barrier()
