"""LocalBackend save/load and checkpoint round trips (tiny model, CPU)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from agentrl.config import TrainConfig
from agentrl.rollout.models import load_model
from agentrl.runtime.backend import Backend
from agentrl.train.backends import backend_for_run
from agentrl.train.checkpoint import (
    TrainerState,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    model_dir,
    save_checkpoint,
)


def _backend() -> Backend:
    torch.manual_seed(0)
    cfg = TrainConfig()
    return backend_for_run(cfg, load_model("tiny"), lr=1e-3, num_optimizer_steps=10)


def _train_once(backend: Backend) -> float:
    ids = torch.tensor([[1, 5, 9, 3, 4, 7]])
    out = backend.model(input_ids=ids, attention_mask=torch.ones_like(ids))
    loss = out.logits.float().logsumexp(-1).mean()
    backend.backward(loss)
    return backend.step()


def test_local_backend_step_changes_weights_and_clips() -> None:
    backend = _backend()
    assert isinstance(backend, Backend)
    before = {k: v.clone() for k, v in backend.full_state_dict().items()}
    grad_norm = _train_once(backend)
    after = backend.full_state_dict()
    assert grad_norm > 0
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in backend.model.parameters())


def test_checkpoint_round_trip_restores_weights_optimizer_rng(tmp_path) -> None:
    backend = _backend()
    _train_once(backend)
    generator = torch.Generator().manual_seed(3)
    for step in (1, 2, 3):
        save_checkpoint(
            tmp_path,
            TrainerState(step=step, seed_cursor=4 * step, weight_version=step),
            policy=backend,
            generator=generator,
            keep_last=2,
        )
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000002", "step-000003"]
    expected_weights = {k: v.clone() for k, v in backend.full_state_dict().items()}
    expected_random = (
        random.random(),
        np.random.rand(),
        torch.rand(1).item(),
        torch.rand(1, generator=generator).item(),
    )
    expected_next_norm = _train_once(backend)

    restored = _backend()
    restored_gen = torch.Generator().manual_seed(99)
    state = load_checkpoint(latest_checkpoint(tmp_path), policy=restored, generator=restored_gen)
    assert state == TrainerState(step=3, seed_cursor=12, weight_version=3)
    assert state.collapse_history == {}
    for k, v in restored.full_state_dict().items():
        assert torch.equal(v, expected_weights[k]), k
    assert (
        random.random(),
        np.random.rand(),
        torch.rand(1).item(),
        torch.rand(1, generator=restored_gen).item(),
    ) == expected_random
    assert _train_once(restored) == pytest.approx(expected_next_norm, rel=1e-6)
    assert restored.lr == backend.lr


def test_checkpoint_model_loads_with_transformers(tmp_path) -> None:
    backend = _backend()
    save_checkpoint(tmp_path, TrainerState(step=1), policy=backend)
    model = AutoModelForCausalLM.from_pretrained(model_dir(tmp_path))
    for k, v in model.state_dict().items():
        assert torch.equal(v, backend.full_state_dict()[k]), k
    assert not any(p.name.startswith(".tmp") for p in (tmp_path / "checkpoints").iterdir())


def test_lora_backend_trains_adapters_and_exports_merged_weights(tmp_path) -> None:
    cfg = TrainConfig.model_validate({"trainer": {"lora": {"enabled": True, "r": 4}}})
    torch.manual_seed(0)
    backend = backend_for_run(cfg, load_model("tiny"), lr=1e-2, num_optimizer_steps=10)
    before = {k: v.clone() for k, v in backend.full_state_dict().items()}
    every = set(load_model("tiny").state_dict())
    assert set(before) < every  # plain HF names for the engines, the adapted layers only
    assert {k for k in every if ".self_attn." in k} == set(before)
    _train_once(backend)
    after = backend.full_state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all("proj" in k for k in changed)  # only adapted layers move
    save_checkpoint(tmp_path, TrainerState(step=1), policy=backend)
    merged = AutoModelForCausalLM.from_pretrained(model_dir(tmp_path))
    for k, v in after.items():
        assert torch.allclose(merged.state_dict()[k], v, atol=1e-6), k
    restored = backend_for_run(cfg, load_model("tiny"), lr=1e-2, num_optimizer_steps=10)
    load_checkpoint(latest_checkpoint(tmp_path), policy=restored)
    for k, v in restored.full_state_dict().items():
        assert torch.equal(v, after[k]), k


def test_gradient_checkpointing_gives_the_same_gradients() -> None:
    norms = []
    for checkpointing in (False, True):
        cfg = TrainConfig.model_validate({"trainer": {"gradient_checkpointing": checkpointing}})
        torch.manual_seed(0)
        backend = backend_for_run(cfg, load_model("tiny"), lr=1e-3, num_optimizer_steps=10)
        norms.append(_train_once(backend))
    assert norms[0] == pytest.approx(norms[1], rel=1e-5)
