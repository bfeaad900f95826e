"""What the rollout engine and the trainer ask of a Hugging Face key-value cache."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def full_attention_cache(cache: object) -> bool:
    """True for a `DynamicCache` whose layers are all plain `DynamicLayer`s: full attention,
    so a shared prefix's keys and values can be computed once and lent to every row (sliding
    windows and linear attention keep other layer kinds)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    layers = getattr(cache, "layers", None)
    return (
        isinstance(cache, DynamicCache)
        and bool(layers)
        and all(type(layer) is DynamicLayer for layer in layers)
    )


def common_prefix_len(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix all `prompts` share.

    >>> common_prefix_len([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]])
    2
    """
    first, n = prompts[0], min(len(p) for p in prompts)
    for i in range(n):
        if any(p[i] != first[i] for p in prompts[1:]):
            return i
    return n


def shared_prefix_batch(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    keep: int,
    min_shared: int,
    pad_id: int,
    device: torch.device | str,
) -> tuple[Any, int, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ready `prompts` for one batched forward that runs their common prefix once.

    The prefix all prompts share, short of the last `keep` ids of the shortest (each row runs
    those itself), runs once when it is at least `min_shared` ids long and the model's cache
    is full attention; its keys and values are repeated for every row. Each row's rest
    follows it, left-padded with `pad_id`, so a row reads `[prefix, pads, rest]` with the pads
    masked. Returns `(cache, shared, input_ids [n, w], attention_mask [n, shared + w],
    position_ids [n, w])`; `shared` is 0 (and the cache empty) when nothing is shared.
    """
    from transformers import DynamicCache

    n = len(prompts)
    cache = DynamicCache(config=model.config)
    shared = common_prefix_len(prompts) if n > 1 and min_shared > 0 else 0
    shared = min(shared, min(len(p) for p in prompts) - keep)
    if shared < max(min_shared, 1) or not full_attention_cache(cache):
        shared = 0
    if shared:
        model(
            input_ids=torch.tensor([list(prompts[0][:shared])], device=device),
            position_ids=torch.arange(shared, device=device).unsqueeze(0),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        cache.batch_repeat_interleave(n)
    width = max(len(p) for p in prompts) - shared
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    rest_mask = torch.zeros((n, width), dtype=torch.long)
    for i, prompt in enumerate(prompts):  # left padding of each row's rest
        rest = list(prompt[shared:])
        input_ids[i, width - len(rest) :] = torch.tensor(rest)
        rest_mask[i, width - len(rest) :] = 1
    input_ids, rest_mask = input_ids.to(device), rest_mask.to(device)
    position_ids = shared + (rest_mask.cumsum(-1) - 1).clamp(min=0)
    attention_mask = torch.cat([rest_mask.new_ones((n, shared)), rest_mask], dim=1)
    return cache, shared, input_ids, attention_mask, position_ids
