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


def test_the_benchmark_reports_a_small_run(require_docker: None) -> None:
    argv = [sys.executable, str(SCRIPT), "--steps", "2", "--episodes", "8", "--pool", "2"]
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "8 episodes at once (2 groups of 4), 2 warm containers, 2 steps" in text
    for label in ("idle, 8 callers at once", "idle, one caller", "during training"):
        assert label in text
    assert "env_error rate: 0.0000" in text
    assert "sandbox containers left after the run: 0" in text
