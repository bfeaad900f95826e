"""DeepSpeed ZeRO-2 and ZeRO-3 with 2 CPU ranks (gloo, torch AdamW) equal the single-process
`LocalBackend` on the same batch.

One torchrun launch (`_dist_worker.py`) runs both stages; each test reads one result. The
first launch on a machine compiles DeepSpeed's shared-memory comm op (cached afterwards).
Gradients are reduced only inside the engine's `step` (caller-owned accumulation), so the
comparison is loss, grad norm and the weights after each optimizer step; tolerances as in
`test_fsdp2.py`.
"""

from __future__ import annotations

import pytest
from test_fsdp2 import check_checkpoint_round_trip, check_matches_local, check_variants

from agentrl.runtime.deepspeed_backend import deepspeed_config
from agentrl.train.config import OptimConfig

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def zero(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Results of the 2-rank ZeRO-2 and ZeRO-3 runs."""
    from _dist_worker import launch

    return launch("zero2,zero3", tmp_path_factory.mktemp("deepspeed"), timeout=480)


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_zero_loss_grad_norm_and_weights_match_local(zero: dict, stage: str) -> None:
    check_matches_local(zero[stage])


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_zero_checkpoint_round_trip(zero: dict, stage: str) -> None:
    check_checkpoint_round_trip(zero[stage])


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_zero_checkpointing_and_bf16(zero: dict, stage: str) -> None:
    check_variants(zero[stage])


@pytest.mark.slow
def test_zero3_gathers_every_weight(zero: dict) -> None:
    assert zero["zero3"]["state_dict_keys"] == zero["zero2"]["state_dict_keys"]
    assert "lm_head.weight" in zero["zero3"]["state_dict_keys"]


def test_deepspeed_config_from_settings() -> None:
    optim = OptimConfig(max_grad_norm=0.7)
    cfg = deepspeed_config(optim, zero_stage=3, mixed_precision="bf16")
    assert cfg["zero_optimization"]["stage"] == 3
    assert cfg["gradient_clipping"] == 0.7
    assert cfg["bf16"] == {"enabled": True}
    assert cfg["managed_gradient_accumulation"] is False
    assert deepspeed_config(optim, zero_stage=2, mixed_precision="fp32")["bf16"]["enabled"] is False
