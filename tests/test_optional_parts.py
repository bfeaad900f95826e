"""Tests that need Docker, bubblewrap or Chromium skip with a how-to where the part is
missing, and fail instead where CI requires it (`AGENTRL_REQUIRE_*=1`).

Each case runs pytest in a subprocess with the part made absent: PATH without `bwrap` or
`chromium`, DOCKER_HOST at a socket that does not exist.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NEEDS_EACH_PART = [
    "tests/sandbox/test_docker.py::test_leftovers_of_dead_owner_are_reaped",
    "tests/sandbox/test_local.py::test_working_bwrap_runs_code",
    "tests/trajectory/test_view.py::test_html_view_in_headless_chromium",
]
HOW_TOS = [
    "sudo systemctl start docker",
    "apt-get install -y bubblewrap",
    "apt-get install -y chromium",
]
SWITCHES = ["AGENTRL_REQUIRE_DOCKER", "AGENTRL_REQUIRE_BWRAP", "AGENTRL_REQUIRE_CHROMIUM"]


def _pytest_without_the_parts(tmp_path: Path, **switches: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"CI", *SWITCHES, "AGENTRL_CHROMIUM"}}
    env.update(PATH=str(tmp_path), DOCKER_HOST="unix:///nonexistent/docker.sock", **switches)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *NEEDS_EACH_PART],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_missing_parts_skip_with_how_to(tmp_path: Path) -> None:
    proc = _pytest_without_the_parts(tmp_path)
    assert proc.returncode == 0 and "3 skipped" in proc.stdout, proc.stdout[-3000:]
    flat = " ".join(proc.stdout.split())
    for how_to, switch in zip(HOW_TOS, SWITCHES, strict=True):
        assert how_to in flat and f"set {switch}=1 to fail instead" in flat


def test_required_parts_fail_when_missing(tmp_path: Path) -> None:
    proc = _pytest_without_the_parts(tmp_path, **dict.fromkeys(SWITCHES, "1"))
    assert proc.returncode == 1 and "3 errors" in proc.stdout, proc.stdout[-3000:]  # in setup
    flat = " ".join(proc.stdout.split())
    for part in ("Docker", "bubblewrap", "Chromium"):
        assert f"{part} is required here" in flat
