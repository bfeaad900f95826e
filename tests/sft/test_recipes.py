"""Every recipe in examples/ loads through the config loader (so none can rot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.config import load_config
from agentrl.envs.registry import spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RECIPES = sorted(EXAMPLES.glob("*.yaml")) + sorted(EXAMPLES.glob("gpu/*.yaml"))


def test_there_is_a_recipe_per_env() -> None:
    names = {p.stem for p in RECIPES}
    assert {"sokoban", "sokoban-8x8-2box", "math", "code", "tool"} <= names
    assert any(p.parent.name == "gpu" for p in RECIPES)


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_recipe_loads(path: Path) -> None:
    cfg = load_config(path)
    spec(cfg.env.name)  # a registered env
    assert cfg.trainer.num_steps > 0


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("gpu/*.yaml")), ids=lambda p: p.name)
def test_gpu_recipes_mirror_ragen(path: Path) -> None:
    cfg = load_config(path)
    assert (cfg.trainer.num_groups, cfg.rollout.group_size) == (8, 16)
    assert cfg.rollout.max_turns == 5
    assert cfg.env.kwargs["max_actions_per_turn"] == 5 and cfg.env.kwargs["max_actions"] == 10
    assert cfg.engine.name == "vllm" and cfg.trainer.backend in ("fsdp2", "deepspeed")
    assert cfg.algo.filter_keep_ratio == 0.25 and cfg.algo.kl_coef == 0.0  # StarPO-S


def test_the_sokoban_recipe_spells_out_the_cpu_default() -> None:
    from agentrl.cli.train import resolve_train_config

    default = resolve_train_config(
        config_file=None, overrides=[], preset=None, flags={"env.name": "sokoban"}
    )
    recipe = load_config(EXAMPLES / "sokoban.yaml")
    for section in ("algo", "rollout", "trainer", "warm_start", "optim", "model", "env"):
        assert getattr(recipe, section) == getattr(default, section), section
