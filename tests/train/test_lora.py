"""LoRA (`trainer.lora`): only the adapters train, the engine gets the merged weights, the
run's adapter folder evaluates and exports as the merged model; FSDP2 and DeepSpeed train the
same adapters as the local backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_fsdp2 import check_checkpoint_round_trip, check_matches_local
from test_trainer import _cfg as trainer_cfg
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.rollout.engine import GenerationRequest, SamplingParams, generate_sync
from agentrl.runtime.lora import adapter_base, is_adapter_dir, loadable_model, merge_lora
from agentrl.train.checkpoint import latest_checkpoint
from agentrl.train.trainer import Trainer

runner = CliRunner()

LORA = ["trainer.lora.enabled=true", "trainer.lora.r=4", "trainer.lora.alpha=32"]
"""Rank 4, scale 8: two steps at lr 1e-2 move the merged weights well past float noise."""
PARITY_TOL = 1e-4
"""Max |engine logp - trainer logp| of a sampled id (fp32, as in tests/rollout/test_hf_engine)."""


def _cfg(*extra: str):
    """test_trainer's two-step vowel-count run, with LoRA, a larger lr and no reference."""
    return trainer_cfg(
        "grpo",
        "rollout.sampling.temperature=1.0",  # engines report temperature-1 logprobs
        "optim.lr=1e-2",
        "algo.kl_coef=0.0",
        *LORA,
        *extra,
    )


def _sampled_logp(model: torch.nn.Module, prompt: list[int], sampled: list[int]) -> list[float]:
    """Logprob of each sampled id, teacher-forced in one forward pass over prompt + sampled."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + sampled])).logits[0, len(prompt) - 1 : -1]
    logp = torch.log_softmax(logits.float(), dim=-1)  # [len(sampled), V]
    return logp.gather(-1, torch.tensor(sampled)[:, None]).squeeze(-1).tolist()


def _raw(trainer: Trainer) -> dict[str, torch.Tensor]:
    """The policy's own state dict (peft names: base layers and adapters apart)."""
    return {k: v.detach().clone() for k, v in trainer.policy.module.state_dict().items()}


def test_lora_trains_adapters_only_and_the_engine_samples_the_merged_model(tmp_path) -> None:
    trainer = Trainer(_cfg(), tmp_path)
    try:
        before = _raw(trainer)
        trainer.train_step()
        second = trainer.train_step()  # sampled with the weights synced after step 1
        after = _raw(trainer)
        # After the last sync: the engine samples, the trainer (unmerged LoRA) rescores.
        prompt = trainer.tokenizer("Round 7. Answer with many vowels.")["input_ids"]
        request = GenerationRequest(prompt, SamplingParams(max_new_tokens=16, seed=3))
        (completion,) = generate_sync(trainer.engine, [request])
        policy = trainer.policy.module
        trained = _sampled_logp(policy, prompt, completion.token_ids)
        with policy.disable_adapter():
            base = _sampled_logp(policy, prompt, completion.token_ids)
        version = trainer.engine.weight_version
    finally:
        trainer.close()

    lora_keys = {k for k in before if ".lora_" in k}
    assert lora_keys and all(".lora_A." in k or ".lora_B." in k for k in lora_keys)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == lora_keys  # every adapter moved (B first, then A), no base weight did
    assert version == 2 and completion.weight_version == 2
    assert second["actor/sampler_logp_diff"] < 1e-5  # the step's own tokens, engine vs trainer
    gap = max(abs(a - b) for a, b in zip(completion.logp, trained, strict=True))
    moved = max(abs(a - b) for a, b in zip(completion.logp, base, strict=True))
    assert gap < PARITY_TOL, f"engine vs trainer logp gap {gap:.2e}"
    assert moved > 100 * PARITY_TOL  # the adapters changed the model the engine samples

    checkpoint = latest_checkpoint(tmp_path)
    adapter = checkpoint / "policy" / "adapter"
    assert is_adapter_dir(adapter) and adapter_base(adapter) == "tiny"
    saved = load_file(str(adapter / "adapter_model.safetensors"))
    assert len(saved) == len(lora_keys) and not any(".default." in k for k in saved)
    merged = load_file(str(checkpoint / "policy" / "model" / "model.safetensors"))
    assert not any("lora_" in k or "base_layer" in k for k in merged)
    expected = merge_lora(after, scaling=32 / 4)
    for key, value in merged.items():
        assert torch.equal(value, expected[key]), key

    resumed = Trainer(_cfg("trainer.num_steps=3"), tmp_path, resume=True)
    try:
        restored = _raw(resumed)
    finally:
        resumed.close()
    for key, value in after.items():  # adapters from the checkpoint, base from the model
        assert torch.equal(restored[key], value), key


def test_a_lora_sync_sends_the_adapted_layers_only(tmp_path) -> None:
    """The engine gets the merged attention layers (q/k/v/o, whole for vLLM's fused qkv),
    not the weights LoRA never changes."""
    trainer = Trainer(_cfg(), tmp_path)
    try:
        sent = trainer.policy.full_state_dict()
        every = merge_lora(trainer.policy.module.state_dict(), 32 / 4)  # all, HF names
    finally:
        trainer.close()
    assert set(sent) < set(every)
    assert all(".self_attn." in k for k in sent)
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        assert any(f".self_attn.{name}.weight" in k for k in sent), name


@pytest.mark.vllm
@pytest.mark.slow
def test_after_a_lora_sync_vllm_samples_the_trainers_model(tmp_path) -> None:
    """vLLM reloads the adapted layers only; its logprobs then match the trainer's (the
    unmerged peft model) within tests/rollout/test_vllm_engine.py's tolerance."""
    pytest.importorskip("vllm")
    trainer = Trainer(_cfg("engine.name=vllm", "engine.max_model_len=512"), tmp_path)
    try:
        trainer.train_step()
        trainer.train_step()  # its rollout sampled the weights synced after step 1
        prompt = trainer.tokenizer("Round 7. Answer with many vowels.")["input_ids"]
        request = GenerationRequest(prompt, SamplingParams(max_new_tokens=16, seed=3))
        (completion,) = generate_sync(trainer.engine, [request])
        policy = trainer.policy.module
        trained = _sampled_logp(policy, prompt, completion.token_ids)
        with policy.disable_adapter():
            base = _sampled_logp(policy, prompt, completion.token_ids)
    finally:
        trainer.close()
    assert completion.weight_version == 2
    gap = max(abs(a - b) for a, b in zip(completion.logp, trained, strict=True))
    moved = max(abs(a - b) for a, b in zip(completion.logp, base, strict=True))
    assert gap < 2e-3, f"vLLM vs trainer logp gap {gap:.2e}"
    assert moved > 0.1  # the adapters changed the model vLLM samples


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`agentrl train --env sokoban --model tiny --steps 2` with LoRA adapters."""
    run_dir = tmp_path_factory.mktemp("lora-cli") / "run"
    args = ["train", "--env", "sokoban", "--model", "tiny", "--steps", "2", "--no-warm-start"]
    args += ["--preset", "grpo"]  # sampled episodes (Sokoban's default is a search)
    args += ["--run-dir", str(run_dir)]
    for item in [*LORA, "trainer.num_groups=2", "rollout.group_size=2", "optim.lr=1e-2"]:
        args += ["--set", item]
    args += ["--set", "algo.critic_warmup_steps=0", "--set", "logging.progress=false"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return run_dir


def _eval(model: Path, *extra: str) -> list[str]:
    args = ["eval", "--model", str(model), "--episodes", "3", "--max-new-tokens", "8", *extra]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def test_the_runs_adapter_folder_describes_itself(lora_run: Path) -> None:
    adapter = latest_checkpoint(lora_run) / "policy" / "adapter"
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "tiny" and config["r"] == 4
    assert (adapter / "agentrl_settings.yaml").is_file()  # eval plays sokoban as trained


def test_eval_of_the_adapter_equals_eval_of_the_merged_model(lora_run: Path) -> None:
    from agentrl.rollout.models import load_model

    def all_logp(name: str) -> torch.Tensor:
        with torch.no_grad():
            logits = load_model(name)(torch.arange(3, 40)[None]).logits  # [1, T, V]
        return torch.log_softmax(logits, -1)

    policy = latest_checkpoint(lora_run) / "policy"
    with loadable_model(str(policy / "adapter")) as folder:  # what eval's engine loads
        logp = all_logp(str(folder))
    assert not folder.exists()  # the merged copy is temporary
    merged, base = all_logp(str(policy / "model")), all_logp("tiny")
    assert float((logp - merged).abs().max()) < PARITY_TOL
    assert float((logp - base).abs().max()) > 100 * PARITY_TOL

    settings, *results = _eval(policy / "adapter", "--temperature", "0")
    merged_settings, *merged_results = _eval(policy / "model", "--temperature", "0")
    assert "env sokoban" in settings and "agentrl_settings.yaml" in settings
    assert settings.split(" (from ")[0] == merged_settings.split(" (from ")[0]
    assert results == merged_results and "success rate" in results[0]


def test_export_of_the_adapter_writes_the_merged_model(lora_run: Path, tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    from agentrl.rollout.models import resolve_model

    policy = latest_checkpoint(lora_run) / "policy"
    out = tmp_path / "export"
    result = runner.invoke(app, ["export", str(policy / "adapter"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "merged" in result.output and (out / "agentrl_settings.yaml").is_file()
    exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).state_dict()
    merged = AutoModelForCausalLM.from_pretrained(policy / "model", dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(resolve_model("tiny"), dtype=torch.float32)
    # peft's merge (export) equals the trainer's (checkpoint), and differs from the base
    for key, value in merged.state_dict().items():
        assert torch.allclose(exported[key], value, atol=1e-6), key
    moved = max(float((v - base.state_dict()[k]).abs().max()) for k, v in exported.items())
    assert moved > 1e-3


def test_eval_names_an_adapter_whose_base_is_missing(lora_run: Path, tmp_path) -> None:
    import shutil

    adapter = tmp_path / "adapter"
    shutil.copytree(latest_checkpoint(lora_run) / "policy" / "adapter", adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "gone")
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    result = runner.invoke(app, ["eval", "--model", str(adapter), "--episodes", "1"])
    assert result.exit_code == 2
    assert "base model" in result.output and "gone" in result.output


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_eval_of_the_adapter(lora_run: Path) -> None:
    pytest.importorskip("vllm")
    adapter = latest_checkpoint(lora_run) / "policy" / "adapter"
    lines = _eval(adapter, "--engine", "vllm", "--temperature", "0")  # vLLM logs lines too
    assert any("sokoban: success rate" in x and "over 3 episodes" in x for x in lines), lines


@pytest.fixture(scope="module")
def fsdp2_lora(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two LoRA steps on 2 FSDP2 ranks against `LocalBackend` (see `_dist_worker.py`)."""
    from _dist_worker import launch

    path = tmp_path_factory.mktemp("fsdp2-lora")
    return launch("fsdp2-lora", path, timeout=300, variants=False)["fsdp2-lora"]


def check_lora_run(r: dict) -> None:
    """The distributed run equals LocalBackend's (same adapters, same merged weights), the
    base weights stay, and checkpoints round-trip through the adapter."""
    check_matches_local(r)
    check_checkpoint_round_trip(r)
    assert r["frozen_max_diff"] == 0.0  # embeddings, MLPs, norms: not adapted, not trained
    assert r["adapter_saved"]
    assert not any("lora_" in k or "base_layer" in k for k in r["state_dict_keys"])
    assert "model.layers.1.self_attn.q_proj.weight" in r["state_dict_keys"]
    assert not any(".mlp." in k for k in r["state_dict_keys"])  # the engines get adapted layers


@pytest.mark.distributed
def test_fsdp2_trains_lora_like_local(fsdp2_lora: dict) -> None:
    check_lora_run(fsdp2_lora)
    assert fsdp2_lora["grad_max_diff"] < 1e-6


@pytest.mark.distributed
@pytest.mark.slow
def test_deepspeed_trains_lora_like_local(tmp_path) -> None:
    from _dist_worker import launch

    results = launch("zero2-lora,zero3-lora", tmp_path, timeout=480, variants=False)
    for stage in ("zero2-lora", "zero3-lora"):
        check_lora_run(results[stage])
