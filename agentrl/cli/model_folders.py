"""What a model folder holds and was trained with, for `agentrl eval` and `agentrl export`.

A folder written before `agentrl_settings.yaml` existed falls back to what lies around it: the
`config.yaml` of the run it sits in (`RUN/warm_start`, `RUN/checkpoints/step-N[/policy/model]`,
the LoRA adapter `.../policy/adapter`), else the `sft_config.yaml` that `agentrl sft` leaves in
its output folder.

    settings = read_model_settings(folder)   # ModelSettings, or None
    settings.history_turns, settings.source  # 0, ".../agentrl_settings.yaml"
"""

from __future__ import annotations

from pathlib import Path

import yaml

from agentrl.config import TrainConfig, load_config
from agentrl.runtime.model_settings import SETTINGS_FILE, ModelSettings
from agentrl.sft.config import SFTConfig
from agentrl.train.checkpoint import (
    CHECKPOINT_DIR,
    WARM_START_DIR,
    is_run_dir,
    run_config_file,
)


def read_model_settings(folder: str | Path) -> ModelSettings | None:
    """The settings the model in `folder` was trained with, or None when nothing says.

    Looks for, in order: `folder/agentrl_settings.yaml`; the `config.yaml` of the run
    `folder` is or sits in (its `warm_start`, a checkpoint, a checkpoint's `policy/model`);
    `folder/sft_config.yaml`. A file that is there but does not parse raises `ConfigError`
    naming it. `source` on the result names the file used.
    """
    folder = Path(folder)
    own = folder / SETTINGS_FILE
    if own.is_file():
        return ModelSettings.read(own)
    run_file = run_config_file(folder)
    if run_file is not None:
        settings = ModelSettings.from_config(load_config(run_file, model=TrainConfig))
        return settings.model_copy(update={"source": f"{run_file} (the run's config)"})
    sft_file = folder / "sft_config.yaml"
    if sft_file.is_file():
        settings = ModelSettings.from_config(load_config(sft_file, model=SFTConfig))
        return settings.model_copy(update={"source": f"{sft_file} (agentrl sft's config)"})
    return None


def describe_model_folder(path: str | Path) -> str:
    """Why `path` holds no model to load, and what to do instead (for error messages)."""
    path = Path(path)
    if not path.is_dir():
        return f"{path} is not a folder"
    warm = path / WARM_START_DIR
    if (path / "config.yaml").is_file() and is_run_dir(path):
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
