"""Engine registry: `engine.name` picks an inference engine by the name it was registered under.

An engine is a class (or factory) that takes the model and keyword arguments and keeps the
`Engine` protocol (`agentrl.rollout.engine`). Adding one is one file plus one line:

    register_engine("my-engine", MyEngine)            # or "my_pkg.engines:MyEngine"

`options(cfg, dtype=..., device=...)` of a registration turns the `engine:` section into the
constructor's keyword arguments; without it, an engine gets `dtype` and `device`. Like the
env and algorithm registries, `engine.name: module.path:Class` works without registering. A
registered engine hosted on Ray (`engine.ray: true`) is built inside the replica's process:
name it by `module.path:Class` there, or register it in a module that process imports.

The built-ins (`hf`, `vllm`) are registered by module path, so validating a config imports
neither torch nor vLLM.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrl.rollout.config import EngineConfig
    from agentrl.rollout.engine import Engine

EngineOptions = Callable[..., dict[str, Any]]
"""`options(cfg: EngineConfig, *, dtype: str, device: str) -> constructor keyword arguments`."""


def default_options(cfg: EngineConfig, *, dtype: str, device: str) -> dict[str, Any]:
    """The keyword arguments of an engine registered without `options`: `dtype`, `device`."""
    return {"dtype": dtype, "device": device}


@dataclass(frozen=True)
class EngineEntry:
    """A registered engine: what builds it, and its keyword arguments from the config."""

    name: str
    entry_point: Callable[..., Engine] | str
    """A class or factory `(model, **options) -> Engine`, or `module.path:Class`."""
    options: EngineOptions = default_options

    def build(self, model: str, **kwargs: Any) -> Engine:
        """Create the engine in this process (imports a `module.path:Class` entry point)."""
        target = self.entry_point
        if isinstance(target, str):
            target = _resolve(target)
        return target(model, **kwargs)


_ENGINES: dict[str, EngineEntry] = {}


def register_engine(
    name: str, entry_point: Callable[..., Engine] | str, *, options: EngineOptions | None = None
) -> None:
    """Register `entry_point` (a class, a factory or `"module.path:Class"`) as engine `name`;
    a later call for the same name wins."""
    if not name or ":" in name:
        raise ValueError(f"engine name {name!r} must be non-empty and contain no ':'")
    _ENGINES[name] = EngineEntry(name, entry_point, options or default_options)


def engine_names() -> list[str]:
    """The registered engine names, sorted."""
    return sorted(_ENGINES)


def engine_entry(name: str) -> EngineEntry:
    """The engine registered as `name`, or a `module.path:Class` name's entry; raises
    `ValueError` naming the known engines (and the nearest) for an unknown name.

    >>> engine_entry("hf").entry_point
    'agentrl.rollout.hf_engine:HFEngine'
    >>> engine_entry("vlm")
    Traceback (most recent call last):
    ...
    ValueError: unknown engine 'vlm'; did you mean vllm? Known engines: hf, vllm (or module.path:Class)
    """
    if name in _ENGINES:
        return _ENGINES[name]
    if ":" in name:
        _resolve(name)  # fails now, naming the module, rather than on the first step
        return EngineEntry(name, name)
    near = difflib.get_close_matches(name, engine_names(), n=2, cutoff=0.5)
    hint = f"; did you mean {' or '.join(near)}?" if near else ";"
    known = ", ".join(engine_names())
    raise ValueError(f"unknown engine {name!r}{hint} Known engines: {known} (or module.path:Class)")


def _resolve(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"engine {target!r}: cannot import it: {e}") from None
    return obj


def _hf_options(cfg: EngineConfig, *, dtype: str, device: str) -> dict[str, Any]:
    return {"dtype": dtype, "device": device, "max_batch_size": cfg.max_batch_size}


def _vllm_options(cfg: EngineConfig, *, dtype: str, device: str) -> dict[str, Any]:
    return {
        "dtype": dtype,
        "max_model_len": cfg.max_model_len,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "kv_cache_gb": cfg.kv_cache_gb,
    }


register_engine("hf", "agentrl.rollout.hf_engine:HFEngine", options=_hf_options)
register_engine("vllm", "agentrl.rollout.vllm_engine:VLLMEngine", options=_vllm_options)
