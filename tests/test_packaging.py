"""pyproject.toml asks only for extras its dependencies declare, spelled as they declare them
(pip before 23.3 does not normalise extra names and warns "does not provide the extra")."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _requirements() -> list[Requirement]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    groups = [project["dependencies"], *project["optional-dependencies"].values()]
    return [Requirement(line) for group in groups for line in group]


def test_requested_extras_exist_as_spelled() -> None:
    checked = []
    for req in _requirements():
        if not req.extras:
            continue
        try:
            provided = set(metadata.metadata(req.name).get_all("Provides-Extra") or [])
        except metadata.PackageNotFoundError:
            continue  # an optional group not installed here (vllm-gpu on a CPU machine)
        assert req.extras <= provided, f"{req}: {req.name} provides extras {sorted(provided)}"
        checked.append(req.name)
    assert "ray" in checked  # the installed groups were checked


def test_math_group_pins_math_verify_and_its_antlr_runtime() -> None:
    math = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["math"]
    pins = {Requirement(line).name: str(Requirement(line).specifier) for line in math}
    assert pins == {"math-verify": "==0.9.0", "antlr4-python3-runtime": "==4.13.2"}
    assert metadata.version("antlr4-python3-runtime") == "4.13.2"
