"""`agentrl train` under torchrun (2 CPU ranks, gloo) equals the one-process `local` run.

Same seeds give the same rollout on rank 0 (the only rank with an engine), so the update is
the same one, sharded: the final weights and the step metrics must match `--backend local`.
Tiny rows budget (`micro_batch_tokens`) and 5 episodes per step give the two ranks different
micro-batch counts, so the padding of the shorter rank is exercised too.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentrl.runtime._dist import free_port

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

LR = 1e-3
COMMON = [
    "train",
    "--env",
    "sokoban",
    "--model",
    "tiny",
    "--steps",
    "2",
    "--no-warm-start",
    "--preset",
    "grpo",  # sampled episodes (Sokoban's default is a local search)
    "--set",
    "logging.progress=false",
    "--set",
    "logging.tensorboard=false",
    "--set",
    "trainer.num_groups=1",
    "--set",
    "rollout.group_size=5",
    "--set",
    "rollout.max_turns=2",
    "--set",
    "rollout.sampling.temperature=1.0",
    "--set",
    "rollout.sampling.max_new_tokens=12",
    "--set",
    "trainer.micro_batch_tokens=64",
    "--set",
    f"optim.lr={LR}",
    "--set",
    "optim.warmup_steps=0",
    "--set",
    "algo.ppo_epochs=2",  # scoring (old logp) runs sharded too
    "--set",
    "algo.entropy_coef=0.01",  # a gradient even when all rewards of the group agree
    "--set",
    "algo.critic_warmup_steps=0",  # both steps move the policy
    "--set",
    "algo.num_mini_batches=1",  # with 4 the grad norms drift 0.35% apart between backends
]


def _train(run_dir: Path, backend: str, *extra: str, nproc: int = 1) -> None:
    args = [*COMMON, "--backend", backend, "--run-dir", str(run_dir), *extra]
    if nproc == 1:
        cmd = [sys.executable, "-m", "agentrl.cli", *args]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={nproc}",
            "--master_addr=127.0.0.1",
            f"--master_port={free_port()}",
            "-m",
            "agentrl.cli",
            *args,
        ]
    result = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    path = run_dir / "checkpoints" / "step-000002" / "policy" / "model" / "model.safetensors"
    return load_file(str(path))


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("dist") / "local"
    _train(run_dir, "local")
    return run_dir


def _check_matches_local(run_dir: Path, local_run: Path) -> None:
    from agentrl.rollout.models import load_model, resolve_model

    records, expected = _metrics(run_dir), _metrics(local_run)
    assert [r["step"] for r in records] == [1, 2]
    for record, ref in zip(records, expected, strict=True):
        for key in ("actor/loss", "actor/grad_norm", "actor/entropy", "reward/mean"):
            assert math.isfinite(record[key]), key
        # The same rollout (rank 0's engine, same seeds) ...
        assert record["reward/mean"] == ref["reward/mean"]
        assert record["episode/sampled_tokens"] == ref["episode/sampled_tokens"]
        # ... gives the same update, sharded over two ranks.
        assert record["actor/grad_norm"] == pytest.approx(ref["actor/grad_norm"], rel=1e-4)
        assert record["actor/entropy"] == pytest.approx(ref["actor/entropy"], rel=1e-4)
    initial = load_model(str(resolve_model("tiny")), dtype="float32").state_dict()
    weights, local = _weights(run_dir), _weights(local_run)
    assert weights.keys() == local.keys()
    moved = max(float((weights[k] - initial[k]).abs().max()) for k in weights)
    assert moved > 0.5 * LR  # training changed the weights (Adam moves ~lr per step)
    diff = max(float((weights[k] - local[k]).abs().max()) for k in weights)
    assert diff < 0.05 * LR, f"fsdp/deepspeed vs local weights differ by {diff:.2e}"
    trajs = run_dir / "trajectories" / "step_000001.jsonl"
    assert trajs.is_file()  # written once, by rank 0


def test_torchrun_fsdp2_train_matches_local(local_run, tmp_path) -> None:
    run_dir = tmp_path / "fsdp2"
    _train(run_dir, "fsdp2", nproc=2)
    _check_matches_local(run_dir, local_run)
    assert (run_dir / "checkpoints" / "step-000002" / "policy" / "optim_dcp").is_dir()


def test_torchrun_deepspeed_zero2_train_matches_local(local_run, tmp_path) -> None:
    run_dir = tmp_path / "zero2"
    _train(run_dir, "deepspeed", "--set", "trainer.zero_stage=2", nproc=2)
    _check_matches_local(run_dir, local_run)


LORA = ["--set", "trainer.lora.enabled=true", "--set", "trainer.lora.r=4"]
LORA += ["--set", "trainer.lora.alpha=32"]  # scale 8: the merged weights move ~1e-3 a step


@pytest.fixture(scope="module")
def local_lora_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("dist") / "local-lora"
    _train(run_dir, "local", *LORA)
    return run_dir


@pytest.mark.parametrize(
    "backend", [["fsdp2"], ["deepspeed", "--set", "trainer.zero_stage=3"]], ids=["fsdp2", "zero3"]
)
def test_torchrun_lora_train_matches_local(local_lora_run, tmp_path, backend) -> None:
    """LoRA under torchrun: the same adapters train, the merged checkpoints match."""
    run_dir = tmp_path / backend[0]
    _train(run_dir, *backend, *LORA, nproc=2)
    _check_matches_local(run_dir, local_lora_run)
    adapter = run_dir / "checkpoints" / "step-000002" / "policy" / "adapter"
    assert (adapter / "adapter_model.safetensors").is_file()
    assert (adapter / "agentrl_settings.yaml").is_file()
