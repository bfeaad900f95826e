"""HFEngine: batching, sampling settings, logprob parity with a teacher-forced pass, weights."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from agentrl.rollout.engine import (
    Completion,
    Engine,
    GenerationRequest,
    SamplingParams,
    generate_sync,
)
from agentrl.rollout.hf_engine import HFEngine, filter_logits
from agentrl.rollout.models import load_model

PARITY_TOL = 1e-4
"""Max |engine logp - teacher-forced logp| allowed (fp32; measured gap is ~1e-6)."""


def teacher_forced_logp(
    model: torch.nn.Module, prompt: list[int], sampled: list[int]
) -> list[float]:
    """Logprob of each sampled id in one unpadded forward pass over prompt + sampled."""
    ids = torch.tensor([prompt + sampled])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)  # [T, V]
    positions = range(len(prompt) - 1, len(prompt) + len(sampled) - 1)
    return [float(logp[p, t]) for p, t in zip(positions, sampled, strict=True)]


@pytest.fixture(scope="module")
def engine(tiny_model_path: Path):
    eng = HFEngine(str(tiny_model_path), max_batch_size=8, batch_window_s=0.01)
    yield eng
    eng.close()


def _prompts() -> list[list[int]]:
    return [[1, 5 + i, 7, 9, 11 + 2 * i][: 2 + i % 4] + list(range(20, 20 + i)) for i in range(6)]


def test_follows_protocol(engine: HFEngine) -> None:
    assert isinstance(engine, Engine)


def test_logprob_parity_with_teacher_forcing(engine: HFEngine, tiny_model_path: Path) -> None:
    reference = load_model(str(tiny_model_path), dtype="float32")
    settings = [
        SamplingParams(max_new_tokens=24, seed=1, ignore_eos=True),
        SamplingParams(temperature=0.7, top_k=20, max_new_tokens=16, seed=2),
        SamplingParams(temperature=1.3, top_p=0.8, max_new_tokens=20, seed=3, ignore_eos=True),
        SamplingParams(temperature=0.0, max_new_tokens=8),
    ]
    requests = [GenerationRequest(p, settings[i % len(settings)]) for i, p in enumerate(_prompts())]
    completions = generate_sync(engine, requests)
    gaps = []
    for req, comp in zip(requests, completions, strict=True):
        assert len(comp.token_ids) == len(comp.logp) >= 1
        expected = teacher_forced_logp(reference, req.prompt_ids, comp.token_ids)
        gaps += [abs(a - b) for a, b in zip(comp.logp, expected, strict=True)]
    print(f"HFEngine parity: max |logp gap| = {max(gaps):.2e} over {len(gaps)} tokens")
    assert max(gaps) < PARITY_TOL


def test_finish_reasons_and_stop_ids(engine: HFEngine) -> None:
    prompt = [1, 30, 31, 32]
    free = generate_sync(
        engine,
        [GenerationRequest(prompt, SamplingParams(max_new_tokens=6, seed=0, ignore_eos=True))],
    )[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 6
    # Make the 3rd sampled id a stop id: same seed, same ids up to and including it.
    stop_id = free.token_ids[2]
    params = SamplingParams(max_new_tokens=6, seed=0, stop_token_ids=(stop_id,))
    stopped = generate_sync(engine, [GenerationRequest(prompt, params)])[0]
    first = free.token_ids.index(stop_id)
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == free.token_ids[: first + 1]


def test_seed_is_reproducible_across_batches(engine: HFEngine) -> None:
    params = SamplingParams(max_new_tokens=12, seed=42, ignore_eos=True)
    alone = generate_sync(engine, [GenerationRequest([1, 40, 41], params)])[0]
    others = [GenerationRequest(p, SamplingParams(max_new_tokens=5, seed=None)) for p in _prompts()]
    batched = generate_sync(engine, [*others, GenerationRequest([1, 40, 41], params)])[-1]
    assert batched.token_ids == alone.token_ids
    unseeded = generate_sync(
        engine,
        [GenerationRequest([1, 40, 41], SamplingParams(max_new_tokens=12, ignore_eos=True))] * 2,
    )
    assert unseeded[0].token_ids != unseeded[1].token_ids  # fresh randomness per request


def test_concurrent_calls_share_batches(engine: HFEngine) -> None:
    async def episode(i: int) -> Completion:
        params = SamplingParams(max_new_tokens=4 + i % 3, seed=i, ignore_eos=True)
        return (await engine.generate([GenerationRequest([1, 50 + i], params)]))[0]

    async def main() -> list[Completion]:
        return await asyncio.gather(*(episode(i) for i in range(16)))

    before = dict(engine.stats)
    results = asyncio.run(main())
    assert [len(c.token_ids) for c in results] == [4 + i % 3 for i in range(16)]
    assert engine.stats["requests"] - before["requests"] == 16
    assert engine.stats["batches"] - before["batches"] <= 4  # 16 calls, batches of up to 8


def test_filter_logits_top_k_top_p() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    kept = torch.isfinite(filter_logits(logits, SamplingParams(top_k=2)))
    assert kept.tolist() == [True, True, False, False]
    kept = torch.isfinite(filter_logits(logits, SamplingParams(top_p=0.7)))
    assert kept.tolist() == [True, True, False, False]
    kept = torch.isfinite(filter_logits(logits, SamplingParams(top_p=0.4)))
    assert kept.tolist() == [True, False, False, False]


def test_update_weights_in_place(tiny_model_path: Path) -> None:
    engine = HFEngine(str(tiny_model_path))
    try:
        other = load_model(str(tiny_model_path), dtype="float32")
        torch.manual_seed(7)
        with torch.no_grad():
            for p in other.parameters():
                p.add_(0.05 * torch.randn_like(p))
        params = SamplingParams(max_new_tokens=10, seed=5, ignore_eos=True)
        before = generate_sync(engine, [GenerationRequest([1, 60, 61], params)])[0]
        engine.update_weights(other.state_dict(), version=3)
        after = generate_sync(engine, [GenerationRequest([1, 60, 61], params)])[0]
        assert (before.weight_version, after.weight_version) == (0, 3)
        expected = teacher_forced_logp(other, [1, 60, 61], after.token_ids)
        assert max(abs(a - b) for a, b in zip(after.logp, expected, strict=True)) < PARITY_TOL
        assert after.logp != before.logp
        with pytest.raises(KeyError, match="unknown parameter"):
            engine.update_weights({"not.a.weight": torch.zeros(1)}, version=4)
        assert engine.weight_version == 3
    finally:
        engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        generate_sync(engine, [GenerationRequest([1], SamplingParams())])


def test_engine_from_config_builds_hf(tiny_model_path: Path) -> None:
    from agentrl.rollout.config import EngineConfig
    from agentrl.rollout.ray_engine import engine_from_config

    engine = engine_from_config(str(tiny_model_path), EngineConfig(max_batch_size=4))
    try:
        assert isinstance(engine, HFEngine) and engine.max_batch_size == 4
        params = SamplingParams(max_new_tokens=3, ignore_eos=True)
        assert len(generate_sync(engine, [GenerationRequest([1, 2], params)])[0].token_ids) == 3
    finally:
        engine.close()


def test_requests_join_a_running_batch(engine: HFEngine, tiny_model_path: Path) -> None:
    """Continuous batching: requests that arrive while a long batch runs join it at the next
    step (and finish first), with the same ids and logprobs they get alone."""
    reference = load_model(str(tiny_model_path), dtype="float32")
    long_params = SamplingParams(max_new_tokens=400, seed=11, ignore_eos=True)
    short = [
        GenerationRequest(p, SamplingParams(max_new_tokens=6, seed=20 + i, ignore_eos=True))
        for i, p in enumerate(_prompts()[:3])
    ]
    alone = generate_sync(engine, short)

    async def main() -> tuple[list[str], list[Completion]]:
        order: list[str] = []

        async def run(name: str, requests: list[GenerationRequest]) -> list[Completion]:
            out = await engine.generate(requests)
            order.append(name)
            return out

        start = engine.stats["forward_calls"]
        long_task = asyncio.create_task(run("long", [GenerationRequest([1, 2, 3], long_params)]))
        while engine.stats["forward_calls"] < start + 2:  # the long request is decoding now
            await asyncio.sleep(0.005)
        before = engine.stats["forward_calls"]
        joined = await asyncio.gather(*(run(f"short{i}", [r]) for i, r in enumerate(short)))
        assert engine.stats["forward_calls"] - before < 60  # not after the 400-step batch
        await long_task
        return order, [c[0] for c in joined]

    order, joined = asyncio.run(main())
    assert order[-1] == "long"
    for req, a, b in zip(short, alone, joined, strict=True):
        assert a.token_ids == b.token_ids
        expected = teacher_forced_logp(reference, req.prompt_ids, b.token_ids)
        assert max(abs(x - y) for x, y in zip(b.logp, expected, strict=True)) < PARITY_TOL


def test_update_weights_waits_for_running_rows(tiny_model_path: Path) -> None:
    """A completion comes from one weight version: update_weights waits for the running
    batch, and requests queued meanwhile start on the new weights."""
    engine = HFEngine(str(tiny_model_path), max_batch_size=4)
    try:
        state = {k: v.clone() for k, v in engine.model.state_dict().items()}
        long_params = SamplingParams(max_new_tokens=300, seed=1, ignore_eos=True)

        async def main() -> tuple[Completion, Completion]:
            first = asyncio.create_task(engine.generate([GenerationRequest([1, 2], long_params)]))
            while engine.stats["forward_calls"] < 2:  # decoding now
                await asyncio.sleep(0.005)
            await asyncio.to_thread(engine.update_weights, state, 7)
            # the batch's results are in; let the task that awaits them wake up (on a loaded
            # machine it had not yet been scheduled), far too few turns for 300 new tokens
            for _ in range(3):
                await asyncio.sleep(0)
            assert first.done()  # update_weights returned only after the batch finished
            second = await engine.generate([GenerationRequest([1, 2], long_params)])
            return (await first)[0], second[0]

        first, second = asyncio.run(main())
        assert (first.weight_version, second.weight_version) == (0, 7)
        assert first.token_ids == second.token_ids  # same weights, same seed
    finally:
        engine.close()


def test_a_bad_request_fails_alone(engine: HFEngine) -> None:
    async def main() -> list[object]:
        good = engine.generate([GenerationRequest([1, 2], SamplingParams(max_new_tokens=4))])
        bad = engine.generate([GenerationRequest([], SamplingParams(max_new_tokens=4))])
        return await asyncio.gather(good, bad, return_exceptions=True)

    good, bad = asyncio.run(main())
    assert isinstance(good, list) and len(good[0].token_ids) >= 1
    assert isinstance(bad, ValueError) and "prompt id" in str(bad)


def test_a_shared_prompt_prefix_runs_once_with_the_ids_and_logprobs_of_unshared_rows(
    tiny_model_path: Path,
) -> None:
    """Prompts that begin alike (a system prompt) prefill that prefix once; every row then
    samples the ids it samples alone, with logprobs that match a teacher-forced pass."""
    reference = load_model(str(tiny_model_path), dtype="float32")
    system = [1] + list(range(60, 99))  # 40 shared ids
    rests = [[7], [8, 9, 10], [11, 12], [13, 14, 15, 16, 17], []]  # the last: the prefix alone
    requests = [
        GenerationRequest(
            system + rest,
            SamplingParams(temperature=1.0, max_new_tokens=8, seed=i, ignore_eos=True),
        )
        for i, rest in enumerate(rests)
    ]
    eng = HFEngine(str(tiny_model_path), max_batch_size=8, batch_window_s=0.05)
    try:
        alone = [generate_sync(eng, [r])[0] for r in requests]  # one row: nothing shared
        assert eng.stats["shared_prefix_ids"] == 0
        together = generate_sync(eng, requests)
        # one prefill of 5 rows; the prefix is cut to 39 so the shortest prompt keeps an id
        assert eng.stats["shared_prefix_ids"] == 39 * 4
    finally:
        eng.close()
    for req, a, b in zip(requests, alone, together, strict=True):
        assert a.token_ids == b.token_ids
        expected = teacher_forced_logp(reference, req.prompt_ids, b.token_ids)
        assert max(abs(x - y) for x, y in zip(b.logp, expected, strict=True)) < PARITY_TOL
