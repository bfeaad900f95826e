"""Configuration: one pydantic model per component, nested into `TrainConfig`.

Configs load from one YAML file plus dotted overrides (`--set algo.clip_eps_high=0.28`).
Unknown keys and bad values are errors that name the field, the value and the file.

>>> cfg = load_config(overrides=["rollout.group_size=4", "env.name=sokoban"])
>>> cfg.rollout.group_size, cfg.env.name
(4, 'sokoban')
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentrl.algos.config import AlgoConfig
from agentrl.rollout.config import EngineConfig, RolloutConfig
from agentrl.train.config import (
    CheckpointConfig,
    EvalConfig,
    LoggingConfig,
    OptimConfig,
    TrainerConfig,
    WarmStartConfig,
)


class _Section(BaseModel):
    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, validate_assignment=True
    )


class EnvConfig(_Section):
    name: str = "sokoban"
    """Registered env name, or `module.path:Class`."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to the env constructor (override its registered defaults).

    Any other key under `env` is one of these too: `--set env.generator=arithmetic` is
    `--set env.kwargs.generator=arithmetic`. A keyword the env does not take fails when the
    env is built (`agentrl train` builds one before loading the model), naming it and the env.
    """

    @model_validator(mode="before")
    @classmethod
    def _fold_env_kwargs(cls, data: Any) -> Any:
        """Move keys other than `name` and `kwargs` into `kwargs` (they beat `kwargs` there)."""
        if not isinstance(data, dict):
            return data
        extra = {k: v for k, v in data.items() if k not in cls.model_fields}
        if not extra:
            return data
        kwargs = data.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            return data  # let validation report the bad `kwargs`
        rest = {k: v for k, v in data.items() if k in cls.model_fields}
        return {**rest, "kwargs": {**kwargs, **extra}}


class ModelConfig(_Section):
    name: str = "smollm2-135m"
    """Hugging Face id, local path, or a built-in alias (`tiny`, `smollm2-135m`)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights dtype; `auto` is float32 on CPU and bfloat16 on GPU."""


class ConfigError(ValueError):
    """A config file or override is invalid; the message names the field, value and file."""


class TrainConfig(_Section):
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


def _parse_value(text: str) -> Any:
    """Parse an override value as YAML (`0.28`, `true`, `[1, 2]`), else keep the string."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {dotted}: {key!r} is a value, not a section")
        node = child
    node[keys[-1]] = value


def _format_errors(err: ValidationError, tree: dict[str, Any], origin: str) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        value = e.get("input")
        if e["type"] == "extra_forbidden":
            lines.append(f"  {loc}: unknown key (value {value!r})")
        else:
            lines.append(f"  {loc} = {value!r}: {e['msg']}")
    return f"invalid config ({origin}):\n" + "\n".join(lines)


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    base: dict[str, Any] | None = None,
    model: type[BaseModel] = TrainConfig,
) -> Any:
    """Build a config from `base`, then a YAML file, then `key.path=value` overrides."""
    tree: dict[str, Any] = {}
    origins = []
    for source in (base or {},):
        tree = _deep_merge(tree, source)
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML: {e}") from e
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: top level must be a mapping of sections")
        tree = _deep_merge(tree, loaded)
        origins.append(str(path))
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected key.path=value")
        _set_dotted(tree, key.strip(), _parse_value(value))
        origins.append(f"--set {item}")
    try:
        return model.model_validate(tree)
    except ValidationError as e:
        raise ConfigError(_format_errors(e, tree, ", ".join(origins) or "defaults")) from None


def _deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def dump_config(cfg: BaseModel) -> str:
    """The resolved config as YAML."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def config_keys(model: type[BaseModel] = TrainConfig, prefix: str = "") -> list[str]:
    """Every dotted key of a config model (nested sections expanded), in declaration order.

    >>> "trainer.lora.r" in config_keys()
    True
    """
    keys = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += config_keys(annotation, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys
