"""`agentrl train --env E` uses E's measured recipe (agentrl/train/defaults/cpu-E.yaml)."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from agentrl.cli.train import DEFAULTS, env_recipe, recipe_path, resolve_train_config


def _cfg(env: str, preset: str | None = None):
    return resolve_train_config(
        config_file=None, overrides=[], preset=preset, flags={"env.name": env}
    )


@pytest.mark.parametrize(
    ("env", "lr", "steps"),
    [("math-arithmetic", 5e-4, 60), ("math-multiturn", 5e-4, 40), ("bandit", 1e-3, 60)],
)
def test_measured_recipe_is_the_default(env: str, lr: float, steps: int) -> None:
    cfg = _cfg(env)
    assert cfg.model.name == "smollm2-135m"
    assert cfg.trainer.lora.enabled and cfg.trainer.lora.r == 16
    assert cfg.optim.lr == lr and cfg.trainer.num_steps == steps
    assert cfg.engine.name == "vllm"  # installed here (scripts/install.sh)
    assert cfg.algo.name == "grpo" and cfg.algo.kl_coef == 0.0 and cfg.algo.num_mini_batches == 1
    assert cfg.rollout.group_size == 8 and cfg.trainer.num_groups == 4
    assert env_recipe(env) is not None


def test_recipe_keys_of_one_preset_stay_with_it() -> None:
    cfg = _cfg("math-arithmetic", preset="ppo")
    assert cfg.algo.name == "ppo"
    assert (cfg.algo.num_mini_batches, cfg.algo.kl_coef) == (4, 0.001)  # ppo's, not grpo's keys
    assert cfg.trainer.lora.enabled  # the rest of the recipe holds under any preset


def test_hf_engine_when_vllm_is_not_installed(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    assert _cfg("math-arithmetic").engine.name == "hf"


def test_every_recipe_names_its_result_and_envs_without_one_have_none() -> None:
    import yaml

    for path in DEFAULTS.glob("cpu-*.yaml"):
        assert yaml.safe_load(path.read_text()).get("recipe"), path
    assert env_recipe("guess-number") is None


@pytest.mark.parametrize("model", ["smollm2-135m", "Qwen/Qwen2.5-0.5B-Instruct"])
def test_a_pretrained_model_on_sokoban_gets_the_llm_recipe_not_tinys(model: str) -> None:
    cfg = resolve_train_config(
        config_file=None,
        overrides=[],
        preset=None,
        flags={"env.name": "sokoban", "model.name": model},
    )
    assert cfg.model.name == model
    assert recipe_path("sokoban", model).name == "cpu-sokoban-llm.yaml"
    assert cfg.trainer.lora.enabled and cfg.warm_start.expert == "solver"
    assert cfg.warm_start.num_episodes <= 2048 and cfg.trainer.num_groups <= 16  # not tiny's
    assert cfg.env.kwargs["positions"] is True
    assert cfg.algo.name != "expert-iteration"  # tiny's preset does not follow


def test_tiny_and_folders_of_tiny_keep_the_tiny_recipe(tmp_path) -> None:
    folder = tmp_path / "tiny-sft"
    folder.mkdir()
    (folder / "config.json").write_text('{"vocab_size": 2048}')
    for model in (None, "tiny", str(folder)):
        flags = {"env.name": "sokoban", "model.name": model}
        cfg = resolve_train_config(config_file=None, overrides=[], preset=None, flags=flags)
        assert cfg.algo.name == "expert-iteration" and cfg.warm_start.num_episodes == 65536
    run = tmp_path / "run"  # a tiny run's checkpoint, and an adapter over tiny
    (run / "checkpoints" / "step_000002" / "policy" / "model").mkdir(parents=True)
    shutil.copy(folder / "config.json", run / "checkpoints" / "step_000002" / "policy" / "model")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(f'{{"base_model_name_or_path": "{folder}"}}')
    for model in (run, run / "checkpoints" / "step_000002", adapter):
        assert recipe_path("sokoban", str(model)).name == "cpu-sokoban.yaml", model
    big = tmp_path / "llm-sft"
    big.mkdir()
    (big / "config.json").write_text('{"vocab_size": 49152}')
    assert recipe_path("sokoban", str(big)).name == "cpu-sokoban-llm.yaml"
    (adapter / "adapter_config.json").write_text('{"base_model_name_or_path": "smollm2-135m"}')
    assert recipe_path("sokoban", str(adapter)).name == "cpu-sokoban-llm.yaml"


def test_the_plan_names_the_recipe_and_the_model_it_was_measured_with(tmp_path) -> None:
    from agentrl.cli.plan import plan_lines

    def plan(model: str) -> str:
        flags = {"env.name": "sokoban", "model.name": model}
        cfg = resolve_train_config(config_file=None, overrides=[], preset=None, flags=flags)
        return "\n".join(plan_lines(cfg, tmp_path, resume=False))

    assert "recipe: agentrl/train/defaults/cpu-sokoban-llm.yaml" in plan("smollm2-135m")
    assert "measured with" not in plan("smollm2-135m")
    other = plan("Qwen/Qwen2.5-0.5B-Instruct")
    assert "recipe measured with smollm2-135m, not Qwen/Qwen2.5-0.5B-Instruct" in other
    adapter = tmp_path / "adapter"  # an `agentrl sft` LoRA folder over the measured model
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"base_model_name_or_path": "smollm2-135m"}')
    assert "measured with" not in plan(str(adapter))


def test_envs_list_marks_measured_recipes_with_their_result() -> None:
    from typer.testing import CliRunner

    from agentrl.cli import app

    result = CliRunner().invoke(app, ["envs", "list"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "recipe: `agentrl train --env NAME` runs a recipe measured to learn" in out
    assert f"math-arithmetic: {env_recipe('math-arithmetic')}" in out
    assert "guess-number:" not in out.split("recipe:")[-1]
