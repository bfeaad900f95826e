"""Engines are chosen by name from a registry: an engine registered from user code (one
class, one `register_engine` line) is what `engine.name` builds, and `module.path:Class`
works without registering."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.config import ConfigError, TrainConfig, load_config
from agentrl.rollout import register_engine
from agentrl.rollout.config import EngineConfig
from agentrl.rollout.engine_registry import _ENGINES, engine_names
from agentrl.rollout.engines import build_engine
from agentrl.rollout.testing import ScriptedEngine


class RecordingEngine(ScriptedEngine):
    """A scripted engine that keeps the model and options it was built with."""

    def __init__(self, model: str, **options: object) -> None:
        super().__init__(vocab_ids=[5, 6, 7])
        self.model, self.options = model, options


@pytest.fixture
def registered():
    register_engine("recording", RecordingEngine)
    register_engine(
        "recording-batched",
        RecordingEngine,
        options=lambda cfg, dtype, device: {"batch": cfg.max_batch_size},
    )
    yield
    _ENGINES.pop("recording", None)
    _ENGINES.pop("recording-batched", None)


def test_a_registered_engine_is_built_by_name(registered) -> None:
    cfg = TrainConfig(engine=EngineConfig(name="recording", device="cpu"))
    engine = build_engine(cfg, Path("some/model"))
    assert isinstance(engine, RecordingEngine) and engine.model == "some/model"
    assert engine.options == {"dtype": cfg.model.dtype, "device": "cpu"}
    cfg = load_config(overrides=["engine.name=recording-batched", "engine.max_batch_size=3"])
    assert build_engine(cfg, Path("m")).options == {"batch": 3}
    assert {"hf", "vllm", "recording"} <= set(engine_names())


def test_a_module_path_needs_no_registration() -> None:
    cfg = TrainConfig(engine=EngineConfig(name=f"{__name__}:RecordingEngine", device="cpu"))
    assert isinstance(build_engine(cfg, Path("m")), RecordingEngine)


def test_an_unknown_engine_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown engine 'vlm'; did you mean vllm\? Known"):
        load_config(overrides=["engine.name=vlm"])
    with pytest.raises(ConfigError, match="cannot import"):
        load_config(overrides=["engine.name=no_such_module:Engine"])
