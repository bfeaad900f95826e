"""The Docker daemon restarted in the middle of `agentrl train`: the episodes of the outage end
`env_error` (out of the loss), no step waits past `rollout.episode_timeout_s`, the run goes on
with the restarted daemon, and no container is left behind.

The test stops and restarts the machine's `dockerd` (the way `systemctl restart docker`
does: SIGTERM, then the same command line), so it runs only where that is allowed:
`AGENTRL_DOCKER_RESTARTS=1` (CI sets it; `.ci/setup_docker.sh` starts that daemon).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl._watchdog import OWNER_ENV

pytestmark = pytest.mark.docker

HERE = Path(__file__).parent
EPISODE_TIMEOUT_S = 30.0


def _dockerd() -> tuple[int, list[str]]:
    """The running dockerd's pid and command line."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and Path(argv[0].decode()).name == "dockerd":
            return int(entry.name), [a.decode() for a in argv if a]
    raise AssertionError("no dockerd process on this machine")


def _start_dockerd(argv: list[str]) -> None:
    """Start `argv` (dockerd) detached from the tests: not their child (`setsid -f` forks it
    off) and without the owner mark, so the tests' watchdog does not end it with them."""
    env = {k: v for k, v in os.environ.items() if k != OWNER_ENV}
    with open("/tmp/dockerd.log", "ab") as log:
        subprocess.run(["setsid", "-f", *argv], stdout=log, stderr=log, env=env, check=True)


def _daemon_answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


def _wait(what: str, until, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < end, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.5)


def _steps(run_dir: Path) -> list[dict]:
    """The run's metrics so far (a line being written is left for the next look)."""
    path = run_dir / "metrics.jsonl"
    steps = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            steps.append(json.loads(line))
        except ValueError:
            break
    return steps


@pytest.mark.skipif(
    os.environ.get("AGENTRL_DOCKER_RESTARTS") != "1",
    reason="restarts the machine's Docker daemon: set AGENTRL_DOCKER_RESTARTS=1 (CI does)",
)
def test_train_goes_on_through_a_docker_daemon_restart(
    require_docker: None, tmp_path: Path
) -> None:
    from agentrl.sandbox.docker import connect

    run_dir = tmp_path / "run"
    train = subprocess.Popen(
        [sys.executable, "-m", "agentrl.cli", "train"]
        + ["--env", "sandbox_envs:SandboxTurns", "--model", "tiny", "--steps", "40"]
        + ["--run-dir", str(run_dir), "--set", "logging.progress=false"]
        + ["--set", "rollout.sampling.max_new_tokens=8", "--set", "checkpoint.every=100"]
        + ["--set", f"rollout.episode_timeout_s={EPISODE_TIMEOUT_S}"]
        # steps of 0.3 s: the outage spans more than the 3 failing steps that stop a run
        + ["--set", "trainer.max_env_error_steps=40"],
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "OMP_NUM_THREADS": "1",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    pid, argv = _dockerd()
    restarted = False
    try:
        _wait("two steps before the restart", lambda: len(_steps(run_dir)) >= 2, 300)
        assert train.poll() is None, train.stderr.read()[-3000:]
        os.kill(pid, signal.SIGTERM)  # it stops its containers, then exits
        _wait("dockerd's exit", lambda: not Path(f"/proc/{pid}").exists(), 60)
        down_at = len(_steps(run_dir))
        time.sleep(5)  # steps run while no daemon answers
        _start_dockerd(argv)
        restarted = True
        _wait("the restarted daemon", _daemon_answers, 120)
        _, err = train.communicate(timeout=600)
    finally:
        if train.poll() is None:
            train.kill()
            train.wait()
        if not restarted:  # never leave the machine without its daemon
            _start_dockerd(argv)
            _wait("the restarted daemon", _daemon_answers, 120)
    assert train.returncode == 0, err[-3000:]
    steps = _steps(run_dir)
    assert [m["step"] for m in steps] == list(range(1, 41))
    errors = [m.get("rollout/env_error_rate", 0.0) for m in steps]
    print(json.dumps({"down_at_step": down_at, "env_error_rate": errors}))
    assert max(errors[down_at - 1 :]) > 0, "no episode met the outage"
    assert errors[-1] == 0.0, "the sandbox did not come back"
    slowest = max(m["time/rollout"] for m in steps)
    assert slowest < EPISODE_TIMEOUT_S + 10, f"a step's rollout took {slowest:.0f} s"
    client = connect()
    owner = f"agentrl.sandbox.owner={socket.gethostname()}:{train.pid}"
    assert client.api.containers(all=True, filters={"label": owner}) == []
