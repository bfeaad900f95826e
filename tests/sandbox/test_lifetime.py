"""Nothing outlives its owner (issue 45): `agentrl sandbox check`, `rollout`, `eval` and `train`
leave no labelled sandbox container and no process behind, however they end: a normal exit,
Ctrl-C (SIGINT to the process group, as a terminal sends it), SIGTERM, or kill -9 (then the
command's watchdog, `agentrl._watchdog`, ends what is left within 15 s).

Each test runs one command four times at once and ends each run one way.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentrl._watchdog import descendants, running

pytestmark = pytest.mark.docker

HERE = Path(__file__).parent
WAYS = ("exit", "SIGINT", "SIGTERM", "SIGKILL")
DEADLINE_S = 15.0
"""After a kill -9: seconds until the run's containers and processes must be gone."""


class _Run:
    """One run of a command, ended one way; what it left behind, measured after its end."""

    def __init__(self, how: str, argv: list[str], cwd: Path) -> None:
        self.how = how
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentrl.cli", *argv],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            start_new_session=True,  # its own process group, as a shell job has
        )
        self.children: dict[int, int] = {}
        self.ended = 0.0
        self.left_at_end: list[str] = []
        self.gone_after: float | None = None

    def pids(self) -> set[int]:
        return {self.proc.pid, *self.children, *descendants([self.proc.pid])}

    def note_children(self) -> None:
        self.children.update(descendants([self.proc.pid]))

    def end(self) -> None:
        self.note_children()
        if self.how == "SIGINT":  # Ctrl-C: the terminal signals the whole foreground group
            os.killpg(self.proc.pid, signal.SIGINT)
        elif self.how != "exit":
            self.proc.send_signal(getattr(signal, self.how))


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "OMP_NUM_THREADS": "1",
    }


def _containers(client: Any, pids: set[int]) -> list[str]:
    """Sandbox containers (running or not) whose owner is one of `pids` on this host."""
    host = socket.gethostname()
    owners = {f"{host}:{pid}" for pid in pids}
    return [
        c["Id"][:12]
        for c in client.api.containers(all=True, filters={"label": "agentrl.sandbox=1"})
        if (c.get("Labels") or {}).get("agentrl.sandbox.owner") in owners
    ]


def _end_four_ways(
    client: Any,
    cwd: Path,
    argv: Callable[[str], list[str]],
    ready: Callable[[_Run], bool] = lambda run: True,
) -> dict[str, _Run]:
    """Start `argv(how)` for each way; end each once it holds a container and `ready(run)`;
    measure how long its containers and processes outlive it."""
    runs = {how: _Run(how, argv(how), cwd) for how in WAYS}
    try:
        deadline = time.monotonic() + 300
        waiting = {how for how in WAYS if how != "exit"}
        while waiting:
            for run in runs.values():
                if run.proc.poll() is None:
                    run.note_children()
            for how in sorted(waiting):
                run = runs[how]
                assert run.proc.poll() is None, f"{how}: ended early:\n{run.proc.stderr.read()}"
                if _containers(client, run.pids()) and ready(run):
                    run.end()
                    waiting.discard(how)
            assert time.monotonic() < deadline, f"no container after 300 s: {waiting}"
            time.sleep(0.1)
        pending = set(WAYS)
        while pending:
            for how in sorted(pending):
                run = runs[how]
                if run.proc.poll() is None:  # the exit run, still at work
                    run.note_children()
                elif run.ended == 0.0:
                    run.ended = time.monotonic()
                    run.left_at_end = _containers(client, run.pids())
                if run.ended:
                    alive = [p for p, s in run.children.items() if running(p, s)]
                    if not alive and not _containers(client, run.pids()):
                        run.gone_after = time.monotonic() - run.ended
                        pending.discard(how)
                    elif time.monotonic() > run.ended + DEADLINE_S:
                        pending.discard(how)
            assert time.monotonic() < deadline + 300, f"still running: {pending}"
            time.sleep(0.1)
    finally:
        for run in runs.values():
            if run.proc.poll() is None:
                run.proc.kill()
            run.proc.wait()
    return runs


def _check(runs: dict[str, _Run]) -> None:
    for how, run in runs.items():
        gone = "never" if run.gone_after is None else f"{run.gone_after:.1f} s"
        print(
            f"{how}: exit code {run.proc.returncode}, {len(run.children)} child processes, "
            f"containers at its end {run.left_at_end}, all gone after {gone}"
        )
    for how, run in runs.items():
        err = run.proc.stderr.read() if run.proc.stderr else ""
        assert run.gone_after is not None, f"{how}: left behind for {DEADLINE_S} s\n{err[-2000:]}"
        if how != "SIGKILL":  # the command itself removed its containers
            assert run.left_at_end == [], (how, run.left_at_end, err[-2000:])
    assert runs["exit"].proc.returncode == 0


def test_sandbox_check(require_docker: None, tmp_path: Path) -> None:
    from agentrl.sandbox.docker import connect

    runs = _end_four_ways(connect(), tmp_path, lambda how: ["sandbox", "check"])
    _check(runs)


@pytest.mark.slow
def test_rollout_with_env_worker_processes(require_docker: None, tmp_path: Path) -> None:
    """Envs in worker processes: the containers belong to the workers, not to the command."""
    from agentrl.sandbox.docker import connect

    def argv(how: str) -> list[str]:
        episodes = "2" if how == "exit" else "1000"
        return [
            "rollout",
            *("--env", "sandbox_envs:SandboxTurns", "--model", "tiny"),
            *("--out", str(tmp_path / how), "--episodes", episodes, "--max-new-tokens", "8"),
            *("--env-executor", "process"),
        ]

    _check(_end_four_ways(connect(), tmp_path, argv))


@pytest.mark.slow
def test_eval(require_docker: None, tmp_path: Path) -> None:
    from agentrl.sandbox.docker import connect

    def argv(how: str) -> list[str]:
        episodes = "2" if how == "exit" else "1000"
        return [
            "eval",
            *("--env", "sandbox_envs:SandboxTurns", "--model", "tiny"),
            *("--episodes", episodes, "--max-new-tokens", "8"),
        ]

    _check(_end_four_ways(connect(), tmp_path, argv))


@pytest.mark.slow
def test_train_then_resume_after_kill9(require_docker: None, tmp_path: Path) -> None:
    """The kill -9 comes after the first checkpoint; `--resume` then finishes the run and
    leaves nothing either."""
    from agentrl.sandbox.docker import connect

    client = connect()

    def argv(how: str) -> list[str]:
        return [
            "train",
            *("--env", "sandbox_envs:SandboxTurns", "--model", "tiny"),
            *("--steps", "1" if how == "exit" else "1000", "--run-dir", str(tmp_path / how)),
            *("--set", "checkpoint.every=1", "--set", "rollout.sampling.max_new_tokens=8"),
            *("--set", "logging.progress=false"),
        ]

    def ready(run: _Run) -> bool:
        return run.how != "SIGKILL" or (tmp_path / "SIGKILL/checkpoints/step-000001").is_dir()

    _check(_end_four_ways(client, tmp_path, argv, ready))
    resumed = _Run(
        "exit", ["train", "--resume", str(tmp_path / "SIGKILL"), "--steps", "2"], tmp_path
    )
    _, err = resumed.proc.communicate(timeout=600)
    assert resumed.proc.returncode == 0, err[-3000:]
    assert "resume: RL continues at step" in err
    assert _containers(client, {resumed.proc.pid}) == []
