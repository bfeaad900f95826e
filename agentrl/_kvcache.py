"""What the rollout engine and the trainer ask of a Hugging Face key-value cache."""

from __future__ import annotations


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
