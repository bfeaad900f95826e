"""Every shipped config runs: each YAML under examples/ and each config block in the docs
resolves through `agentrl train -c FILE --print-config`, with the env defaults and presets
under it, exactly as a user's run would."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").rglob("*.yaml"))
_FENCE_RE = re.compile(r"^```yaml[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def _doc_configs() -> list[tuple[str, str]]:
    """`(where, body)` of every ```yaml block in docs/ and the README whose top-level keys are
    all config sections (a config file for `-c`)."""
    sections = set(TrainConfig.model_fields)
    found = []
    for page in sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]):
        for n, m in enumerate(_FENCE_RE.finditer(page.read_text())):
            tree = yaml.safe_load(m.group(1))
            if isinstance(tree, dict) and tree and set(tree) <= sections:
                found.append((f"{page.relative_to(ROOT)}#{n}", m.group(1)))
    return found


DOC_CONFIGS = _doc_configs()


def _print_config(path: Path) -> dict:
    result = CliRunner().invoke(app, ["train", "-c", str(path), "--print-config"])
    assert result.exit_code == 0, result.output
    return yaml.safe_load(result.output)


def test_the_shipped_configs_are_found() -> None:
    assert any(p.parent.name == "gpu" for p in EXAMPLES) and len(EXAMPLES) >= 8
    assert len(DOC_CONFIGS) >= 2  # docs/scaling.md's recipes


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_resolves_as_agentrl_train_does(path: Path) -> None:
    cfg = _print_config(path)
    written = yaml.safe_load(path.read_text())
    # the file's own algorithm is the run's, whatever the env's defaults pick
    assert cfg["algo"]["name"] == written.get("algo", {}).get("name", cfg["algo"]["name"])
    for key, value in written.get("trainer", {}).items():
        if not isinstance(value, dict):
            assert cfg["trainer"][key] == value, key


@pytest.mark.parametrize(("where", "body"), DOC_CONFIGS, ids=[w for w, _ in DOC_CONFIGS])
def test_every_config_in_the_docs_resolves_as_agentrl_train_does(
    where: str, body: str, tmp_path: Path
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(body)
    _print_config(path)
