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


def block_title(info: str) -> str | None:
    """The `title="path"` attribute of a fence's info string, or None."""
    m = re.search(r'title="([^"]+)"', info)
    return m.group(1) if m else None


def block_language(info: str) -> str:
    """The first word of a fence's info string (`python`, `bash`, `text`...)."""
    return info.split()[0] if info.split() else ""


_BOX_ONLY_RE = re.compile(r"^[\s━─┏┓┗┛┳┻╇╋┡┩┃│┣┫┠┨═╭╮╰╯┬┴┼├┤└┘┌┐]*$")


def normalize(text: str) -> str:
    """Collapse whitespace runs, so table padding and wrapping do not matter."""
    return " ".join(text.split())


def missing_output_lines(expected: str, actual: str) -> list[str]:
    """Lines of a documented output block that do not occur in the actual output.

    Whitespace is collapsed and lines made only of table borders are skipped, so the check
    holds across terminal widths but still catches changed words and numbers."""
    actual_norm = normalize(actual)
    return [
        line
        for line in expected.splitlines()
        if line.strip() and not _BOX_ONLY_RE.match(line) and normalize(line) not in actual_norm
    ]


def venv_env(extra_path: list[str] | None = None) -> dict[str, str]:
    """Environment for running documented shell commands: the venv's `agentrl` first on
    PATH, one thread per process, the tutorial folders on PYTHONPATH."""
    import os

    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["OMP_NUM_THREADS"] = "1"
    env["COLUMNS"] = "100"
    env["NO_COLOR"] = "1"
    env["TERM"] = "dumb"
    env.pop("PYTHONPATH", None)
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join(extra_path)
    return env
