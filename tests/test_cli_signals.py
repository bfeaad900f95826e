"""`agentrl` unwinds on SIGTERM as on Ctrl-C, so exit hooks shut engines and sandboxes down."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

_SCRIPT = """
import atexit, sys
from pathlib import Path

import pytest
from agentrl.cli import main
flag = Path(sys.argv[1])
atexit.register(lambda: flag.write_text("cleaned up"))
sys.argv = ["agentrl", "play", "sokoban"]
main()
"""


def test_sigterm_runs_exit_hooks_and_exits_143(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, str(flag)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    seen = b""
    while b"#" not in seen and proc.poll() is None and time.monotonic() < deadline:
        seen += proc.stdout.read1(4096)  # until the first grid is on screen
    assert b"#" in seen, seen.decode(errors="replace")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert flag.read_text() == "cleaned up"


def _start(*args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "agentrl.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def _wait_for_lines(path: Path, count: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if path.is_file() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} did not reach {count} lines (exit code {proc.poll()})")


_RL = (
    "train", "--env", "guess-number", "--model", "tiny", "--steps", "30",
    "--set", "trainer.num_groups=2", "--set", "rollout.group_size=2",
    "--set", "rollout.sampling.max_new_tokens=8", "--set", "logging.progress=false",
    "--set", "checkpoint.every=0",
)  # fmt: skip


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_rl_run_saves_its_last_step_and_resumes_after_it(tmp_path, sig) -> None:
    run = tmp_path / "run"
    proc = _start(*_RL, "--run-dir", str(run))
    _wait_for_lines(run / "metrics.jsonl", 2, proc)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, out
    assert "Traceback" not in out and "Aborted" not in out
    what = "stopped (SIGTERM)" if sig == signal.SIGTERM else "interrupted (Ctrl-C)"
    assert out.rstrip().splitlines()[-1] == f"{what}; resume with: agentrl train --resume {run}"
    (saved,) = sorted((run / "checkpoints").glob("step-*"))  # checkpoint.every=0: this one
    step = int(saved.name.removeprefix("step-"))
    assert step >= 2 and f"saved step {step} to {saved} before stopping" in out
    resumed = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "train", "--resume", str(run),
         "--set", f"trainer.num_steps={step + 1}"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resume: RL continues at step {step + 1} of {step + 1} from {saved}" in resumed.stderr


def test_a_stopped_warm_start_saves_its_sft_step_and_resumes_after_it(tmp_path) -> None:
    run = tmp_path / "run"
    proc = _start(
        "train", "--env", "sokoban", "--steps", "1", "--run-dir", str(run),
        "--set", "warm_start.num_episodes=256", "--set", "warm_start.batch_size=4",
        "--set", "logging.progress=false", "--set", "trainer.num_groups=2",
    )  # fmt: skip
    _wait_for_lines(run / "warm_start" / "metrics.jsonl", 3, proc)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, out
    assert "Traceback" not in out
    assert (
        out.rstrip().splitlines()[-1]
        == f"stopped (SIGTERM); resume with: agentrl train --resume {run}"
    )
    saved = [line for line in out.splitlines() if "before stopping" in line]
    assert len(saved) == 1 and "saved SFT step " in saved[0], out
    step = int(saved[0].split("saved SFT step ")[1].split()[0])
    assert step >= 3
    resumed = _start("train", "--resume", str(run))
    deadline = time.monotonic() + 120
    seen = ""
    assert resumed.stdout is not None
    while "resumed SFT from" not in seen and time.monotonic() < deadline:
        seen += resumed.stdout.readline()
    resumed.send_signal(signal.SIGTERM)
    resumed.communicate(timeout=120)
    assert f"sft_checkpoint (step {step} of " in seen.splitlines()[-1], seen


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_command_stopped_by_a_signal_prints_one_line(sig) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrl.cli", "play", "sokoban"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    seen, deadline = b"", time.monotonic() + 60
    while b"your action>" not in seen and proc.poll() is None and time.monotonic() < deadline:
        seen += proc.stdout.read1(4096)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig
    what = "stopped (SIGTERM)" if sig == signal.SIGTERM else "interrupted (Ctrl-C)"
    assert err.decode().strip() == what
