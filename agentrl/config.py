"""The config of an `agentrl train` run, where users import it from.

`TrainConfig` nests one pydantic model per component. Configs load from one YAML file plus
dotted overrides (`--set algo.clip_eps_high=0.28`); unknown keys and bad values are errors
that name the field, the value and the file. The models live beside the code they configure
(`agentrl.train.config`, `agentrl.runtime.config`, `agentrl.rollout.config`,
`agentrl.algos.config`); this module gathers them.

>>> cfg = load_config(overrides=["rollout.group_size=4", "env.name=sokoban"])
>>> cfg.rollout.group_size, cfg.env.name
(4, 'sokoban')
"""

from agentrl.runtime.config import (
    ConfigError,
    EnvConfig,
    ModelConfig,
    _deep_merge,
    _parse_value,
    dump_config,
)
from agentrl.train.config import TrainConfig, config_keys, load_config

__all__ = [
    "ConfigError",
    "EnvConfig",
    "ModelConfig",
    "TrainConfig",
    "_deep_merge",
    "_parse_value",
    "config_keys",
    "dump_config",
    "load_config",
]
