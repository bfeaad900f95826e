"""HFEngine's batched paths: the sampler (distribution, masks, greedy rows, logprobs,
seeding) and completions resolved with one event-loop wake-up per loop."""

from __future__ import annotations

import asyncio
import random

import torch

from agentrl.rollout.engine import Completion, GenerationRequest, SamplingParams
from agentrl.rollout.hf_engine import RowSampler, _Job, filter_logits, resolve_all, sample_rows

PROBS = torch.tensor([0.5, 0.3, 0.15, 0.05])


def _samplers(n: int, params: SamplingParams, seed: int = 0) -> list[RowSampler]:
    return [RowSampler.from_params(params, seed + i) for i in range(n)]


def test_frequencies_follow_the_tempered_distribution() -> None:
    n = 20_000
    logits = torch.log(PROBS).repeat(n, 1)
    for temperature in (1.0, 0.5):
        ids, _ = sample_rows(logits, _samplers(n, SamplingParams(temperature=temperature)))
        freq = torch.bincount(ids, minlength=4).double() / n
        expected = torch.softmax(torch.log(PROBS).double() / temperature, -1)
        assert torch.allclose(freq, expected, atol=0.015), (temperature, freq, expected)


def test_masked_ids_are_never_sampled() -> None:
    n = 4000
    logits = torch.log(PROBS).repeat(n, 1)
    for params in (SamplingParams(top_k=2), SamplingParams(top_p=0.7), SamplingParams(top_p=0.4)):
        ids, _ = sample_rows(logits, _samplers(n, params))
        allowed = torch.isfinite(filter_logits(torch.log(PROBS), params)).nonzero().flatten()
        assert set(ids.tolist()) == set(allowed.tolist()), params


def test_mixed_batch_greedy_rows_and_raw_logprobs() -> None:
    torch.manual_seed(0)
    logits = torch.randn(6, 50)
    params = [
        SamplingParams(temperature=0.0),
        SamplingParams(top_k=3),
        SamplingParams(top_p=0.5, temperature=0.7),
        SamplingParams(temperature=0.0),
        SamplingParams(),
        SamplingParams(top_k=1),
    ]
    samplers = [RowSampler.from_params(p, i) for i, p in enumerate(params)]
    ids, logp = sample_rows(logits, samplers)
    assert ids[0] == logits[0].argmax() and ids[3] == logits[3].argmax()
    assert ids[5] == logits[5].argmax()  # top-1 leaves one id
    assert ids[1] in torch.topk(logits[1], 3).indices
    expected = torch.log_softmax(logits, -1).gather(1, ids.unsqueeze(1)).squeeze(1)
    assert torch.equal(logp, expected)  # temperature-1 logprob of the sampled id


def test_a_rows_ids_depend_only_on_its_seed() -> None:
    torch.manual_seed(1)
    logits = torch.randn(8, 30)
    params = SamplingParams()
    alone = int(sample_rows(logits[3:4], [RowSampler.from_params(params, 7)])[0])
    crowd = [RowSampler.from_params(params, random.randrange(1 << 30)) for _ in range(8)]
    crowd[3] = RowSampler.from_params(params, 7)
    assert int(sample_rows(logits, crowd)[0][3]) == alone
    again = [RowSampler.from_params(params, 7)]
    seq_a = [int(sample_rows(logits[:1], again)[0]) for _ in range(20)]
    again = [RowSampler.from_params(params, 7)]
    seq_b = [int(sample_rows(logits[:1], again)[0]) for _ in range(20)]
    assert seq_a == seq_b and len(set(seq_a)) > 1


def test_completions_resolve_with_one_wake_up_per_loop() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        wake_ups = []
        original = loop.call_soon_threadsafe

        def counting(callback, *args):  # type: ignore[no-untyped-def]
            wake_ups.append(callback)
            return original(callback, *args)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        jobs = [_Job(GenerationRequest([1], SamplingParams()), loop.create_future(), loop)]
        jobs += [_Job(GenerationRequest([1], SamplingParams()), loop.create_future(), loop)]
        jobs[1].future.cancel()  # a caller that gave up is skipped, not an error
        done = Completion([5], [-0.1], "stop", 3)
        resolve_all([(jobs[0], done), (jobs[1], done)])
        assert await jobs[0].future is done
        assert len(wake_ups) == 1

    asyncio.run(main())
