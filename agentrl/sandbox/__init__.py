"""Sandboxes for untrusted code: `DockerSandbox` (warm container pool) and `LocalSandbox`.

>>> from agentrl.sandbox import ExecResult
>>> ExecResult(stdout="hi\\n", stderr="", exit_code=0).ok
True
"""

from __future__ import annotations

from typing import Any

from agentrl.sandbox.base import ExecResult, Sandbox, SandboxError, SandboxUnavailableError
from agentrl.sandbox.config import DEFAULT_IMAGE, SandboxConfig
from agentrl.sandbox.registry import register_sandbox, sandbox_backend, sandbox_backends

__all__ = [
    "DEFAULT_IMAGE",
    "DockerSandbox",
    "ExecResult",
    "LocalSandbox",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SandboxUnavailableError",
    "make_sandbox",
    "register_sandbox",
    "sandbox_backend",
    "sandbox_backends",
]


def make_sandbox(config: SandboxConfig | None = None, **overrides: Any) -> Sandbox:
    """Build the sandbox `config.backend` names (`docker` by default, `local`, or a backend
    registered with `register_sandbox`; see `agentrl.sandbox.registry`)."""
    config = (config or SandboxConfig()).model_copy(update=overrides)
    return sandbox_backend(config.backend)(config)


def __getattr__(name: str) -> Any:
    if name == "DockerSandbox":
        from agentrl.sandbox.docker import DockerSandbox

        return DockerSandbox
    if name == "LocalSandbox":
        from agentrl.sandbox.local import LocalSandbox

        return LocalSandbox
    raise AttributeError(name)
