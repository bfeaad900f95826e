"""Shared helpers of the documentation tests: paths and loading the generator script."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def load_script(name: str) -> ModuleType:
    """Import `scripts/<name>.py` as a module (scripts/ is not a package)."""
    path = ROOT / "scripts" / f"{name}.py"
    module_spec = importlib.util.spec_from_file_location(f"_docs_script_{name}", path)
    assert module_spec is not None and module_spec.loader is not None, path
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # dataclasses look their module up by name
    module_spec.loader.exec_module(module)
    return module


_FENCE_RE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """`(info string, body)` of every fenced code block in Markdown `text`, in order."""
    return [(m.group(1).strip(), m.group(2)) for m in _FENCE_RE.finditer(text)]
