"""Config sections both trainers share, and the machinery that loads any config model.

`agentrl.sft.SFTConfig` and `agentrl.config.TrainConfig` nest these sections: the env, the
model, the optimizer (with LoRA), logging. `load_config` builds a config model from one YAML
file plus dotted overrides (`--set optim.lr=3e-4`); unknown keys and bad values are errors that
name the field, the value and the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


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


class OptimConfig(_Section):
    """AdamW and its learning-rate schedule (policy and critic)."""

    lr: float = Field(default=1e-5, gt=0)
    """Policy learning rate after warmup."""
    critic_lr: float = Field(default=1e-4, gt=0)
    """Critic (value model) learning rate after warmup."""
    weight_decay: float = Field(default=0.0, ge=0)
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW beta1, beta2."""
    eps: float = Field(default=1e-8, gt=0)
    """AdamW epsilon."""
    max_grad_norm: float = Field(default=1.0, gt=0)
    """Gradients are clipped to this global L2 norm before each optimizer step."""
    warmup_steps: int = Field(default=0, ge=0)
    """Optimizer steps of linear warmup from 0 to `lr`."""
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    """LR after warmup: constant, linear decay or cosine decay to `min_lr_ratio * lr`."""
    min_lr_ratio: float = Field(default=0.0, ge=0, le=1)
    """Final LR as a fraction of `lr` for the linear and cosine schedules."""
    cycles: int = Field(default=1, gt=0)
    """Linear or cosine decay in this many equal cycles, each restarting from its peak (warm
    restarts, SGDR)."""
    cycle_decay: float = Field(default=1.0, gt=0, le=1)
    """Each cycle's peak LR is this times the previous cycle's."""


class LoraConfig(_Section):
    """Low-rank adapters through `peft` (installed separately: `pip install agentrl[peft]`),
    on every backend. The engines get the merged weights; checkpoints keep the adapter alone
    under `policy/adapter` (peft format), which `agentrl eval --model` and `agentrl export`
    load over the base model."""

    enabled: bool = False
    """Train LoRA adapters on the policy instead of all its weights (a critic trains fully)."""
    r: int = Field(default=16, gt=0)
    """Adapter rank."""
    alpha: int = Field(default=32, gt=0)
    """LoRA scaling numerator (scale = alpha / r)."""
    dropout: float = Field(default=0.0, ge=0, lt=1)
    """Dropout on the adapter input."""
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    """Names of the `nn.Linear` modules that get adapters."""


class CollapseConfig(_Section):
    """Early warning of the "Echo Trap": in-group reward std and entropy fall, then the grad
    norm spikes (thresholds: `agentrl.runtime.metrics.CollapseDetector`)."""

    enabled: bool = True
    """Emit the `collapse_warning` metric and a warning line."""


class LoggingConfig(_Section):
    """Where metrics and trajectories go."""

    tensorboard: bool = True
    """Write TensorBoard events under `<run>/tensorboard`."""
    wandb: bool = False
    """Also log to Weights & Biases (needs `wandb` installed and logged in)."""
    wandb_project: str = "agentrl"
    """W&B project name."""
    save_trajectories: int = Field(default=4, ge=0)
    """Trajectories per step written under `<run>/trajectories`; 0 disables."""
    progress: bool = True
    """Show a rich progress bar."""
    collapse: CollapseConfig = Field(default_factory=CollapseConfig)
    """Collapse early-warning thresholds."""


class ConfigError(ValueError):
    """A config file or override is invalid; the message names the field, value and file."""


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
    model: type[BaseModel],
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


def config_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted key of a config model (nested sections expanded), in declaration order.

    >>> config_keys(OptimConfig)[:2]
    ['lr', 'critic_lr']
    """
    keys = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += config_keys(annotation, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys
