"""Configuration: one pydantic model per component, nested into `TrainConfig`.

Configs load from one YAML file plus dotted overrides (`--set algo.clip_eps_high=0.28`).
Unknown keys and bad values are errors that name the field, the value and the file.

>>> cfg = load_config(overrides=["rollout.group_size=4", "env.name=sokoban"])
>>> cfg.rollout.group_size, cfg.env.name
(4, 'sokoban')
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator

from agentrl.algos.config import AlgoConfig
from agentrl.rollout.config import EngineConfig, RolloutConfig
from agentrl.runtime import config as _runtime
from agentrl.runtime.config import (
    ConfigError,
    EnvConfig,
    LoggingConfig,
    ModelConfig,
    OptimConfig,
    _deep_merge,
    _parse_value,
    dump_config,
)
from agentrl.runtime.model_settings import ModelSettings
from agentrl.train.config import (
    CheckpointConfig,
    EvalConfig,
    TrainerConfig,
    WarmStartConfig,
)

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


class TrainConfig(_runtime._Section):
    """Everything one `agentrl train` run needs."""

    env: EnvConfig = Field(default_factory=EnvConfig)
    """The environment to train on."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The policy model."""
    warm_start: WarmStartConfig = Field(default_factory=WarmStartConfig)
    """Optional supervised warm start on an expert before RL."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """How episodes are rolled out and sampled."""
    engine: EngineConfig = Field(default_factory=EngineConfig)
    """The inference engine."""
    algo: AlgoConfig = Field(default_factory=AlgoConfig)
    """The RL algorithm (see the presets)."""
    optim: OptimConfig = Field(default_factory=OptimConfig)
    """AdamW and the learning-rate schedule."""
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    """The training loop and its backend."""
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    """Periodic checkpoints."""
    eval: EvalConfig = Field(default_factory=EvalConfig)
    """Periodic evaluation on validation seeds."""
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    """Metrics, TensorBoard, W&B, trajectories, progress bar, collapse warning."""
    seed: int = 0
    """Seed for torch, numpy and the env seed sequence."""

    @model_validator(mode="after")
    def _check_seed_ranges(self) -> TrainConfig:
        first, stop = self.trainer.first_seed, self.eval.seed_offset
        if first >= stop:
            raise ValueError(
                f"trainer.first_seed ({first}) must be below eval.seed_offset ({stop}): "
                "RL training seeds are drawn from [first_seed, seed_offset)"
            )
        if self.warm_start.expert is not None and self.warm_start.num_episodes > first:
            raise ValueError(
                f"warm_start.num_episodes ({self.warm_start.num_episodes}) uses expert seeds "
                f"0..{self.warm_start.num_episodes - 1}, which reach trainer.first_seed "
                f"({first}): raise trainer.first_seed so RL trains on rooms it did not imitate"
            )
        return self

    @model_validator(mode="after")
    def _check_algorithm(self) -> TrainConfig:
        """Combinations the algorithm cannot run with fail here, so `--print-config` shows
        them before any model loads."""
        if self.algo.name == "expert-iteration":
            needs = {
                "rollout.history_turns: 0 (the prompt must be the state)": (
                    self.rollout.history_turns == 0
                ),
                "trainer.backend: local (the search scores with the policy in process)": (
                    self.trainer.backend == "local"
                ),
            }
            missing = [k for k, ok in needs.items() if not ok]
            if missing:
                raise ValueError("algo.name expert-iteration needs " + ", ".join(missing))
        return self

    def model_settings(self) -> ModelSettings:
        """How the run's models play the env: what `agentrl eval --model` reproduces."""
        return ModelSettings(
            env=self.env,
            max_turns=self.rollout.max_turns,
            history_turns=self.rollout.history_turns,
            max_context_tokens=self.rollout.max_context_tokens,
            max_new_tokens=self.rollout.sampling.max_new_tokens,
            eval_temperature=self.eval.temperature,
            eval_seed_offset=self.eval.seed_offset,
        )


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    base: dict[str, Any] | None = None,
    model: type[BaseModel] = TrainConfig,
) -> Any:
    """Build a config (a `TrainConfig` unless `model` says otherwise) from `base`, then a YAML
    file, then `key.path=value` overrides (`agentrl.runtime.config.load_config`)."""
    return _runtime.load_config(path, overrides, base=base, model=model)


def config_keys(model: type[BaseModel] = TrainConfig, prefix: str = "") -> list[str]:
    """Every dotted key of a config model (nested sections expanded), in declaration order.

    >>> "trainer.lora.r" in config_keys()
    True
    """
    return _runtime.config_keys(model, prefix)
