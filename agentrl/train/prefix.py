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
"""

from __future__ import annotations

import torch

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


def _full_attention_cache(cache: object) -> bool:
    """True for a `DynamicCache` whose layers are all plain `DynamicLayer`s."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    layers = getattr(cache, "layers", None)
    return (
        isinstance(cache, DynamicCache)
        and bool(layers)
        and all(type(layer) is DynamicLayer for layer in layers)
    )


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
    rows = input_ids.shape[0]
    shared = shared_prefix_len(input_ids, attention_mask)
    if keep.numel():
        shared = min(shared, int(keep[0]))  # kept positions come from the second forward
    shared = min(shared, input_ids.shape[1] - 1)  # leave every row at least one id
    if rows < 2 or shared < MIN_SHARED or getattr(model, "is_gradient_checkpointing", False):
        return _plain(model, input_ids, attention_mask, keep)
    head = model(
        input_ids=input_ids[:1, :shared],
        attention_mask=attention_mask[:1, :shared],
        use_cache=True,
        logits_to_keep=1,
    )
    cache = head.past_key_values
    if not _full_attention_cache(cache):
        return _plain(model, input_ids, attention_mask, keep)
    for layer in cache.layers:
        layer.keys = layer.keys.expand(rows, -1, -1, -1)
        layer.values = layer.values.expand(rows, -1, -1, -1)
    tail = model(
        input_ids=input_ids[:, shared:],
        attention_mask=attention_mask,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=keep - shared,
    )
    return tail.logits


def _plain(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    keep: torch.Tensor,
) -> torch.Tensor:
    return model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep).logits
