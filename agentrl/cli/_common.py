"""What every command shares: failing with a one-line message, or a few lines when an env
breaks its contract or needs a Docker daemon that is not there."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer

from agentrl._console import command_name


class RunError(Exception):
    """A run or evaluation that cannot start (an unknown env, a missing service, a taken run
    folder, a model folder without a model); the message says why. A command prints it as
    `error: ...` and exits with `code` (2: bad usage; 1: a service is missing); the Python
    API raises it."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def fail(message: str, code: int = 2) -> None:
    """Print `error: message` to stderr and exit with `code` (2: bad usage)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@contextmanager
def env_errors_stop(
    env: str, kwargs: dict[str, Any] | None = None, *, resume: str | None = None
) -> Iterator[None]:
    """Turn an `EnvContractError` raised inside into a few lines on stderr and exit code 1:
    the env class, what it returned, the fix, the `agentrl envs check` command for `env`
    (with its keyword arguments) and, given `resume`, how to go on once it is fixed. Too
    many env errors in a row (`TooManyEnvErrors`) end the same way."""
    from agentrl.envs.contract import EnvContractError
    from agentrl.train.env_errors import TooManyEnvErrors

    sets = [f"--set {shlex.quote(f'{k}={v}')}" for k, v in (kwargs or {}).items()]
    check = " ".join([f"{command_name()} envs check", shlex.quote(env), *sets])
    try:
        yield
    except TooManyEnvErrors as e:
        lines = [f"error: {e}", f"  check the env with: {check}"]
        if resume:
            lines.append(f"  then resume with: {resume}")
        typer.echo("\n".join(lines), err=True)
        raise typer.Exit(1) from None
    except EnvContractError as e:
        lines = [
            f"error: env {e.env} broke the TokenEnv contract, so the run stopped:",
            f"  {e.call} returned {e.returned}",
            f"  fix: {e.fix}",
            f"  check the env with: {check}",
        ]
        if resume:
            lines.append(f"  then resume with: {resume}")
        typer.echo("\n".join(lines), err=True)
        raise typer.Exit(1) from None


def require_services(env: str, kwargs: dict[str, Any] | None = None) -> None:
    """Stop (exit code 1), before a model loads or anything is written, when a service `env`
    needs is missing (`missing_service`); the message says how to start it."""
    why = missing_service(env, kwargs)
    if why is not None:
        fail(why, code=1)


def missing_service(env: str, kwargs: dict[str, Any] | None = None) -> str | None:
    """Why `env` cannot run here, or None: it runs its tool in a Docker sandbox (its
    registration `requires` docker) and no daemon answers or the sandbox image is missing
    (the message says how to start Docker). An env given `sandbox_config: {backend: local}`
    (bubblewrap), or arguments its registration's `requires_unless` names (tool-python's
    `tool: false`), needs no Docker."""
    from agentrl.envs.registry import UnknownEnvError, spec

    try:
        requires = spec(env).services(kwargs)
    except UnknownEnvError:
        return None
    sandbox = dict((kwargs or {}).get("sandbox_config") or {})
    if "docker" not in requires or sandbox.get("backend", "docker") != "docker":
        return None
    from agentrl.sandbox.config import DEFAULT_IMAGE
    from agentrl.sandbox.docker import unavailable_reason

    why = unavailable_reason(sandbox.get("image", DEFAULT_IMAGE))
    return None if why is None else f"{env} runs code in a Docker sandbox, and {why}"
