"""SFT on the tiny model: the NLL goes down and the output loads as a model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.rollout.models import load_model, resolve_model
from agentrl.runtime.metrics import read_metrics
from agentrl.sft.config import SFTConfig
from agentrl.sft.train import RESULT_FILE, TRAJECTORIES_FILE, measure_sft_pace, run_sft
from agentrl.trajectory.io import read_trajectories


def test_sft_lowers_nll_and_writes_a_loadable_model(tmp_path: Path, tiny_model_path: Path) -> None:
    cfg = SFTConfig(model="tiny", num_episodes=24, num_epochs=3, batch_size=8)
    steps = []
    result = run_sft(cfg, tmp_path / "sft", on_step=lambda s, n, m: steps.append((s, n, m)))

    assert result.expert_success_rate == 1.0
    assert result.num_optimizer_steps == 9 == len(steps) == steps[-1][1]
    assert math.isfinite(result.final_nll) and result.final_nll < result.initial_nll - 0.5
    assert 0.0 <= result.final_token_accuracy <= 1.0

    out = tmp_path / "sft"
    assert resolve_model(str(out)) == out.resolve()  # `agentrl train --model OUT` resolves it
    model = load_model(str(out))
    before = load_file(str(tiny_model_path / "model.safetensors"))
    after = model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before if k in after)
    records = read_metrics(out)
    assert [r["step"] for r in records] == list(range(1, 10))
    assert len(read_trajectories(out / TRAJECTORIES_FILE).trajectories) == 24
    assert json.loads((out / RESULT_FILE).read_text())["num_trajectories"] == 24


def test_sft_refuses_seeds_that_reach_the_validation_seeds(tmp_path: Path) -> None:
    cfg = SFTConfig(num_episodes=4, first_seed=999_998)
    with pytest.raises(ValueError, match="validation seeds"):
        run_sft(cfg, tmp_path / "x")


def test_sft_cli_then_eval_loads_the_model(tmp_path: Path) -> None:
    out = tmp_path / "cli-sft"
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "sft",
            "--model",
            "tiny",
            "--episodes",
            "8",
            "--epochs",
            "1",
            "--batch-size",
            "4",
            "--actions-per-turn",
            "2",
            "--eval-episodes",
            "2",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "NLL" in result.output and "validation success" in result.output
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()

    evaluated = runner.invoke(
        app, ["eval", "--model", str(out), "--episodes", "2", "--max-new-tokens", "8"]
    )
    assert evaluated.exit_code == 0, evaluated.output
    assert "success rate" in evaluated.output


def test_sft_cli_rejects_unknown_expert_and_bad_key(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(app, ["sft", "--expert", "oracle", "--out", str(tmp_path / "a")])
    assert bad.exit_code == 2 and "unknown expert 'oracle'" in bad.output
    bad = runner.invoke(app, ["sft", "--set", "no_such_key=1", "--out", str(tmp_path / "b")])
    assert bad.exit_code == 2 and "no_such_key" in bad.output
    bad = runner.invoke(app, ["sft", "--env", "sokoban", "--epochs", "0", "--set", "x=1"])
    header = bad.output.splitlines()[0]  # the flags as typed, not as `--set` items
    assert header == "error: invalid config (--env sokoban, --epochs 0, --set x=1):", bad.output


def test_sft_cli_config_file_values_hold_unless_a_flag_is_given(tmp_path: Path) -> None:
    """`-c` used to lose to the flags' own defaults (512 episodes, 3 epochs, model tiny)."""
    config = tmp_path / "sft.yaml"
    config.write_text(
        "model: tiny\nnum_episodes: 6\nnum_epochs: 1\nbatch_size: 4\n"
        "max_actions_per_turn: 2\nfirst_seed: 100\n"
    )
    runner = CliRunner()
    out = tmp_path / "from-file"
    result = runner.invoke(app, ["sft", "-c", str(config), "--out", str(out)])
    assert result.exit_code == 0, result.output
    saved = json.loads((out / RESULT_FILE).read_text())
    assert saved["num_trajectories"] == 6
    seeds = [t.seed for t in read_trajectories(out / TRAJECTORIES_FILE).trajectories]
    assert seeds == list(range(100, 106))

    out = tmp_path / "flag-wins"
    result = runner.invoke(app, ["sft", "-c", str(config), "--episodes", "3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads((out / RESULT_FILE).read_text())["num_trajectories"] == 3


def test_a_short_measurement_predicts_the_steps_of_the_whole_sft(tmp_path: Path) -> None:
    cfg = SFTConfig(
        model="tiny",
        num_episodes=128,
        num_epochs=1,
        batch_size=8,
        history_turns=0,
        max_actions_per_turn=1,
    )
    pace = measure_sft_pace(cfg, num_episodes=32, probe_rows=8)
    result = run_sft(cfg, tmp_path / "sft")
    # the first 32 rooms' turns per episode stand for all 128
    assert abs(pace.num_steps - result.num_optimizer_steps) <= 0.2 * result.num_optimizer_steps
    assert pace.s_per_step > 0 and pace.expert_s > 0
    assert pace.sft_s == pytest.approx(pace.num_steps * pace.s_per_step)
    assert pace.measured_s < result.wall_s


def test_the_measurement_of_a_lora_sft_trains_adapters_on_one_batch() -> None:
    from agentrl.runtime.config import LoraConfig

    cfg = SFTConfig(
        model="tiny",
        num_episodes=64,
        batch_size=4,
        history_turns=0,
        max_actions_per_turn=1,
        lora=LoraConfig(enabled=True, r=4, alpha=8),
    )
    pace = measure_sft_pace(cfg, num_episodes=16)  # probes 4 rows, the batch, not 64
    assert pace.s_per_step > 0 and pace.num_steps > 0


def test_validation_names_its_engine(caplog: pytest.LogCaptureFixture) -> None:
    """The validation picks its engine as `agentrl eval` does for a folder naming none, and
    says which: hf for the tiny model."""
    import logging

    from agentrl.sft.train import evaluate_model

    with caplog.at_level(logging.INFO, logger="agentrl.sft.train"):
        result = evaluate_model("tiny", "guess-number", num_episodes=1, max_new_tokens=4)
    assert result["num_episodes"] == 1
    assert "validation engine: hf (" in caplog.text
