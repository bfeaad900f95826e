"""Model folders carry the settings they were trained with; `agentrl eval` uses them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.cli.model_folders import read_model_settings
from agentrl.cli.train import resolve_train_config
from agentrl.config import ConfigError, TrainConfig
from agentrl.runtime.model_settings import SETTINGS_FILE, ModelSettings, write_model_settings
from agentrl.sft.config import SFTConfig
from agentrl.train.checkpoint import write_run_settings

runner = CliRunner()


def _sokoban_defaults() -> TrainConfig:
    flags = {"env.name": "sokoban"}
    return resolve_train_config(config_file=None, overrides=[], preset=None, flags=flags)


def test_round_trip_of_a_run_config(tmp_path: Path) -> None:
    cfg = _sokoban_defaults()
    path = write_model_settings(tmp_path, cfg)
    assert path == tmp_path / SETTINGS_FILE
    settings = read_model_settings(tmp_path)
    assert settings is not None and settings.source == str(path)
    assert settings.env.name == "sokoban" and settings.env.kwargs == cfg.env.kwargs
    assert settings.history_turns == cfg.rollout.history_turns == 0
    assert settings.max_turns == cfg.rollout.max_turns == 10
    assert settings.max_context_tokens == cfg.rollout.max_context_tokens
    assert settings.max_new_tokens == cfg.rollout.sampling.max_new_tokens
    assert settings.eval_temperature == cfg.eval.temperature
    assert settings.eval_seed_offset == cfg.eval.seed_offset
    assert settings.engine == cfg.engine.name
    assert "source" not in path.read_text()


def test_eval_samples_with_the_runs_engine_unless_told() -> None:
    from agentrl.cli.eval import eval_settings

    saved = ModelSettings(env={"name": "tool-python"}, engine="vllm", source="s.yaml")
    settings, origin = eval_settings(saved, env=None, flags={"engine": None})
    assert settings.engine == "vllm" and "flags" not in origin
    settings, origin = eval_settings(saved, env=None, flags={"engine": "hf"})
    assert settings.engine == "hf" and origin.endswith("flags: --engine")
    assert ModelSettings(env={"name": "sokoban"}).engine is None  # older folders: hf


def test_sft_config_settings() -> None:
    cfg = SFTConfig(env={"name": "sokoban", "max_turns": 7}, history_turns=0, eval_max_new_tokens=9)
    settings = ModelSettings.from_config(cfg)
    assert settings.env.kwargs == {"max_turns": 7} and settings.history_turns == 0
    assert settings.max_new_tokens == 9 and settings.max_turns is None


def test_an_sft_model_plays_with_the_turn_length_an_rl_run_samples() -> None:
    """A stand-alone `agentrl sft` folder is evaluated with the rollout's default turn length,
    so a tool-python `count` program (past 64 ids) is not cut where an RL run's is not."""
    from agentrl.rollout.config import SamplingConfig

    settings = ModelSettings.from_config(SFTConfig(env={"name": "tool-python"}))
    assert settings.max_new_tokens == SamplingConfig().max_new_tokens


def _run_dir(root: Path) -> Path:
    """A run directory as `agentrl train` leaves it: config.yaml, metrics, a warm start and a
    checkpoint, none of whose model folders has a settings file (written before it existed)."""
    from agentrl.config import dump_config

    run = root / "run"
    (run / "warm_start").mkdir(parents=True)
    (run / "warm_start" / "config.json").write_text("{}")
    model = run / "checkpoints" / "step-000004" / "policy" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (run / "metrics.jsonl").write_text("")
    (run / "config.yaml").write_text(dump_config(_sokoban_defaults()))
    return run


def test_folders_without_the_file_fall_back_to_their_run(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    step = run / "checkpoints" / "step-000004"
    for folder in (run / "warm_start", step, step / "policy" / "model"):
        settings = read_model_settings(folder)
        assert settings is not None, folder
        assert settings.history_turns == 0 and settings.env.kwargs == {"max_turns": 10}
        assert settings.source.startswith(str((run / "config.yaml").resolve()))
    (run / "warm_start" / "sft_config.yaml").write_text("history_turns: 3\n")
    assert read_model_settings(run / "warm_start").history_turns == 0  # the run comes first
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "config.yaml").write_text("not: a run\n")  # any config.yaml is not a run's
    assert read_model_settings(loose) is None
    (loose / "sft_config.yaml").write_text("history_turns: 2\nenv:\n  name: sokoban\n")
    assert read_model_settings(loose).history_turns == 2


def test_a_checkpoint_gets_its_runs_settings(tmp_path: Path) -> None:
    """What `save_checkpoint` writes into `policy/model`: the run's settings, not a copy of
    the run config; a run directory without a config writes nothing."""
    run = _run_dir(tmp_path)
    model = run / "checkpoints" / "step-000004" / "policy" / "model"
    assert write_run_settings(run, model) == model / SETTINGS_FILE
    settings = read_model_settings(model)
    assert settings.source == str(model / SETTINGS_FILE)
    assert settings.history_turns == 0 and settings.max_turns == 10
    (run / "config.yaml").unlink()
    assert write_run_settings(run, tmp_path) is None
    assert not (tmp_path / SETTINGS_FILE).exists()


def test_a_broken_settings_file_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / SETTINGS_FILE).write_text("env: {name: sokoban}\nhistory_turns: lots\n")
    with pytest.raises(ConfigError, match=SETTINGS_FILE):
        read_model_settings(tmp_path)


def test_eval_on_a_run_without_a_checkpoint_says_what_to_do(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    shutil.rmtree(run / "checkpoints")
    result = runner.invoke(app, ["eval", "--model", str(run)])
    assert result.exit_code == 2
    assert "without a checkpoint yet" in result.output
    assert f"--model {run / 'warm_start'}" in result.output
    shutil.rmtree(run / "warm_start")
    (run / "warm_start").mkdir()
    result = runner.invoke(app, ["eval", "--model", str(run)])
    assert result.exit_code == 2 and "still in its warm start" in result.output
    shutil.rmtree(run / "warm_start")
    result = runner.invoke(app, ["eval", "--model", str(run)])
    assert result.exit_code == 2 and "the model it started from: --model tiny" in result.output
    result = runner.invoke(app, ["export", str(tmp_path), "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "it holds run" in result.output


@pytest.fixture()
def model_folder(tmp_path: Path, tiny_model_path: Path) -> Path:
    """A copy of the tiny model, trained (say) on Sokoban with 1 turn and no history."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_path, folder)
    settings = ModelSettings(
        env={"name": "sokoban", "kwargs": {"max_turns": 1}},
        history_turns=0,
        max_context_tokens=1024,
        max_new_tokens=4,
        eval_seed_offset=2_000_000,
        eval_episodes=2,
    )
    write_model_settings(folder, settings)
    return folder


def test_eval_uses_the_model_settings_and_flags_override_them(model_folder: Path) -> None:
    result = runner.invoke(app, ["eval", "--model", str(model_folder)])  # no flag
    assert result.exit_code == 0, result.output
    first, *rest = result.output.strip().splitlines()
    assert first.startswith("settings: env sokoban(max_turns=1), max_turns 1, history_turns 0")
    assert "max_new_tokens 4, temperature 0.5, 2 episodes from seed 2000000, engine hf" in first
    assert str(model_folder / SETTINGS_FILE) in first and "flags:" not in first
    assert "seeds 2000000..2000001" in result.output
    assert "mean turns 1.00" in result.output  # the env ended after the model's 1 turn
    assert "by optimal solution length" in result.output

    override = ["--set", "max_turns=2", "--history-turns", "1", "--seed-offset", "5"]
    result = runner.invoke(
        app, ["eval", "--model", str(model_folder), "--episodes", "3", *override]
    )
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert "env sokoban(max_turns=2), max_turns 2, history_turns 1" in first
    assert "flags: --history-turns, --seed-offset, --episodes, --set max_turns" in first
    assert "seeds 5..7" in result.output and "mean turns 2.00" in result.output


def test_eval_of_a_folder_naming_no_engine_samples_on_the_default_one(
    model_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An `agentrl sft` folder records no engine: a model of SmolLM2's size samples on vllm
    where it is installed, the tiny one on hf; `--engine` wins; the first line says which."""
    import functools

    from agentrl.rollout import engines

    result = runner.invoke(app, ["eval", "--model", str(model_folder)])
    assert result.exit_code == 0, result.output
    assert (
        "engine hf (1.2 M weights: faster on hf than on vllm; --engine to change)"
        in (result.output.splitlines()[0])
    )

    built: list[str] = []
    build = engines.build_engine

    def recording_build(cfg, model_path):  # samples on hf whatever it was asked for
        built.append(cfg.engine.name)
        cfg.engine.name = "hf"
        return build(cfg, model_path)

    monkeypatch.setattr(engines, "build_engine", recording_build)
    monkeypatch.setattr(engines, "FAST_ENGINE_MIN_WEIGHTS", 1000)  # tiny counts as large
    monkeypatch.setattr(
        engines, "default_engine", functools.partial(engines.default_engine, vllm_installed=True)
    )
    result = runner.invoke(app, ["eval", "--model", str(model_folder)])
    assert result.exit_code == 0, result.output
    assert "engine vllm (vllm is installed; --engine to change)" in result.output.splitlines()[0]
    result = runner.invoke(app, ["eval", "--model", str(model_folder), "--engine", "hf"])
    assert result.exit_code == 0, result.output
    assert "engine hf (from" in result.output.splitlines()[0]
    assert built == ["vllm", "hf"]


def test_eval_at_several_temperatures(model_folder: Path) -> None:
    args = ["eval", "--model", str(model_folder), "--episodes", "1"]
    result = runner.invoke(app, [*args, "--temperature", "0.5", "--temperature", "0"])
    assert result.exit_code == 0, result.output
    assert "temperature 0.5 and 0," in result.output.splitlines()[0]
    assert "temperature 0.5);" in result.output and "temperature 0);" in result.output


def test_eval_of_another_env_ignores_the_settings(model_folder: Path) -> None:
    args = ["eval", "--model", str(model_folder), "--env", "guess-number", "--episodes", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("settings: env guess-number(), max_turns 8, history_turns all")
    assert "is for env sokoban, not guess-number" in first


def test_export_writes_the_run_settings_into_the_folder(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    out = tmp_path / "exported"
    result = runner.invoke(app, ["export", str(run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    settings = read_model_settings(out)
    assert settings.source == str(out / SETTINGS_FILE)
    assert settings.model_dump() == read_model_settings(run / "warm_start").model_dump()
    assert settings.history_turns == 0 and settings.max_turns == 10
