"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """Local folder of the built-in `tiny` model (random Qwen2 + ChatML tokenizer), built once."""
    from agentrl.rollout.models import resolve_model

    return resolve_model("tiny")
