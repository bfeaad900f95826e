"""The root config: file + overrides, errors that name field and file, the key snapshot."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentrl.config import ConfigError, TrainConfig, config_keys, dump_config, load_config

SNAPSHOT = Path(__file__).with_name("config_keys.txt")


def test_config_keys_snapshot() -> None:
    """New or renamed keys show up in review. Regenerate with AGENTRL_UPDATE_SNAPSHOT=1."""
    keys = config_keys()
    if os.environ.get("AGENTRL_UPDATE_SNAPSHOT"):
        SNAPSHOT.write_text("\n".join(keys) + "\n")
    assert keys == SNAPSHOT.read_text().split(), (
        "config keys changed; review, then rerun with AGENTRL_UPDATE_SNAPSHOT=1"
    )


def test_at_most_100_config_keys() -> None:
    """The redesign's limit: a new key has to make room (one home per default)."""
    assert len(config_keys()) <= 100


def test_every_field_has_a_docstring() -> None:
    def walk(model):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"
            ann = field.annotation
            if isinstance(ann, type) and hasattr(ann, "model_fields"):
                yield from walk(ann)
        yield model

    assert list(walk(TrainConfig))


def test_unknown_key_names_field_and_file(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("trainer:\n  num_stepz: 3\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "trainer.num_stepz" in str(e.value) and "unknown key" in str(e.value)
    assert str(path) in str(e.value)


def test_a_retired_key_is_reported_with_what_replaced_it() -> None:
    """Keys of earlier versions are unknown keys whose error says what to write instead."""
    assert not set(TrainConfig.retired_keys) & set(config_keys())
    for key, now in TrainConfig.retired_keys.items():
        with pytest.raises(ConfigError) as e:
            load_config(overrides=[f"{key}=1"])
        assert f"  {key}: unknown key (value 1); {now}" in str(e.value)


def test_bad_value_names_field_value_and_origin(tmp_path) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(overrides=["optim.lr=-1"])
    message = str(e.value)
    assert "optim.lr = -1" in message and "--set optim.lr=-1" in message


def test_set_parsing_types_and_nesting(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("rollout:\n  group_size: 2\nalgo:\n  name: ppo\n")
    cfg = load_config(
        path,
        [
            "rollout.group_size=6",
            "algo.clip_eps_high=0.28",
            "trainer.async_rollout=true",
            "env.kwargs.room_size=[5, 5]",
            "algo.dual_clip_c=null",
            "model.name=some/model=1",
        ],
    )
    assert cfg.rollout.group_size == 6
    assert cfg.algo.clip_eps_high == 0.28 and cfg.algo.use_critic
    assert cfg.trainer.async_rollout is True
    assert cfg.env.kwargs == {"room_size": [5, 5]}
    assert cfg.algo.dual_clip_c is None
    assert cfg.model.name == "some/model=1"
    with pytest.raises(ConfigError, match="expected key.path=value"):
        load_config(overrides=["rollout.group_size"])


def test_dump_round_trips(tmp_path) -> None:
    cfg = load_config(overrides=["trainer.num_steps=7", "algo.name=rloo"])
    path = tmp_path / "config.yaml"
    path.write_text(dump_config(cfg))
    assert load_config(path) == cfg


def test_env_keys_other_than_its_fields_are_env_kwargs() -> None:
    cfg = load_config(overrides=["env.name=math", "env.generator=arithmetic", "env.kwargs.level=2"])
    assert cfg.env.name == "math"
    assert cfg.env.kwargs == {"generator": "arithmetic", "level": 2}
    again = load_config(overrides=["env.kwargs.generator=a", "env.generator=b"])
    assert again.env.kwargs == {"generator": "b"}  # the short spelling wins


def test_algo_config_literals_match_the_losses() -> None:
    """The config keeps its own copies of the loss Literals (no torch import); same values."""
    from typing import get_args

    from agentrl.algos import config as algo_config
    from agentrl.algos import losses

    assert get_args(algo_config.LossAgg) == get_args(losses.LossAgg)
    assert get_args(algo_config.KLKind) == get_args(losses.KLKind)


def test_unknown_key_suggests_the_nearest_keys() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(
            overrides=["trainer.num_step=3", "trainer.lr=1", "algo.clip_eps=0.1", "zzz.q=1"],
            model=TrainConfig,
        )
    text = str(err.value)
    assert "trainer.num_step: unknown key (value 3); did you mean trainer.num_steps?" in text
    assert (
        "trainer.lr: unknown key (value 1); did you mean optim.lr or warm_start.optim.lr?" in text
    )
    assert "did you mean algo.clip_eps_low or algo.clip_eps_high?" in text
    assert "zzz: unknown key ({'q': 1})" in text.replace("(value ", "(")
