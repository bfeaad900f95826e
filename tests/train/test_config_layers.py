"""How `agentrl train` layers a config (`agentrl.cli.train.resolve_train_config`): a
recipe's keys for one algorithm never block a file or flag that picks another, and the user's
keys that the chosen algorithm does not read are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.cli.train import resolve_train_config
from agentrl.config import ConfigError


def _resolve(*overrides: str, env: str = "sokoban", preset: str | None = None, file=None):
    return resolve_train_config(
        config_file=file, overrides=list(overrides), preset=preset, flags={"env.name": env}
    )


def test_switching_algorithm_on_every_env_with_a_recipe() -> None:
    from agentrl.cli.train import DEFAULTS

    envs = [p.stem.removeprefix("cpu-") for p in DEFAULTS.glob("cpu-*.yaml")]
    for env in envs:
        for name in ("grpo", "rloo", "reinforce++", "ppo", "gigpo", "rft"):
            cfg = _resolve(f"algo.name={name}", env=env)
            assert cfg.algo.name == name, (env, name)


def test_naming_an_algorithm_is_choosing_its_preset() -> None:
    # Sokoban's recipe runs expert iteration; naming grpo runs the grpo preset with the env's
    # keys for it (std_floor 1.0), not expert iteration's rooms a step, steps or lr
    named = _resolve("algo.name=grpo")
    preset = _resolve(preset="grpo")
    assert named == preset
    assert (named.algo.std_floor, named.algo.num_mini_batches) == (1.0, 4)
    assert named.rollout.group_size == 8 and named.trainer.num_groups == 8
    assert named.trainer.num_steps == 200 and named.optim.lr == 5e-5
    assert named.algo.search_beam == 8 and "search_beam" not in named.algo.model_fields_set
    assert named.warm_start.expert == "solver"  # the env's other defaults hold


def test_naming_the_envs_own_algorithm_changes_nothing() -> None:
    assert _resolve("algo.name=expert-iteration") == _resolve()


def test_an_algorithm_without_a_preset_runs_on_its_defaults() -> None:
    rft = _resolve("algo.name=rft")
    assert rft.algo.num_mini_batches == 1 and rft.algo.kl_coef == 0.0  # AlgoConfig's
    assert rft.rollout.group_size == 8 and rft.trainer.num_groups == 8  # the env's, not EI's


def test_the_users_keys_for_another_algorithm_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"algo.lam = 0.5 does nothing with algo.name: grpo"):
        _resolve("algo.lam=0.5", preset="grpo")
    with pytest.raises(ConfigError, match=r"algo.search_beam = 3 .* expert-iteration"):
        _resolve("algo.name=grpo", "algo.search_beam=3")
    # the error names the flag that set it, and no section dump
    with pytest.raises(ConfigError) as err:
        _resolve("algo.name=grpo", "algo.gamma=0.9")
    assert "(--env sokoban, --set algo.name=grpo, --set algo.gamma=0.9)" in str(err.value)
    assert "{" not in str(err.value)


def test_a_file_picks_its_algorithm_over_the_envs(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("env:\n  name: sokoban\nalgo:\n  name: ppo\n  lam: 0.9\n")
    cfg = _resolve(env=None, file=path)
    assert (cfg.algo.name, cfg.algo.lam) == ("ppo", 0.9)
    assert cfg.algo.critic_warmup_steps == 24  # the env's keys for the ppo preset


def test_a_resumed_run_may_switch_algorithm(tmp_path: Path) -> None:
    from agentrl.config import dump_config

    base = tmp_path / "config.yaml"
    base.write_text(dump_config(_resolve(preset="ppo")))
    cfg = resolve_train_config(
        config_file=None, overrides=["algo.name=grpo"], preset=None, flags={}, base_file=base
    )
    assert cfg.algo.name == "grpo" and cfg.trainer.num_groups == 128
