"""Every command on small broken envs (tests/broken_envs.py), run as a user would: the exit
code, no Python traceback, the line that names the fault, the time it took, and no process
left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def agentrl(*args: str, stdin: str = "", timeout: float = 300) -> tuple[int, str, float]:
    """Run `agentrl ARGS` in a session of its own; its exit code, stderr + stdout, seconds.
    Asserts that no process of that session is left once it has exited."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "COLUMNS": "120",
    }
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrl.cli", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    out, _ = proc.communicate(stdin, timeout=timeout)
    took = time.monotonic() - start
    assert not _session_processes(proc.pid), f"left running: {_session_processes(proc.pid)}"
    return proc.returncode, out, took


def _flat(out: str) -> str:
    """`out` with table borders and line breaks gone (rich wraps long cells)."""
    return " ".join(out.replace("│", " ").split())


def _session_processes(sid: int) -> list[str]:
    """Processes of session `sid` (the watchdog has a session of its own, and ends within
    seconds of its owner: it is left out)."""
    time.sleep(0.2)
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat[3]) == sid and stat[0] not in "ZX":
            found.append(f"{pid} {cmd}")
    return found


def test_envs_check_reports_a_hang_as_a_failing_row_in_bounded_time() -> None:
    code, out, took = agentrl("envs", "check", "broken_envs:HangsInStep", "--timeout", "1")
    assert code == 1, out
    assert "Traceback (most recent call last)" not in out
    assert "step() in the episode with seed 0 did not return within 1 s" in _flat(out)
    assert "agentrl play broken_envs:HangsInStep --seed 0" in _flat(out)
    assert took < 30, took


def test_envs_check_shows_the_traceback_it_refers_to() -> None:
    code, out, _ = agentrl("envs", "check", "broken_envs:ResetRaises")
    assert code == 1, out
    assert "raised ValueError: no room for seed 1" in out and "see the traceback below" in out
    assert "Traceback (the env's frames):" in out and "broken_envs.py" in out
    assert 'raise ValueError(f"no room for seed {seed}")' in out
    assert "Traceback (most recent call last)" not in out


def test_play_bounds_a_hung_step_and_shows_a_raising_reset() -> None:
    code, out, took = agentrl(
        "play", "broken_envs:HangsInStep", "--seed", "5", "--timeout", "1", stdin="7\n"
    )
    assert code == 1 and took < 20, (code, took, out)
    assert "error: step() in the episode with seed 5 did not return within 1 s" in out
    code, out, _ = agentrl("play", "broken_envs:ResetRaises", "--seed", "3")
    assert code == 1, out
    assert out.rstrip().endswith("error: the env raised ValueError: no room for seed 3")
    assert "Traceback (most recent call last)" not in out


_TINY = (
    "--model", "tiny", "--set", "trainer.num_groups=4", "--set", "rollout.group_size=2",
    "--set", "rollout.sampling.max_new_tokens=8", "--set", "logging.progress=false",
    "--set", "rollout.env_step_timeout_s=2",
)  # fmt: skip


def test_train_with_a_hanging_step_says_so_each_step_and_exits_after_done(tmp_path) -> None:
    run = tmp_path / "run"
    code, out, took = agentrl(
        "train", "--env", "broken_envs:HangsInStep", "--run-dir", str(run), "--steps", "2", *_TINY
    )
    assert code == 0, out
    assert "Traceback" not in out
    assert (
        "step 1: 2 of 8 episodes env_error; first: env step (seed 500000) timed out after 2 s; "
        "its worker process was replaced; reproduce: agentrl play broken_envs:HangsInStep "
        "--seed 500000"
    ) in out
    done = out.index("INFO done:")
    assert "step 2: 2 of 8 episodes env_error" in out[:done]
    assert took < 240, took  # the process exits after `done:` (no thread joins a hung call)


def test_train_stops_when_most_episodes_fail_several_steps_in_a_row(tmp_path) -> None:
    run = tmp_path / "run"
    code, out, _ = agentrl(
        "train", "--env", "broken_envs:ResetRaisesMostly", "--run-dir", str(run),
        "--steps", "5", *_TINY, "--set", "trainer.max_env_error_steps=2",
        "--set", "checkpoint.every=0",
    )  # fmt: skip
    assert code == 1, out
    assert "Traceback" not in out
    error = out[out.index("error:") :].splitlines()
    assert error[0] == (
        "error: most episodes ended env_error in 2 steps in a row "
        "(trainer.max_env_error_steps=2), so the run stopped; last: 6 of 8 episodes env_error; "
        "first: env reset (seed 500005) failed: ValueError: no room for seed 500005; "
        "reproduce: agentrl play broken_envs:ResetRaisesMostly --seed 500005"
    )
    assert error[1:] == [
        "  check the env with: agentrl envs check broken_envs:ResetRaisesMostly",
        f"  then resume with: agentrl train --resume {run}",
    ]
    assert (run / "checkpoints" / "step-000002").is_dir()  # saved before stopping


def test_rollout_and_eval_count_their_env_errors(tmp_path) -> None:
    code, out, took = agentrl(
        "rollout", "--env", "broken_envs:HangsInStep", "--model", "tiny", "--out",
        str(tmp_path / "r"), "--episodes", "6", "--max-new-tokens", "8",
        "--env-step-timeout", "1", "--no-progress",
    )  # fmt: skip
    assert code == 0 and "Traceback" not in out, out
    assert "warning: 2 of 6 episodes env_error; first: env step (seed 0) timed out after 1 s" in (
        " ".join(out.split())
    )
    code, out, _ = agentrl(
        "eval", "--env", "broken_envs:ResetRaises", "--model", "tiny", "--episodes", "4",
        "--max-new-tokens", "8",
    )  # fmt: skip
    assert code == 0 and "Traceback" not in out, out
    assert "; 2 errors (first at seed 1000001: agentrl play broken_envs:ResetRaises " in out


def test_with_thread_workers_a_hung_call_does_not_keep_the_command_alive(tmp_path) -> None:
    code, out, took = agentrl(
        "rollout", "--env", "broken_envs:HangsInStep", "--model", "tiny", "--out",
        str(tmp_path / "r"), "--episodes", "2", "--max-new-tokens", "8",
        "--env-step-timeout", "1", "--no-progress", "--env-executor", "thread",
    )  # fmt: skip
    assert code == 0 and "Traceback" not in out, out
    assert "1 of 2 episodes env_error" in " ".join(out.split())
    assert took < 120, took
