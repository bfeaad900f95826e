"""Executes docs/guide/python-api.md: its Python blocks, in order, as one script in a fresh
folder, with this checkout's agentrl (the `tiny` model, a step or two: about a minute)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _docs_helpers import DOCS, ROOT, block_language, fenced_blocks, venv_env

GUIDE = DOCS / "guide" / "python-api.md"


def _script() -> str:
    blocks = [
        body for info, body in fenced_blocks(GUIDE.read_text()) if block_language(info) == "python"
    ]
    return "\n".join(blocks)


def test_the_guide_has_its_sections() -> None:
    script = _script()
    for call in ("agentrl.load_config(", "agentrl.train(", "agentrl.evaluate(", "resume=True"):
        assert call in script, f"{GUIDE.name} no longer calls {call}"


@pytest.mark.slow
def test_the_guide_runs_as_written(tmp_path: Path) -> None:
    (tmp_path / "guide.py").write_text(_script())
    proc = subprocess.run(
        [sys.executable, "guide.py"],
        cwd=tmp_path,
        env=venv_env([str(ROOT)]),
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{GUIDE.name} failed:\n{output[-4000:]}"
    lines = proc.stdout.splitlines()
    assert lines[0] == "grpo 2 4", lines
    assert "runs/guess-number 2 " in proc.stdout
    assert "settings: env guess-number()" in proc.stdout
    assert "did you mean trainer.num_steps?" in proc.stdout
    for run, steps in (("guess-number", 2), ("echo-number", 1)):
        config = (tmp_path / "runs" / run / "config.yaml").read_text()
        last = (tmp_path / "runs" / run / "metrics.jsonl").read_text().splitlines()[-1]
        assert json.loads(last)["step"] == steps
    assert "name: EchoNumber" in (tmp_path / "runs" / "echo-number" / "config.yaml").read_text()
    assert "name: reinforce-mean" in config
