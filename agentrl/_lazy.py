"""Lazy package exports: a name loads its module on first access (keeps imports light)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, exports: dict[str, str]
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """`(__all__, __getattr__, __dir__)` for `package`, whose name `n` lives in `exports[n]`.

    >>> all_, getattr_, _ = lazy_exports("pkg", {"sqrt": "math"})
    >>> all_, getattr_("sqrt")(4.0)
    (['sqrt'], 2.0)
    """
    names = sorted(exports)

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        return names

    return names, __getattr__, __dir__
