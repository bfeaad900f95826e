"""The engine protocol: token ids in; sampled ids, their logprobs and a finish reason out."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    """0 disables top-k."""
    max_new_tokens: int = 128
    stop_token_ids: tuple[int, ...] = ()
    """Generation stops after sampling one of these (it is kept in the output). Empty: the
    engine's default, the model's eos ids."""
    seed: int | None = None
    """Seeds this request's sampler: same seed, prompt and weights give the same ids."""
    ignore_eos: bool = False
    """Never stop on a stop id; always sample `max_new_tokens` ids (benchmarks)."""


@dataclass
class GenerationRequest:
    """One prompt to complete."""

    prompt_ids: list[int]
    params: SamplingParams
    session_id: str | None = None
    """Episode key: requests of one episode go to the same replica (prefix cache)."""


@dataclass
class Completion:
    """What the engine sampled for one request."""

    token_ids: list[int]
    logp: list[float]
    """Logprob of each sampled id under the model's raw distribution: `log_softmax` of the
    raw logits at temperature 1, before top-k/top-p (vLLM's `logprobs_mode="raw_logprobs"`),
    whatever sampling settings were used. It is what the trainer computes teacher-forced."""
    finish_reason: str
    """`stop` (a stop id was sampled), `length` (max_new_tokens) or `abort`."""
    weight_version: int


@runtime_checkable
class Engine(Protocol):
    """A policy that generates completions; HFEngine, VLLMEngine and Ray replicas follow it."""

    weight_version: int

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Complete every request; concurrent calls are batched by the engine."""
        ...

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Load new policy weights in place: all of them, or some (a LoRA run sends only the
        layers its adapters change; the others keep their values). Later completions record
        `version`."""
        ...

    def close(self) -> None:
        """Release processes, threads and memory."""
        ...


def generate_sync(engine: Engine, requests: Sequence[GenerationRequest]) -> list[Completion]:
    """Run `engine.generate` from synchronous code."""
    return asyncio.run(engine.generate(requests))
