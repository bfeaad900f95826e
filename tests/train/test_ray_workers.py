"""Two trainer ranks as Ray actors (FSDP2, gloo, loopback) train like `LocalBackend`."""

from __future__ import annotations

import sys

import pytest
import torch

pytestmark = [pytest.mark.ray, pytest.mark.distributed, pytest.mark.slow]

LR = 1e-2


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids [4, 10], loss mask [4, 9], advantages [4]."""
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 500, (4, 10), generator=gen)
    mask = torch.ones(4, 9)
    mask[:, :3] = 0
    return ids, mask, torch.tensor([1.0, -1.0, 0.5, 2.0])


def train_rows(backend, rows: list[int]) -> float:
    """One optimizer step on `rows` of the batch, token-mean over the global batch."""
    ids, mask, adv = batch()
    ids, mask, adv = ids[rows], mask[rows], adv[rows]
    num_tokens = backend.all_reduce_sum(mask.sum())
    logits = backend.model(input_ids=ids).logits[:, :-1]
    logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    backend.backward(-(logp * mask * adv[:, None]).sum() / num_tokens)
    return backend.step()


@pytest.fixture(scope="module")
def ray_cluster(ray_local):
    """The shared loopback Ray; this module's functions travel by value to the actors."""
    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray_local


def test_ray_fsdp2_ranks_match_local(ray_cluster) -> None:
    from agentrl.config import TrainConfig
    from agentrl.rollout.models import load_model
    from agentrl.runtime.local import LocalBackend
    from agentrl.train.config import OptimConfig, TrainerConfig
    from agentrl.train.ray_workers import RayTrainerGroup

    optim = OptimConfig(lr=LR, max_grad_norm=1.0)
    cfg = TrainConfig(
        optim=optim.model_dump(), trainer=TrainerConfig(backend="fsdp2", device="cpu"), seed=3
    )
    group = RayTrainerGroup(cfg, "tiny", num_ranks=2, lr=LR, num_optimizer_steps=2)
    try:
        assert group.backend_name == "FSDP2Backend"
        norms = group.map(train_rows, [([0, 1],), ([2, 3],)])
        weights = group.full_state_dict()
    finally:
        group.shutdown()

    torch.manual_seed(cfg.seed)
    local = LocalBackend(
        load_model("tiny", dtype="float32").train(),
        optim=optim,
        lr=LR,
        num_optimizer_steps=2,
        device=torch.device("cpu"),
    )
    ref_norm = train_rows(local, [0, 1, 2, 3])
    ref = local.full_state_dict()
    assert norms[0] == norms[1] == pytest.approx(ref_norm, rel=1e-4)
    assert set(weights) == set(ref)
    # Adam updates of ids with gradients near eps differ by up to ~1% of lr (see test_fsdp2).
    assert max(float((weights[k] - ref[k]).abs().max()) for k in ref) < 2e-4
