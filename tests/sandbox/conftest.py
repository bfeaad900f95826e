"""Fixtures for the sandbox tests: one warm Docker pool shared by the module's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def docker_sandbox(require_docker: None) -> Iterator:
    """A 2-container pool with small limits so attacks end fast."""
    from agentrl.sandbox import DockerSandbox

    sandbox = DockerSandbox(
        pool_size=2, memory_mb=256, work_mb=32, timeout=5, max_output_bytes=64 * 1024
    )
    yield sandbox
    sandbox.close()
