"""A LoRA warm start: `agentrl sft` with `lora` writes an adapter, and a run whose model is
that adapter trains it on (its adapter names the same base), or trains the merged model in
full without `trainer.lora`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_lora import LORA, _sampled_logp
from test_trainer import _cfg as trainer_cfg

from agentrl.rollout.engine import GenerationRequest, SamplingParams, generate_sync
from agentrl.rollout.models import load_model
from agentrl.runtime.lora import adapter_base, is_adapter_dir, loadable_model
from agentrl.sft.config import SFTConfig
from agentrl.sft.train import run_sft
from agentrl.train.checkpoint import latest_checkpoint
from agentrl.train.trainer import Trainer


@pytest.fixture(scope="module")
def sft_adapter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """LoRA SFT of `tiny` (r 4) on 16 Sokoban solver episodes."""
    out = tmp_path_factory.mktemp("lora-sft") / "sft"
    cfg = SFTConfig(
        model="tiny",
        num_episodes=16,
        num_epochs=2,
        batch_size=8,
        lora={"enabled": True, "r": 4, "alpha": 32},
        eval_episodes=2,
        eval_max_new_tokens=8,
    )
    result = run_sft(cfg, out)
    assert math.isfinite(result.final_nll) and result.final_nll < result.initial_nll
    assert set(result.eval) >= {"success_rate"}  # the eval loaded the adapter, merged
    return out


def _lora_weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {
        k.replace(".default.", "."): v.detach().clone()
        for k, v in module.state_dict().items()
        if ".lora_" in k
    }


def test_lora_sft_writes_an_adapter_over_its_base(sft_adapter: Path) -> None:
    assert is_adapter_dir(sft_adapter) and adapter_base(sft_adapter) == "tiny"
    saved = load_file(str(sft_adapter / "adapter_model.safetensors"))
    assert saved and all(".lora_A." in k or ".lora_B." in k for k in saved)
    assert any(k.endswith("lora_B.weight") and v.abs().sum() > 0 for k, v in saved.items())
    assert not (sft_adapter / "model.safetensors").exists()  # a few MB, not the whole model
    assert (sft_adapter / "agentrl_settings.yaml").is_file()  # eval plays sokoban as trained


def test_a_run_from_the_adapter_trains_it_on_over_the_same_base(
    sft_adapter: Path, tmp_path: Path
) -> None:
    trainer = Trainer(trainer_cfg("grpo", f"model.name={sft_adapter}", *LORA), tmp_path)
    try:
        start = _lora_weights(trainer.policy.module)
        prompt = trainer.tokenizer("Round 7. Answer with many vowels.")["input_ids"]
        request = GenerationRequest(prompt, SamplingParams(max_new_tokens=8, seed=3))
        (completion,) = generate_sync(trainer.engine, [request])
        trained = _sampled_logp(trainer.policy.module, prompt, completion.token_ids)
        trainer.train_step()
        trainer.train_step()
        after = _lora_weights(trainer.policy.module)
    finally:
        trainer.close()

    saved = load_file(str(sft_adapter / "adapter_model.safetensors"))
    assert set(start) == set(saved)
    for key, value in saved.items():  # the policy starts as the adapter
        assert torch.equal(start[key], value), key
    assert any(not torch.equal(start[k], after[k]) for k in start)  # and trains it on
    # the engine samples the merged start: the policy (base + adapter) scores its tokens alike
    gap = max(abs(a - b) for a, b in zip(completion.logp, trained, strict=True))
    assert gap < 1e-4, gap
    adapter = latest_checkpoint(tmp_path) / "policy" / "adapter"
    assert adapter_base(adapter) == "tiny"  # not the SFT folder: the adapter ships alone


def test_a_run_without_lora_trains_the_merged_adapter_in_full(
    sft_adapter: Path, tmp_path: Path
) -> None:
    trainer = Trainer(trainer_cfg("grpo", f"model.name={sft_adapter}"), tmp_path)
    try:
        policy = {k: v.detach().clone() for k, v in trainer.policy.module.state_dict().items()}
    finally:
        trainer.close()
    with loadable_model(str(sft_adapter)) as folder:
        merged = load_model(str(folder)).state_dict()
    assert not any("lora_" in k for k in policy)
    for key, value in merged.items():
        assert torch.equal(policy[key], value), key


def test_an_adapter_of_another_shape_names_the_fix(sft_adapter: Path, tmp_path: Path) -> None:
    other = [item.replace("r=4", "r=8") for item in LORA]
    with pytest.raises(ValueError, match=r"r 4, alpha 32.*set trainer.lora to the adapter's"):
        Trainer(trainer_cfg("grpo", f"model.name={sft_adapter}", *other), tmp_path)


def test_the_sft_cli_names_the_train_command_that_continues_its_adapter(tmp_path: Path) -> None:
    import shlex

    from typer.testing import CliRunner

    from agentrl.cli import app

    runner = CliRunner()
    out = tmp_path / "sft"
    args = ["sft", "--model", "tiny", "--episodes", "4", "--epochs", "1", "--out", str(out)]
    args += ["--set", "lora.enabled=true", "--set", "lora.r=4", "--set", "lora.alpha=8"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    hint = result.output.split("(next: ")[-1].rsplit(")", 1)[0]
    assert f"LoRA adapter: {out}" in result.output
    assert hint.endswith("--set trainer.lora.r=4 --set trainer.lora.alpha=8"), hint
    command = shlex.split(hint)[1:]  # as printed, without the program name
    command += ["--steps", "1", "--no-warm-start", "--run-dir", str(tmp_path / "run")]
    command += ["--set", "trainer.num_groups=2", "--set", "logging.progress=false"]
    trained = runner.invoke(app, command)
    assert trained.exit_code == 0, trained.output
    adapter = latest_checkpoint(tmp_path / "run") / "policy" / "adapter"
    assert adapter_base(adapter) == "tiny"
