"""MetricsLogger: metrics.jsonl, TensorBoard events, and the W&B calls when asked."""

from __future__ import annotations

import json
import sys
import types
from typing import Any

import pytest

from agentrl.runtime.metrics import MetricsLogger, read_metrics
from agentrl.train.config import LoggingConfig


class _FakeRun:
    def __init__(self, calls: list[tuple[str, Any]]) -> None:
        self.calls = calls

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.calls.append(("log", (step, metrics)))

    def finish(self) -> None:
        self.calls.append(("finish", None))


def test_jsonl_tensorboard_and_wandb(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, Any]] = []

    def init(**kwargs: Any) -> _FakeRun:  # stands in for wandb.init: no account, no network
        calls.append(("init", kwargs))
        return _FakeRun(calls)

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    monkeypatch.setenv("WANDB_PROJECT", "proj")
    cfg = LoggingConfig(wandb=True)
    logger = MetricsLogger(tmp_path, cfg, run_name="r1", config={"seed": 3})
    logger.log(1, {"reward/mean": 0.5})
    logger.log(2, {"reward/mean": 1.5})
    logger.close()

    assert [r["reward/mean"] for r in read_metrics(tmp_path)] == [0.5, 1.5]
    assert list((tmp_path / "tensorboard").iterdir())  # event file written
    kind, kwargs = calls[0]
    assert kind == "init" and kwargs["project"] == "proj" and kwargs["name"] == "r1"
    assert kwargs["config"] == {"seed": 3}
    assert calls[1] == ("log", (1, {"reward/mean": 0.5}))
    assert calls[2][0] == "log" and calls[2][1][0] == 2
    assert calls[-1] == ("finish", None)


def test_wandb_missing_is_a_clear_error(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    with pytest.raises(RuntimeError, match="pip install wandb"):
        MetricsLogger(tmp_path, LoggingConfig(wandb=True), run_name="r", config={})


def test_truncate_after_drops_lines_redone_on_resume(tmp_path) -> None:
    logger = MetricsLogger(tmp_path, LoggingConfig(tensorboard=False), run_name="r", config={})
    for step in (1, 2, 3):
        logger.log(step, {"x": float(step)})
    logger.close()
    logger.truncate_after(2)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
