"""benchmarks/sandbox_under_training.py runs end to end on a small run and reports a clean
one: every line it promises, no `env_error`, no container left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sandbox_under_training.py"


def test_busy_share_counts_overlapping_calls_once(load_benchmark) -> None:
    share = load_benchmark("sandbox_under_training").busy_share
    calls = [{"start": 0, "end": 2}, {"start": 1, "end": 3}, {"start": 5, "end": 6}]
    assert share(calls, 0, 10) == pytest.approx(0.4)
    assert share(calls, 2, 6) == pytest.approx(0.5)


def _bench(*args: str) -> str:
    """The benchmark's output with `args` (one torch thread); fails on a non-zero exit."""
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_the_benchmark_reports_a_small_run(require_docker: None) -> None:
    text = _bench("--steps", "2", "--episodes", "8", "--pool", "2")
    assert "8 episodes at once (2 groups of 4), 2 warm containers, 2 steps" in text
    for label in ("idle, 8 callers at once", "idle, one caller", "during training"):
        assert label in text
    assert "env_error rate: 0.0000" in text
    assert "sandbox containers left after the run: 0" in text


def test_the_benchmark_runs_a_tool_python_recipe(require_docker: None, tmp_path: Path) -> None:
    """`--config`: the recipe's own RL on tool-python, every python call timed (the `tiny`
    model here, which rarely writes a call: the plumbing, not the numbers)."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "model: {name: tiny}\n"
        "env: {name: tool-python, kwargs: {max_turns: 2, sandbox_config: {pool_size: 2}}}\n"
        "rollout: {group_size: 2, sampling: {max_new_tokens: 8}}\n"
        "trainer: {num_groups: 2}\n"
    )
    text = _bench("--config", str(recipe), "--model", "tiny", "--steps", "1")
    assert f"4 episodes at once, 2 warm containers, 1 steps of {recipe} from tiny (hf" in text
    assert "idle, 4 callers at once" in text and "during training" in text
    assert "tool calls: in " in text and "env_error rate: 0.0000" in text
    assert "sandbox containers left after the run: 0" in text
