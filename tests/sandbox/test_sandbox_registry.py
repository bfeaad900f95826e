"""Sandbox backends are chosen by name from a registry: a backend registered from user code
(one class, one `register_sandbox` line) is what `backend:` builds, down to an env's tool."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agentrl.sandbox import (
    ExecResult,
    Sandbox,
    SandboxConfig,
    make_sandbox,
    register_sandbox,
    sandbox_backends,
)
from agentrl.sandbox.registry import _BACKENDS


class EchoSandbox(Sandbox):
    """Runs nothing: answers every program with its own source."""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.ran: list[str] = []

    def run(
        self,
        code_or_command: str | Sequence[str],
        *,
        stdin: str | bytes | None = None,
        files: object = None,
        timeout: float | None = None,
    ) -> ExecResult:
        self.ran.append(str(code_or_command))
        return ExecResult(stdout=f"echo: {code_or_command}", stderr="", exit_code=0)


@pytest.fixture
def echo_backend():
    register_sandbox("echo", EchoSandbox)
    yield
    _BACKENDS.pop("echo", None)


def test_a_registered_backend_is_built_by_name(echo_backend) -> None:
    sandbox = make_sandbox(SandboxConfig(backend="echo", pool_size=3))
    assert isinstance(sandbox, EchoSandbox) and sandbox.config.pool_size == 3
    assert sandbox.run("print(1)").stdout == "echo: print(1)"
    assert {"docker", "local", "echo"} <= set(sandbox_backends())


def test_an_env_tool_runs_in_the_registered_backend(echo_backend) -> None:
    from agentrl.envs import make

    env = make("tool-python", sandbox_config={"backend": "echo"})
    env.reset(seed=0)
    obs, *_ = env.step('<tool_call>{"name": "python", "arguments": {"code": "1+1"}}</tool_call>')
    text = obs if isinstance(obs, str) else " ".join(m["content"] for m in obs)
    assert "echo: " in text, obs
    env.close()


def test_a_module_path_and_unknown_names() -> None:
    sandbox = make_sandbox(SandboxConfig(backend=f"{__name__}:EchoSandbox"))
    assert isinstance(sandbox, EchoSandbox)
    with pytest.raises(ValueError, match="did you mean docker"):
        SandboxConfig(backend="dokcer")
