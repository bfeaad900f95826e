"""`SeededEngine`: one seed per (step seed, episode, turn), so a group's episodes differ and a
rerun samples the same ids. `default_engine`: the engine a command samples with when none is
named."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import torch

from agentrl.rollout.engine import Completion, GenerationRequest, SamplingParams
from agentrl.rollout.engines import SeededEngine, derive_seed


class _Recorder:
    """An engine that records the seeds it is asked to use."""

    weight_version = 7

    def __init__(self) -> None:
        self.seeds: list[int | None] = []
        self.updates: list[int] = []
        self.closed = False

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        self.seeds += [r.params.seed for r in requests]
        return [Completion([1], [0.0], "stop", self.weight_version) for _ in requests]

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        self.updates.append(version)

    def close(self) -> None:
        self.closed = True


def _req(seed: int | None, session: str | None) -> GenerationRequest:
    return GenerationRequest([1, 2], SamplingParams(seed=seed), session_id=session)


def _seeds(requests: list[GenerationRequest]) -> list[int | None]:
    inner = _Recorder()
    engine = SeededEngine(inner)
    for r in requests:  # one request at a time: the turns of each episode in order
        asyncio.run(engine.generate([r]))
    return inner.seeds


def test_episodes_and_turns_get_their_own_reproducible_seeds() -> None:
    requests = [_req(5, "0-0"), _req(5, "0-1"), _req(5, "0-0"), _req(6, "0-0")]
    seeds = _seeds(requests)
    assert len(set(seeds)) == 4  # episodes differ, turns differ, steps differ
    assert seeds == _seeds(requests)  # and a rerun draws the same seeds
    assert seeds[0] == derive_seed(5, "0-0", 0) % 2**31
    assert seeds[2] == derive_seed(5, "0-0", 1) % 2**31  # the episode's second turn


def test_unseeded_requests_pass_through_and_calls_are_forwarded() -> None:
    inner = _Recorder()
    engine = SeededEngine(inner)
    asyncio.run(engine.generate([_req(None, "0-0")]))
    assert inner.seeds == [None]
    assert engine.weight_version == 7
    engine.update_weights({}, 8)
    engine.close()
    assert inner.updates == [8] and inner.closed


def test_default_engine_is_vllm_where_installed_except_for_small_models(tmp_path) -> None:
    from safetensors.torch import save_file

    from agentrl.rollout.engines import FAST_ENGINE_MIN_WEIGHTS, count_weights, default_engine

    small, large = tmp_path / "small", tmp_path / "large"
    small.mkdir()
    large.mkdir()
    save_file({"w": torch.zeros(3, 4)}, str(small / "model.safetensors"))
    half = FAST_ENGINE_MIN_WEIGHTS // 2  # two files, as sharded checkpoints are
    save_file({"a": torch.zeros(half, dtype=torch.int8)}, str(large / "model-1.safetensors"))
    save_file({"b": torch.zeros(half, dtype=torch.int8)}, str(large / "model-2.safetensors"))
    assert count_weights(small) == 12 and count_weights(large) == FAST_ENGINE_MIN_WEIGHTS

    assert default_engine(large, vllm_installed=True) == ("vllm", "vllm is installed")
    assert default_engine(large, vllm_installed=False) == ("hf", "vllm is not installed")
    name, why = default_engine(small, vllm_installed=True)
    assert name == "hf" and "0.0 M weights" in why
    # a folder without safetensors files (an HF id not downloaded yet): the fast engine
    assert default_engine(tmp_path / "none", vllm_installed=True)[0] == "vllm"


def test_tiny_samples_on_hf_and_smollm2_sized_models_on_vllm(tiny_model_path) -> None:
    from agentrl.rollout.engines import default_engine

    assert default_engine(tiny_model_path, vllm_installed=True)[0] == "hf"
