"""One forward of the prefix that every row of a batch shares (the system prompt).

Per-turn samples (`rollout.history_turns`, templates that are not prefix-preserving) all begin
with the same rendered system prompt, often most of each row. `shared_prefix_logits` runs that
prefix once, for one row, lends its keys and values to every row (a broadcast view, so the
backward pass sums the rows' gradients into it), and runs only the rest of each row:

    logits = shared_prefix_logits(model, input_ids, attention_mask, keep)   # [B, K, V]

It equals `model(input_ids, attention_mask, logits_to_keep=keep).logits` up to float rounding,
gradients included. The shared part ends at the first kept position at the latest. It is the
plain forward when the rows share fewer than `MIN_SHARED` ids, with gradient checkpointing
(which turns the cache off), or when the model's cache is not a plain `DynamicCache` of
full-attention layers (sliding windows, linear attention, ...).

`shared_prefix_hidden` does the same for a backbone's last hidden states (the critic's value
head reads them).
"""

from __future__ import annotations

import torch

from agentrl._kvcache import full_attention_cache

MIN_SHARED = 32
"""Shortest shared prefix worth a separate forward."""


def shared_prefix_len(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """Leading columns where every row holds the same real (unpadded) id as row 0.

    >>> ids = torch.tensor([[5, 6, 7, 8], [5, 6, 9, 0]])
    >>> shared_prefix_len(ids, torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]))
    2
    """
    same = (input_ids == input_ids[:1]).all(dim=0) & (attention_mask > 0).all(dim=0)
    diverged = (~same).nonzero()
    return int(diverged[0, 0]) if diverged.numel() else int(input_ids.shape[1])


def shared_prefix_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    keep: torch.Tensor,
) -> torch.Tensor:
    """Logits at positions `keep` ([K], ascending) of every row: [B, K, V].

    `input_ids` are right-padded. The prefix shared by all rows is computed once when that
    pays (see the module docstring); otherwise this is the plain forward.
    """
    shared = _shared_len(model, input_ids, attention_mask, int(keep[0]) if keep.numel() else None)
    cache = _prefix_cache(model, input_ids, attention_mask, shared, logits_to_keep=1)
    if cache is None:
        return _plain(model, input_ids, attention_mask, keep)
    tail = model(
        input_ids=input_ids[:, shared:],
        attention_mask=attention_mask,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=keep - shared,
    )
    return tail.logits


def shared_prefix_hidden(
    backbone: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    start: int,
) -> tuple[torch.Tensor, int]:
    """`(hidden, offset)`: the backbone's last hidden states of every row from column
    `offset` on (`[B, T - offset, H]`), where `offset` <= `start`.

    The columns before `offset` are the prefix all rows share, run once for one row (see the
    module docstring); `offset` is 0 (the plain forward) when that does not pay.
    """
    shared = _shared_len(backbone, input_ids, attention_mask, start)
    cache = _prefix_cache(backbone, input_ids, attention_mask, shared)
    if cache is None:
        out = backbone(input_ids=input_ids, attention_mask=attention_mask)
        return out.last_hidden_state, 0
    tail = backbone(
        input_ids=input_ids[:, shared:],
        attention_mask=attention_mask,
        past_key_values=cache,
        use_cache=True,
    )
    return tail.last_hidden_state, shared


def _shared_len(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    first_needed: int | None,
) -> int:
    """Columns to run once for all rows: the shared prefix, ending at `first_needed` (the
    first position whose output is wanted) at the latest and leaving every row an id; 0 when
    sharing does not pay or cannot work (one row, a short prefix, gradient checkpointing)."""
    shared = shared_prefix_len(input_ids, attention_mask)
    if first_needed is not None:
        shared = min(shared, first_needed)  # wanted positions come from the second forward
    shared = min(shared, input_ids.shape[1] - 1)
    if input_ids.shape[0] < 2 or shared < MIN_SHARED:
        return 0
    if getattr(model, "is_gradient_checkpointing", False):
        return 0
    return shared


def _prefix_cache(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    shared: int,
    **kwargs: object,
) -> object | None:
    """The keys and values of the first `shared` columns, computed for row 0 and lent to
    every row (a broadcast view); None when `shared` is 0 or the cache is not plain."""
    if not shared:
        return None
    head = model(
        input_ids=input_ids[:1, :shared],
        attention_mask=attention_mask[:1, :shared],
        use_cache=True,
        **kwargs,
    )
    cache = head.past_key_values
    if not full_attention_cache(cache):
        return None
    rows = input_ids.shape[0]
    for layer in cache.layers:
        layer.keys = layer.keys.expand(rows, -1, -1, -1)
        layer.values = layer.values.expand(rows, -1, -1, -1)
    return cache


def _plain(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    keep: torch.Tensor,
) -> torch.Tensor:
    return model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep).logits
