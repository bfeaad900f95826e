"""Sandbox backend registry: `SandboxConfig.backend` picks a backend by the name it was
registered under.

A backend is a `Sandbox` class (or factory) built as `backend(config: SandboxConfig)`.
Adding one is one file plus one line:

    register_sandbox("firecracker", FirecrackerSandbox)   # or "my_pkg.sandbox:Firecracker"

The built-ins (`docker`, `local`) are registered by module path, so validating a config
imports neither the Docker SDK nor anything else; `backend: module.path:Class` works
without registering.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrl.sandbox.base import Sandbox
    from agentrl.sandbox.config import SandboxConfig

SandboxFactory = Callable[["SandboxConfig"], "Sandbox"]

_BACKENDS: dict[str, SandboxFactory | str] = {}


def register_sandbox(name: str, entry_point: SandboxFactory | str) -> None:
    """Register `entry_point` (a `Sandbox` class, a factory or `"module.path:Class"`) as the
    sandbox backend `name`; a later call for the same name wins."""
    if not name or ":" in name:
        raise ValueError(f"sandbox backend name {name!r} must be non-empty and contain no ':'")
    _BACKENDS[name] = entry_point


def sandbox_backends() -> list[str]:
    """The registered backend names, sorted."""
    return sorted(_BACKENDS)


def sandbox_backend(name: str) -> SandboxFactory:
    """The backend registered as `name`, or the class a `module.path:Class` name imports;
    raises `ValueError` naming the known backends (and the nearest) for an unknown name.

    >>> sandbox_backend("local").__name__
    'LocalSandbox'
    >>> sandbox_backend("dokcer")
    Traceback (most recent call last):
    ...
    ValueError: unknown sandbox backend 'dokcer'; did you mean docker? Known backends: docker, local (or module.path:Class)
    """
    target = _BACKENDS.get(name)
    if target is None and ":" not in name:
        near = difflib.get_close_matches(name, sandbox_backends(), n=2, cutoff=0.5)
        hint = f"; did you mean {' or '.join(near)}?" if near else ";"
        known = ", ".join(sandbox_backends())
        raise ValueError(
            f"unknown sandbox backend {name!r}{hint} Known backends: {known} (or module.path:Class)"
        )
    if target is None or isinstance(target, str):
        return _resolve(target or name)
    return target


def check_backend(name: str) -> str:
    """`name` when it is a registered backend or looks like `module.path:Class` (imported
    only when a sandbox is built); else the `ValueError` of `sandbox_backend`."""
    if name not in _BACKENDS and ":" not in name:
        sandbox_backend(name)
    return name


def _resolve(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"sandbox backend {target!r}: cannot import it: {e}") from None
    return obj


register_sandbox("docker", "agentrl.sandbox.docker:DockerSandbox")
register_sandbox("local", "agentrl.sandbox.local:LocalSandbox")
