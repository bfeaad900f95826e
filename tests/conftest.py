"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def require_docker() -> None:
    """Skip without a Docker daemon and the sandbox image; fail instead where CI requires
    Docker (`CI` or `AGENTRL_REQUIRE_DOCKER` set), so no Docker test is skipped there."""
    from agentrl.sandbox.docker import unavailable_reason

    why = unavailable_reason()
    if why is not None:
        if os.environ.get("CI") or os.environ.get("AGENTRL_REQUIRE_DOCKER"):
            pytest.fail(f"Docker is required here: {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def ray_local():
    """Ray on loopback with 2 CPUs for one test module; engines and actors join it."""
    ray = pytest.importorskip("ray")
    ray.init(
        num_cpus=2,
        num_gpus=0,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
        log_to_driver=False,
    )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """Local folder of the built-in `tiny` model (random Qwen2 + ChatML tokenizer), built once."""
    from agentrl.rollout.models import resolve_model

    return resolve_model("tiny")
