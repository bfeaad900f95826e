"""The settings a model was trained with, kept beside its weights (`agentrl_settings.yaml`).

Every model folder agentrl writes (`agentrl sft`, a run's warm start, RL checkpoints,
`agentrl export`) holds the env and rollout settings it was trained with, so that
`agentrl eval --model FOLDER` plays the env as training did without flags:

    write_model_settings(folder, cfg)        # cfg: TrainConfig, SFTConfig or ModelSettings
    settings = ModelSettings.read(folder / SETTINGS_FILE)

`agentrl.train.checkpoint.write_run_settings` writes a run's settings into a checkpoint;
`agentrl.cli.model_folders.read_model_settings` finds the settings of any model folder, older
ones included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from agentrl.runtime.config import ConfigError, EnvConfig

SETTINGS_FILE = "agentrl_settings.yaml"
"""Name of the settings file inside a model folder (next to `config.json`)."""

_HEADER = (
    "# The env and rollout settings this model was trained with (written by agentrl).\n"
    "# `agentrl eval --model FOLDER` uses them; its flags override them.\n"
)


class ModelSettings(BaseModel):
    """How a model was trained to play its env: what evaluation must reproduce."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    env: EnvConfig
    """The env it was trained on: registered name and constructor keyword arguments."""
    max_turns: int | None = Field(None, ge=1)
    """`rollout.max_turns`: turns per episode; None is the env's own `max_turns`."""
    history_turns: int | None = Field(None, ge=0)
    """`rollout.history_turns`: earlier turns each prompt keeps; None the whole conversation."""
    max_context_tokens: int = Field(4096, ge=8)
    """`rollout.max_context_tokens`: ids allowed in one sequence."""
    max_new_tokens: int = Field(64, ge=1)
    """Ids sampled per turn (`rollout.sampling.max_new_tokens`)."""
    eval_temperature: float = Field(0.5, ge=0)
    """Sampling temperature of the run's validation (`eval.temperature`)."""
    eval_seed_offset: int = Field(1_000_000, ge=0)
    """First validation seed (`eval.seed_offset`); training seeds stay below it."""
    eval_episodes: int = Field(32, ge=1)
    """Validation episodes of the run's evaluation (`eval.num_episodes`), which a plain
    `agentrl eval --model` plays."""
    engine: str | None = None
    """Inference engine of the run's rollouts (`engine.name`), which a plain `agentrl eval`
    samples with; None (SFT and older folders): vllm when it is installed and the model has
    10 M weights or more, else hf (`agentrl.rollout.engines.default_engine`)."""
    source: str = Field("", exclude=True)
    """Where these settings were read from (not written to the file)."""

    @classmethod
    def from_config(cls, cfg: Any) -> ModelSettings:
        """The settings of a config that knows them (`TrainConfig.model_settings()`,
        `SFTConfig.model_settings()`), or `cfg` itself when it is a `ModelSettings`."""
        if isinstance(cfg, ModelSettings):
            return cfg
        return cfg.model_settings()

    @classmethod
    def read(cls, path: Path) -> ModelSettings:
        """The settings in the file `path` (an `agentrl_settings.yaml`), `source` set to it;
        raises `ConfigError` naming the file when it does not parse."""
        try:
            tree = yaml.safe_load(path.read_text()) or {}
            return cls.model_validate(tree).model_copy(update={"source": str(path)})
        except (yaml.YAMLError, ValueError) as e:
            raise ConfigError(f"{path}: not a model settings file: {e}") from None


def write_model_settings(folder: str | Path, cfg: Any) -> Path:
    """Write `cfg`'s settings (`TrainConfig`, `SFTConfig` or `ModelSettings`) into
    `folder/agentrl_settings.yaml`; returns the file."""
    path = Path(folder) / SETTINGS_FILE
    tree = ModelSettings.from_config(cfg).model_dump(mode="json")
    path.write_text(_HEADER + yaml.safe_dump(tree, sort_keys=False))
    return path
