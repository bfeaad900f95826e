"""The trainer's engine: built from the config, and wrapped so sampling is reproducible."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from agentrl.rollout.engine import Completion, Engine, GenerationRequest, SamplingParams


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


class GreedyCache:
    """Forwards to `inner`, but answers a greedy request (temperature 0) whose prompt ids and
    sampling settings it has seen under the current weight version with the completion the
    engine gave then: greedy decoding is a function of the prompt and the weights, so the
    result is one the engine produced for exactly that input. Identical requests in flight
    at once are generated once. All-action branches play on greedily from states their
    continuations share (`trainer.branch_temperature: 0`); the cache is emptied when the
    weight version changes.
    """

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self._done: dict[tuple[tuple[int, ...], SamplingParams], Completion] = {}
        self._pending: dict[tuple[tuple[int, ...], SamplingParams], asyncio.Future[Completion]] = {}
        self._version: int | None = None
        self.hits = 0
        """Greedy requests answered from the cache (or by a twin in flight)."""
        self.misses = 0
        """Greedy requests the engine generated."""

    @property
    def weight_version(self) -> int:
        """The inner engine's weight version."""
        return self.inner.weight_version

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Cached completions for repeated greedy requests; the rest from `inner`."""
        if self._version != self.inner.weight_version:
            self._done.clear()
            self._version = self.inner.weight_version
        out: list[Completion | None] = [None] * len(requests)
        todo: list[tuple[int, Any]] = []  # (request index, cache key or None)
        twins: list[tuple[int, asyncio.Future[Completion]]] = []
        for i, r in enumerate(requests):
            if r.params.temperature != 0:
                todo.append((i, None))
                continue
            key = (tuple(r.prompt_ids), replace(r.params, seed=None))
            if key in self._done:
                out[i] = _copy(self._done[key])
                self.hits += 1
            elif key in self._pending:
                twins.append((i, self._pending[key]))
                self.hits += 1
            else:
                self._pending[key] = asyncio.get_running_loop().create_future()
                todo.append((i, key))
                self.misses += 1
        try:
            results = await self.inner.generate([requests[i] for i, _ in todo]) if todo else []
        except BaseException as e:
            for _, key in todo:
                if key is not None:
                    future = self._pending.pop(key)
                    future.set_exception(e)
                    future.exception()  # retrieved: no "never retrieved" warning without twins
            raise
        for (i, key), completion in zip(todo, results, strict=True):
            out[i] = completion
            if key is not None:
                self._done[key] = _copy(completion)
                self._pending.pop(key).set_result(completion)
        for i, future in twins:
            out[i] = _copy(await future)
        return [c for c in out if c is not None]

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Forward to the inner engine."""
        self.inner.update_weights(state_dict, version)

    def close(self) -> None:
        """Close the inner engine."""
        self.inner.close()


def _copy(completion: Completion) -> Completion:
    """A completion whose lists its receiver may change without touching the cache's."""
    return replace(completion, token_ids=list(completion.token_ids), logp=list(completion.logp))


def build_engine(cfg: Any, model_path: Path) -> Engine:
    """The engine `cfg.engine` names (`hf` or `vllm`, in-process or as Ray replicas), loaded
    with the weights at `model_path`."""
    from agentrl.rollout.ray_engine import engine_from_config

    return engine_from_config(str(model_path), cfg.engine, dtype=cfg.model.dtype)
