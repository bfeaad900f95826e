"""Fixtures for the sandbox tests: one warm Docker pool shared by the module's tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from agentrl.sandbox import SandboxUnavailableError


def docker_or_skip() -> None:
    """Skip when no Docker daemon/image is here, unless CI requires Docker (then fail)."""
    from agentrl.sandbox.docker import connect
    from agentrl.sandbox.image import image_exists

    try:
        ok = image_exists(client=connect(timeout=5))
        why = "sandbox image missing: run `agentrl sandbox build --offline`"
    except SandboxUnavailableError as e:
        ok, why = False, str(e)
    if not ok:
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
