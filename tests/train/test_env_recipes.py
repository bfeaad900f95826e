"""`agentrl train --env E` uses E's measured recipe (agentrl/train/defaults/cpu-E.yaml)."""

from __future__ import annotations

import importlib.util

import pytest

from agentrl.cli.train import DEFAULTS, env_recipe, resolve_train_config


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
    for path in DEFAULTS.glob("cpu-*.yaml"):
        assert env_recipe(path.stem.removeprefix("cpu-")), path
    assert env_recipe("guess-number") is None


def test_envs_list_marks_measured_recipes_with_their_result() -> None:
    from typer.testing import CliRunner

    from agentrl.cli import app

    result = CliRunner().invoke(app, ["envs", "list"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "recipe: `agentrl train --env NAME` runs a recipe measured to learn" in out
    assert f"math-arithmetic: {env_recipe('math-arithmetic')}" in out
    assert "guess-number:" not in out.split("recipe:")[-1]
