"""FSDP2 with 2 CPU ranks (gloo) equals the single-process `LocalBackend` on the same batch.

One torchrun launch (`_dist_worker.py`) runs every check; each test reads one result.
Tolerances (fp32, from the max abs differences measured between the two backends):
gradients 1e-6 (values up to ~0.5), grad norm 1e-4 relative, weights after one step 2e-5 and
after two steps 1e-4 (one AdamW update is ~1e-2 per weight).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _dist_worker import launch
from torch import nn
from transformers import Qwen2Config, Qwen2ForCausalLM

from agentrl.runtime._dist import decoder_layers, load_hf_weights, save_hf, tied_pairs

GRAD_TOL = 1e-6
NORM_RTOL = 1e-4
# Weights after AdamW steps of lr 1e-2: ids with gradients near Adam's eps (1e-8) get updates
# that a different reduction order changes by up to ~1% of lr (tiny: hidden 128, init 0.02).
WEIGHT_TOL_STEP1 = 2e-4
WEIGHT_TOL_STEP2 = 1e-3


@pytest.fixture(scope="module")
def fsdp2(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Results of the 2-rank FSDP2 run."""
    return launch("fsdp2", tmp_path_factory.mktemp("fsdp2"), timeout=300)["fsdp2"]


def check_matches_local(r: dict) -> None:
    """Loss, grad norm and weights after two steps equal LocalBackend's (shared with the
    DeepSpeed tests)."""
    assert r["world_size"] == 2
    assert r["loss"] == pytest.approx(r["ref_loss"], rel=1e-6)
    assert r["grad_norm"] == pytest.approx(r["ref_grad_norm"], rel=NORM_RTOL)
    assert r["grad_norm"][0] > r["max_norm"]  # clipping was active in the step compared
    assert r["weights_update_max_abs"] > 20 * WEIGHT_TOL_STEP1  # the step moved the weights
    assert r["weights_step1_max_diff"] < WEIGHT_TOL_STEP1
    assert r["weights_step2_max_diff"] < WEIGHT_TOL_STEP2


def check_checkpoint_round_trip(r: dict) -> None:
    """`load` restores the step-1 state exactly; the step after it repeats step 2 bit for bit;
    the saved Hugging Face folder reloads to the gathered weights."""
    assert r["load_restores_max_diff"] == 0.0
    assert r["resumed_step_max_diff"] == 0.0
    assert r["resumed_loss_grad_norm"] == [r["loss"][1], r["grad_norm"][1]]
    assert r["hf_reload_max_diff"] == 0.0


@pytest.mark.distributed
def test_fsdp2_loss_grad_norm_and_weights_match_local(fsdp2: dict) -> None:
    check_matches_local(fsdp2)


def check_variants(r: dict) -> None:
    """Gradient checkpointing changes nothing; bf16 compute stays close to fp32 (its Adam
    step can flip the sign of updates whose gradients are ~0, so weights are not compared)."""
    plain, ckpt, bf16 = (r["variants"][k] for k in ("plain", "checkpointing", "bf16"))
    assert ckpt["loss"] == plain["loss"] and ckpt["grad_norm"] == plain["grad_norm"]
    assert ckpt["weights_max_diff"] == 0.0
    assert bf16["loss"] != plain["loss"]  # really computed in bf16
    assert bf16["loss"] == pytest.approx(plain["loss"], rel=5e-3)  # bf16: 8 mantissa bits
    assert bf16["grad_norm"] == pytest.approx(plain["grad_norm"], rel=5e-3)


@pytest.mark.distributed
def test_fsdp2_checkpointing_and_bf16(fsdp2: dict) -> None:
    check_variants(fsdp2)


@pytest.mark.distributed
def test_fsdp2_gradients_match_local(fsdp2: dict) -> None:
    assert fsdp2["grad_max_diff"] < GRAD_TOL
    assert fsdp2["grad_max_abs"] > 1e3 * GRAD_TOL


@pytest.mark.distributed
def test_fsdp2_full_state_dict_has_hf_names(fsdp2: dict) -> None:
    keys = fsdp2["state_dict_keys"]
    assert "model.embed_tokens.weight" in keys and "lm_head.weight" in keys
    assert "model.layers.1.self_attn.q_proj.weight" in keys
    assert not any("_fsdp" in k or "module." in k for k in keys)


@pytest.mark.distributed
def test_fsdp2_checkpoint_round_trip(fsdp2: dict) -> None:
    check_checkpoint_round_trip(fsdp2)


def tiny_qwen(tied: bool) -> Qwen2ForCausalLM:
    """A 2-layer random Qwen2."""
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=tied,
    )
    return Qwen2ForCausalLM(config)


def test_decoder_layers_finds_hf_blocks() -> None:
    model = tiny_qwen(tied=True)
    assert decoder_layers(model) == list(model.model.layers)


def test_decoder_layers_falls_back_to_module_list() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.ModuleList([nn.Linear(2, 2)])
            self.blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])

    net = Net()
    assert decoder_layers(net) == list(net.blocks)
    with pytest.raises(ValueError, match="transformer blocks"):
        decoder_layers(nn.Linear(2, 2))


@pytest.mark.parametrize("tied", [True, False])
def test_save_hf_round_trip(tmp_path: Path, tied: bool) -> None:
    model = tiny_qwen(tied)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    save_hf(model, state, tmp_path)
    assert bool(tied_pairs(model)) == tied
    reloaded = Qwen2ForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    for key, value in reloaded.state_dict().items():
        torch.testing.assert_close(value, state[key], rtol=0, atol=0)
    weights = load_hf_weights(model, tmp_path)
    assert set(weights) == set(state)


def test_leave_process_group_destroys_the_group() -> None:
    """`agentrl train` leaves the group it joined, so no backend thread outlives the run."""
    code = (
        "import torch, torch.distributed as dist\n"
        "from agentrl.runtime._dist import init_process_group, leave_process_group\n"
        "leave_process_group()\n"  # no group: nothing to do
        "assert init_process_group(torch.device('cpu')) == (0, 1)\n"
        "leave_process_group()\n"
        "assert not dist.is_initialized()\n"
        "init_process_group(torch.device('cpu'))\n"
        "leave_process_group(ok=False)\n"  # after an error: no barrier, still destroyed
        "assert not dist.is_initialized()\n"
        "print('left')\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "left"
