"""The settings a model was trained with, kept beside its weights (`agentrl_settings.yaml`).

Every model folder agentrl writes (`agentrl sft`, a run's warm start, RL checkpoints,
`agentrl export`) holds the env and rollout settings it was trained with, so that
`agentrl eval --model FOLDER` plays the env as training did without flags:

    write_model_settings(folder, cfg)        # cfg: TrainConfig, SFTConfig or ModelSettings
    write_run_settings(run_dir, folder)      # the settings of the run in run_dir
    settings = read_model_settings(folder)   # ModelSettings, or None
    settings.history_turns, settings.source  # 0, ".../agentrl_settings.yaml"

A folder written before the file existed falls back to what lies around it: the `config.yaml`
of the run it sits in (`RUN/warm_start`, `RUN/checkpoints/step-N[/policy/model]`, the LoRA
adapter `.../policy/adapter`), else the `sft_config.yaml` that `agentrl sft` leaves in its
output folder.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from agentrl.config import EnvConfig

SETTINGS_FILE = "agentrl_settings.yaml"
"""Name of the settings file inside a model folder (next to `config.json`)."""

_HEADER = (
    "# The env and rollout settings this model was trained with (written by agentrl).\n"
    "# `agentrl eval --model FOLDER` uses them; its flags override them.\n"
)
_STEP = re.compile(r"^step-\d+$")


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
    source: str = Field("", exclude=True)
    """Where these settings were read from (not written to the file)."""

    @classmethod
    def from_config(cls, cfg: Any) -> ModelSettings:
        """The settings of a `TrainConfig` (a run) or an `SFTConfig` (`agentrl sft`)."""
        from agentrl.sft.config import SFTConfig

        if isinstance(cfg, ModelSettings):
            return cfg
        if isinstance(cfg, SFTConfig):
            return cls(
                env=cfg.env,
                history_turns=cfg.history_turns,
                max_context_tokens=cfg.max_context_tokens,
                max_new_tokens=cfg.eval_max_new_tokens,
                eval_temperature=cfg.eval_temperature,
                eval_seed_offset=cfg.eval_seed_offset,
            )
        rollout = cfg.rollout
        return cls(
            env=cfg.env,
            max_turns=rollout.max_turns,
            history_turns=rollout.history_turns,
            max_context_tokens=rollout.max_context_tokens,
            max_new_tokens=rollout.sampling.max_new_tokens,
            eval_temperature=cfg.eval.temperature,
            eval_seed_offset=cfg.eval.seed_offset,
        )


def write_model_settings(folder: str | Path, cfg: Any) -> Path:
    """Write `cfg`'s settings (`TrainConfig`, `SFTConfig` or `ModelSettings`) into
    `folder/agentrl_settings.yaml`; returns the file."""
    path = Path(folder) / SETTINGS_FILE
    tree = ModelSettings.from_config(cfg).model_dump(mode="json")
    path.write_text(_HEADER + yaml.safe_dump(tree, sort_keys=False))
    return path


def write_run_settings(run_dir: str | Path, folder: str | Path) -> Path | None:
    """Write the settings of the run in `run_dir` (its `config.yaml`) into the model folder
    `folder` (a checkpoint's `policy/model`); None when `run_dir` holds no run config (a
    `Trainer` driven without `agentrl train`)."""
    run_file = _run_config_file(Path(run_dir))
    if run_file is None:
        return None
    from agentrl.config import load_config

    return write_model_settings(folder, load_config(run_file))


def read_model_settings(folder: str | Path) -> ModelSettings | None:
    """The settings the model in `folder` was trained with, or None when nothing says.

    Looks for, in order: `folder/agentrl_settings.yaml`; the `config.yaml` of the run
    `folder` is or sits in (its `warm_start`, a checkpoint, a checkpoint's `policy/model`);
    `folder/sft_config.yaml`. A file that is there but does not parse raises `ConfigError`
    naming it. `source` on the result names the file used.
    """
    from agentrl.config import ConfigError, TrainConfig, load_config
    from agentrl.sft.config import SFTConfig

    folder = Path(folder)
    own = folder / SETTINGS_FILE
    if own.is_file():
        try:
            tree = yaml.safe_load(own.read_text()) or {}
            return ModelSettings.model_validate(tree).model_copy(update={"source": str(own)})
        except (yaml.YAMLError, ValueError) as e:
            raise ConfigError(f"{own}: not a model settings file: {e}") from None
    run_file = _run_config_file(folder)
    if run_file is not None:
        settings = ModelSettings.from_config(load_config(run_file, model=TrainConfig))
        return settings.model_copy(update={"source": f"{run_file} (the run's config)"})
    sft_file = folder / "sft_config.yaml"
    if sft_file.is_file():
        settings = ModelSettings.from_config(load_config(sft_file, model=SFTConfig))
        return settings.model_copy(update={"source": f"{sft_file} (agentrl sft's config)"})
    return None


def _run_config_file(folder: Path) -> Path | None:
    """The `config.yaml` of the run directory `folder` is or sits in, else None."""
    folder = folder.resolve()
    candidates = [folder]
    if folder.name == "warm_start":
        candidates.append(folder.parent)
    if _STEP.match(folder.name) and folder.parent.name == "checkpoints":
        candidates.append(folder.parents[1])
    in_policy = folder.parts[-2:] in (("policy", "model"), ("policy", "adapter"))
    if in_policy and _STEP.match(folder.parents[1].name):
        candidates.append(folder.parents[3])
    for run in candidates:
        if (run / "config.yaml").is_file() and _is_run_dir(run):
            return run / "config.yaml"
    return None


def _is_run_dir(folder: Path) -> bool:
    """Whether `folder` looks like an `agentrl train` run directory (not any `config.yaml`)."""
    return any((folder / name).exists() for name in ("checkpoints", "metrics.jsonl", "warm_start"))


def describe_model_folder(path: str | Path) -> str:
    """Why `path` holds no model to load, and what to do instead (for error messages)."""
    from agentrl.train.checkpoint import CHECKPOINT_DIR
    from agentrl.train.warm_start import WARM_START_DIR

    path = Path(path)
    if not path.is_dir():
        return f"{path} is not a folder"
    warm = path / WARM_START_DIR
    if (path / "config.yaml").is_file() and _is_run_dir(path):
        steps = "the first is written after `checkpoint.every` steps and at the end"
        if (warm / "config.json").is_file():
            return (
                f"{path} is a run directory without a checkpoint yet ({steps}); its warm-start "
                f"model is ready: use --model {warm}, or wait for a checkpoint"
            )
        if warm.is_dir():
            return (
                f"{path} is a run directory still in its warm start (no model in {warm} yet, "
                "no checkpoint); wait for the warm start to finish"
            )
        start = (yaml.safe_load((path / "config.yaml").read_text()) or {}).get("model", {})
        return (
            f"{path} is a run directory without a checkpoint ({steps}, unless deleted since); "
            f"wait for one, or evaluate the model it started from: --model {start.get('name')}"
        )
    if (path / CHECKPOINT_DIR).is_dir():
        return f"{path}/{CHECKPOINT_DIR} holds no complete checkpoint (step-N folder) yet"
    names = sorted(p.name for p in path.iterdir())[:8]
    listing = ", ".join(names) if names else "nothing"
    return (
        f"{path} is neither a run directory, a checkpoint nor a model folder (no config.json); "
        f"it holds {listing}"
    )
