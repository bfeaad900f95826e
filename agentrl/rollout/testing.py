"""A scripted engine for tests and benchmarks: no model, reproducible completions."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.rollout.engine import Completion, GenerationRequest


@dataclass
class ScriptedEngine:
    """A deterministic fake engine for tests and benchmarks.

    Each completion is a random run of ids (seeded by the prompt length and a counter, so
    runs are reproducible) with random logprobs; with probability `p_stop` it ends on the
    first of the request's stop ids (finish reason `stop`), else it fills `max_new_tokens`
    (finish reason `length`). Every request and completion is recorded in `log` so tests can
    compare what the engine saw with what the trainer will see. `delay_s` simulates
    generation time (awaited, so concurrent episodes overlap like on a batching engine).
    """

    vocab_ids: Sequence[int]
    """Ids to sample from (usually the tokenizer's non-special ids)."""
    seed: int = 0
    p_stop: float = 0.7
    """Chance that a completion ends on a stop id rather than by length."""
    min_new_tokens: int = 1
    delay_s: float = 0.0
    weight_version: int = 0
    fail_on_call: int | None = None
    """Raise `RuntimeError` on this call number (0-based), to test engine errors."""
    log: list[tuple[GenerationRequest, Completion]] = field(default_factory=list)
    num_calls: int = 0

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Return one scripted completion per request."""
        call = self.num_calls
        self.num_calls += 1
        if self.fail_on_call is not None and call == self.fail_on_call:
            raise RuntimeError(f"scripted engine failure on call {call}")
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        out = []
        for req in requests:
            rng = random.Random(hash((self.seed, call, len(req.prompt_ids), req.session_id)))
            limit = req.params.max_new_tokens
            stops = req.params.stop_token_ids
            if stops and limit > 0 and rng.random() < self.p_stop:
                n = rng.randint(min(self.min_new_tokens, limit), limit)
                ids = [rng.choice(self.vocab_ids) for _ in range(n - 1)] + [stops[0]]
                finish = "stop"
            else:
                ids = [rng.choice(self.vocab_ids) for _ in range(limit)]
                finish = "length"
            logp = [-rng.random() * 5 for _ in ids]
            comp = Completion(list(ids), logp, finish, self.weight_version)
            self.log.append((req, comp))
            out.append(comp)
        return out

    def update_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Record the new version (no weights to load)."""
        self.weight_version = version

    def close(self) -> None:
        """Nothing to release."""
