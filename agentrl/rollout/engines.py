"""The trainer's engine: built from the config, and wrapped so sampling is reproducible;
the engine a command samples with when none is named (`default_engine`)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
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


FAST_ENGINE_MIN_WEIGHTS = 10_000_000
"""Models with fewer weights sample on `hf` when no engine is named: on the 1.2 M-weight
`tiny` model the HF engine samples about 5,000 tokens/s on one core against vLLM's 1,600,
and vLLM's 17-33 s start buys nothing there (STACK.md). SmolLM2-135M samples several times
faster on vLLM (benchmarks/smollm2_engines.py)."""


def count_weights(model_path: Path) -> int | None:
    """The weights in the safetensors files of the model folder `model_path` (read from their
    headers, nothing loaded), or None when it has none.

    >>> import tempfile, torch
    >>> from safetensors.torch import save_file
    >>> folder = Path(tempfile.mkdtemp())
    >>> save_file({"a": torch.zeros(2, 3), "b": torch.zeros(4)}, str(folder / "model.safetensors"))
    >>> count_weights(folder), count_weights(folder / "none")
    (10, None)
    """
    files = sorted(Path(model_path).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for file in files:
        with open(file, "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        for name, entry in header.items():
            if name != "__metadata__":
                total += math.prod(entry["shape"])
    return total


def default_engine(model_path: Path, *, vllm_installed: bool | None = None) -> tuple[str, str]:
    """The engine that samples the model folder `model_path` when no engine is named
    (`--engine`, or a model folder's recorded `engine.name`), and why: `vllm` when it is
    installed, except for models under `FAST_ENGINE_MIN_WEIGHTS` weights, else `hf`.

    `vllm_installed` None looks for the `vllm` module.
    """
    if vllm_installed is None:
        vllm_installed = importlib.util.find_spec("vllm") is not None
    if not vllm_installed:
        return "hf", "vllm is not installed"
    num = count_weights(model_path)
    if num is not None and num < FAST_ENGINE_MIN_WEIGHTS:
        return "hf", f"{num / 1e6:.1f} M weights: faster on hf than on vllm"
    return "vllm", "vllm is installed"


def build_engine(cfg: Any, model_path: Path) -> Engine:
    """The engine `cfg.engine` names (`hf` or `vllm`, in-process or as Ray replicas), loaded
    with the weights at `model_path`."""
    from agentrl.rollout.ray_engine import engine_from_config

    return engine_from_config(str(model_path), cfg.engine, dtype=cfg.model.dtype)
