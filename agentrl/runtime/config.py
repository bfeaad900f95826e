"""Config sections both trainers share, and the machinery that loads any config model.

`agentrl.sft.SFTConfig` and `agentrl.config.TrainConfig` nest these sections: the env, the
model, the optimizer (with LoRA), logging, and the supervised fine-tuning on an expert
(`ExpertSFTConfig`: `SFTConfig` extends it, `TrainConfig.warm_start` is one). `load_config`
builds a config model from one YAML file plus dotted overrides (`--set optim.lr=3e-4`); unknown
keys and bad values are errors that name the field, the value and the file.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
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


class OptimConfig(_Section):
    """AdamW (betas 0.9, 0.999; no weight decay) and its learning-rate schedule: the keys RL's
    `optim` (`PolicyOptimConfig`, which adds the critic's lr) and supervised fine-tuning's
    (`SFTOptimConfig`, with its own defaults and warm restarts) share."""

    lr: float = Field(default=1e-5, gt=0)
    """Policy learning rate after warmup."""
    max_grad_norm: float = Field(default=1.0, gt=0)
    """Gradients are clipped to this global L2 norm before each optimizer step."""
    warmup_steps: int = Field(default=0, ge=0)
    """Optimizer steps of linear warmup from 0 to `lr`."""
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    """LR after warmup: constant, linear decay or cosine decay to `min_lr_ratio * lr`."""
    min_lr_ratio: float = Field(default=0.0, ge=0, le=1)
    """Final LR as a fraction of `lr` for the linear and cosine schedules."""


class PolicyOptimConfig(OptimConfig):
    """AdamW and its learning-rate schedule for RL: the policy's, and the critic's lr."""

    critic_lr: float = Field(default=1e-4, gt=0)
    """Critic (value model) learning rate after warmup (algorithms with a critic: ppo)."""


class SFTOptimConfig(OptimConfig):
    """AdamW and its learning-rate schedule for supervised fine-tuning (`agentrl sft`, the
    warm start): warmup and cosine decay by default, optionally in cycles (warm restarts)."""

    lr: float = Field(default=1e-3, gt=0)
    """Learning rate after warmup. 1e-3 suits the random-weight `tiny` model; use about 1e-5
    for a pretrained LLM."""
    warmup_steps: int = Field(default=10, ge=0)
    """Optimizer steps of linear warmup from 0 to `lr`."""
    schedule: Literal["constant", "linear", "cosine"] = "cosine"
    """LR after warmup: constant, linear decay or cosine decay to `min_lr_ratio * lr`."""
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    """Final LR as a fraction of `lr` for the linear and cosine schedules."""
    cycles: int = Field(default=1, gt=0)
    """Linear or cosine decay in this many equal cycles, each restarting from its peak (warm
    restarts, SGDR)."""
    cycle_decay: float = Field(default=1.0, gt=0, le=1)
    """Each cycle's peak LR is this times the previous cycle's."""


class ExpertSFTConfig(_Section):
    """Supervised fine-tuning on an expert's episodes: the keys `agentrl sft` (`SFTConfig`)
    and the warm start of `agentrl train` (`warm_start`) share."""

    expert: str = "solver"
    """Registered expert that plays the env (`agentrl.sft.expert.register_expert`)."""
    num_episodes: int = Field(default=512, gt=0)
    """Expert episodes (one per training seed)."""
    max_actions_per_turn: int | None = Field(default=None, gt=0)
    """Actions per expert answer; None uses the env's own per-turn limit."""
    num_epochs: int = Field(default=3, gt=0)
    """Passes over the expert episodes."""
    batch_size: int = Field(default=16, gt=0)
    """Samples per optimizer step: episodes, or turns when prompts keep only the last turns
    (`history_turns`; the warm start takes `rollout.history_turns`)."""
    optim: SFTOptimConfig = Field(default_factory=SFTOptimConfig)
    """AdamW and LR schedule, with the defaults of supervised fine-tuning."""
    checkpoint_every_s: float | None = Field(default=120.0, ge=0)
    """Seconds of training between checkpoints, from which `--resume` continues (`agentrl sft
    --resume`, or `agentrl train --resume` during the warm start); 0 writes one after every
    step, None none."""


class LoraConfig(_Section):
    """Low-rank adapters through `peft` (installed separately: `pip install agentrl[peft]`),
    on every backend. The engines get the merged weights; checkpoints keep the adapter alone
    under `policy/adapter` (peft format), which `agentrl eval --model` and `agentrl export`
    load over the base model. The adapters have no dropout: the backends score and update in
    train mode, where dropout would make the trainer's log-probabilities differ from those of
    the engine that sampled."""

    enabled: bool = False
    """Train LoRA adapters on the policy instead of all its weights (a critic trains fully)."""
    r: int = Field(default=16, gt=0)
    """Adapter rank."""
    alpha: int = Field(default=32, gt=0)
    """LoRA scaling numerator (scale = alpha / r)."""
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    """Names of the `nn.Linear` modules that get adapters."""


class LoggingConfig(_Section):
    """Where metrics and trajectories go."""

    tensorboard: bool = True
    """Write TensorBoard events under `<run>/tensorboard`."""
    wandb: bool = False
    """Also log to Weights & Biases (needs `wandb` installed and logged in), into the project
    W&B's `WANDB_PROJECT` environment variable names (`agentrl` when unset)."""
    save_trajectories: int = Field(default=4, ge=0)
    """Trajectories per step written under `<run>/trajectories`; 0 disables."""
    progress: bool = True
    """Show a rich progress bar."""


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


def nearest_keys(key: str, known: list[str], n: int = 3) -> list[str]:
    """Known dotted keys closest to a mistyped one: same last name in another section first
    (`trainer.lr` -> `optim.lr`), then by spelling.

    >>> nearest_keys("trainer.num_step", ["trainer.num_steps", "optim.lr"])
    ['trainer.num_steps']
    >>> nearest_keys("trainer.lr", ["trainer.num_steps", "optim.lr", "optim.critic_lr"])
    ['optim.lr']
    """
    last = key.rsplit(".", 1)[-1]
    same_name = sorted(
        (k for k in known if k.rsplit(".", 1)[-1] == last), key=lambda k: k.count(".")
    )
    if same_name:
        return same_name[:n]
    scored = sorted(
        ((difflib.SequenceMatcher(None, key, k).ratio(), k) for k in known), reverse=True
    )
    best = scored[0][0] if scored else 0.0
    return [k for r, k in scored[:n] if r >= 0.75 and r >= best - 0.05]


def _format_errors(
    err: ValidationError, origin: str, retired: dict[str, str], known: list[str]
) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        value = e.get("input")
        if e["type"] == "extra_forbidden":
            if loc in retired:
                hint = f"; {retired[loc]}"
            elif near := nearest_keys(loc, known):
                hint = f"; did you mean {' or '.join(near)}?"
            else:
                hint = ""
            lines.append(f"  {loc}: unknown key (value {value!r}){hint}")
        elif e["type"] == "value_error" and isinstance(value, dict):
            # a section's own check (a model validator): its message, which names its keys,
            # not the whole section
            lines.append(f"  {e['msg'].removeprefix('Value error, ')}")
        else:
            lines.append(f"  {loc} = {value!r}: {e['msg']}")
    return f"invalid config ({origin}):\n" + "\n".join(lines)


def config_tree(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    base: dict[str, Any] | None = None,
    typed: dict[str, str] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The unvalidated config tree of `base`, then a YAML file, then `key.path=value`
    overrides, and where its layers came from (the file, each override as the user typed it:
    `--set ITEM`, or `typed[ITEM]` for one a command-line flag set)."""
    tree = _deep_merge({}, base or {})
    origins = []
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
        origins.append((typed or {}).get(item, f"--set {item}"))
    return tree, origins


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    base: dict[str, Any] | None = None,
    model: type[BaseModel],
    typed: dict[str, str] | None = None,
) -> Any:
    """Build a config from `base`, then a YAML file, then `key.path=value` overrides.

    An error's header names the file and each override as the user typed it: `--set ITEM`,
    or `typed[ITEM]` for one a command-line flag set (`env.name=sokoban` -> `--env sokoban`).

    An unknown key that the model lists in its `retired_keys` (a class attribute: old dotted
    key -> what to write instead) is reported with that hint.
    """
    tree, origins = config_tree(path, overrides, base=base, typed=typed)
    try:
        return model.model_validate(tree)
    except ValidationError as e:
        retired = getattr(model, "retired_keys", {})
        known = config_keys(model)
        raise ConfigError(
            _format_errors(e, ", ".join(origins) or "defaults", retired, known)
        ) from None


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
    ['lr', 'max_grad_norm']
    """
    keys = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += config_keys(annotation, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys
