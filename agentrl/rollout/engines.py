"""The trainer's engine: built from the config, and wrapped so sampling is reproducible."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from agentrl.rollout.engine import Completion, Engine, GenerationRequest


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any parts (stable across processes, unlike `hash`).

    >>> derive_seed(1, "0-3", 2) == derive_seed(1, "0-3", 2) != derive_seed(1, "0-3", 3)
    True
    """
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class SeededEngine:
    """Gives every request its own seed, derived from (the step's base seed, the episode's
    session id, the turn number within the episode), then forwards it to `inner`.

    The rollout passes one base seed per step in `SamplingParams.seed`; without this, every
    episode of a group would sample the same ids. Requests whose params carry no seed pass
    through unchanged.
    """

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self._turns: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()

    @property
    def weight_version(self) -> int:
        """The inner engine's weight version."""
        return self.inner.weight_version

    def _seeded(self, request: GenerationRequest) -> GenerationRequest:
        base = request.params.seed
        if base is None:
            return request
        key = (base, request.session_id or "")
        with self._lock:
            turn = self._turns.get(key, 0)
            self._turns[key] = turn + 1
            if len(self._turns) > 100_000:
                self._turns.clear()
        seed = derive_seed(base, key[1], turn) % 2**31
        return replace(request, params=replace(request.params, seed=seed))

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Seed each request, then generate with the inner engine."""
        return await self.inner.generate([self._seeded(r) for r in requests])

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Forward to the inner engine."""
        self.inner.update_weights(state_dict, version)

    def close(self) -> None:
        """Close the inner engine."""
        self.inner.close()


def build_engine(cfg: Any, model_path: Path) -> Engine:
    """The engine `cfg.engine` names (`hf` or `vllm`, in-process or as Ray replicas), loaded
    with the weights at `model_path`."""
    from agentrl.rollout.ray_engine import engine_from_config

    return engine_from_config(str(model_path), cfg.engine, dtype=cfg.model.dtype)
