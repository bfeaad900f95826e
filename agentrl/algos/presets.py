"""Named algorithm presets: one YAML file each in `agentrl/algos/presets/`.

A preset is a partial run config (at least an `algo:` section) merged under the user's own
config file and `--set` overrides.

>>> "starpo-s" in list_presets()
True
>>> load_preset("starpo-s")["algo"]["clip_eps_high"]
0.28
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from agentrl.algos.config import AlgoConfig

__all__ = ["UnknownPresetError", "list_presets", "load_preset", "preset_algo_config"]

_PRESET_DIR = "presets"


class UnknownPresetError(ValueError):
    """The preset name is not one of the shipped presets; the message lists them."""


def _preset_files() -> dict[str, Any]:
    root = resources.files("agentrl.algos").joinpath(_PRESET_DIR)
    return {
        entry.name.removesuffix(".yaml"): entry
        for entry in root.iterdir()
        if entry.name.endswith(".yaml")
    }


def list_presets() -> list[str]:
    """Names of the shipped presets, sorted."""
    return sorted(_preset_files())


def load_preset(name: str) -> dict[str, Any]:
    """The preset `name` as a config tree (`{"algo": {...}, ...}`).

    Raises `UnknownPresetError` naming the known presets when `name` is not one of them.
    """
    files = _preset_files()
    if name not in files:
        raise UnknownPresetError(
            f"unknown preset {name!r}; known presets: {', '.join(sorted(files))}"
        )
    tree = yaml.safe_load(files[name].read_text()) or {}
    if not isinstance(tree, dict) or not isinstance(tree.get("algo"), dict):
        raise ValueError(f"preset {name!r} has no `algo:` section")
    return tree


def preset_algo_config(name: str) -> AlgoConfig:
    """The preset's `algo:` section validated as an `AlgoConfig`."""
    return AlgoConfig.model_validate(load_preset(name)["algo"])
