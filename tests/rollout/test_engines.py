"""The trainer's engine wrappers: the greedy cache answers repeated greedy prompts from the
completions the engine gave, and never across weight versions."""

from __future__ import annotations

import asyncio

import pytest

from agentrl.rollout.engine import Completion, GenerationRequest, SamplingParams, generate_sync
from agentrl.rollout.engines import GreedyCache

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=4)


class CountingEngine:
    """Completes prompt ids with their sum, once per call; counts what it generated."""

    def __init__(self) -> None:
        self.weight_version = 0
        self.generated: list[list[int]] = []
        self.fail = False

    async def generate(self, requests):
        await asyncio.sleep(0.01)  # in flight long enough for a twin to arrive
        if self.fail:
            raise RuntimeError("engine down")
        self.generated += [r.prompt_ids for r in requests]
        return [
            Completion(
                [sum(r.prompt_ids) + self.weight_version], [-0.5], "stop", self.weight_version
            )
            for r in requests
        ]

    def update_weights(self, state_dict, version: int) -> None:
        self.weight_version = version

    def close(self) -> None:
        pass


def _req(ids: list[int], params: SamplingParams = GREEDY, seed: int | None = None):
    from dataclasses import replace

    return GenerationRequest(ids, replace(params, seed=seed), session_id=str(seed))


def test_a_repeated_greedy_prompt_is_generated_once_per_weight_version() -> None:
    inner = CountingEngine()
    cache = GreedyCache(inner)
    first = generate_sync(cache, [_req([1, 2], seed=1), _req([3], seed=2)])
    again = generate_sync(cache, [_req([1, 2], seed=7)])  # another seed: greedy ignores it
    assert [c.token_ids for c in first] == [[3], [3]]
    assert again[0].token_ids == [3] and again[0].logp == [-0.5]
    assert inner.generated == [[1, 2], [3]]
    assert (cache.hits, cache.misses) == (1, 2)
    again[0].token_ids.append(99)  # the receiver's copy, not the cache's
    assert generate_sync(cache, [_req([1, 2])])[0].token_ids == [3]
    cache.update_weights({}, 1)
    assert generate_sync(cache, [_req([1, 2])])[0].token_ids == [4]  # new weights: generated
    assert inner.generated[-1] == [1, 2]


def test_twins_in_flight_are_generated_once_and_sampling_passes_through() -> None:
    inner = CountingEngine()
    cache = GreedyCache(inner)

    async def both():
        return await asyncio.gather(
            cache.generate([_req([5])]),
            cache.generate([_req([5])]),
            cache.generate([_req([5], SamplingParams(temperature=1.0))]),
            cache.generate([_req([5], SamplingParams(temperature=1.0))]),
        )

    results = asyncio.run(both())
    assert [r[0].token_ids for r in results] == [[5]] * 4
    assert inner.generated == [[5], [5], [5]]  # one greedy, two sampled
    assert (cache.hits, cache.misses) == (1, 1)


def test_a_failed_generation_is_not_cached() -> None:
    inner = CountingEngine()
    cache = GreedyCache(inner)
    inner.fail = True
    with pytest.raises(RuntimeError, match="engine down"):
        generate_sync(cache, [_req([1])])
    inner.fail = False
    assert generate_sync(cache, [_req([1])])[0].token_ids == [1]
    assert inner.generated == [[1]]
