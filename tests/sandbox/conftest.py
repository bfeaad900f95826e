"""Fixtures for the sandbox tests: one warm Docker pool shared by the module's tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


def docker_or_skip() -> None:
    """Skip when no Docker daemon/image is here, unless CI requires Docker (then fail)."""
    from agentrl.sandbox.docker import unavailable_reason

    why = unavailable_reason()
    if why is not None:
        if os.environ.get("CI") or os.environ.get("AGENTRL_REQUIRE_DOCKER"):
            pytest.fail(f"Docker is required here: {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def docker_sandbox() -> Iterator:
    """A 2-container pool with small limits so attacks end fast."""
    docker_or_skip()
    from agentrl.sandbox import DockerSandbox

    sandbox = DockerSandbox(
        pool_size=2, memory_mb=256, work_mb=32, timeout=5, max_output_bytes=64 * 1024
    )
    yield sandbox
    sandbox.close()
