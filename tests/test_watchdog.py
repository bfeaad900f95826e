"""The watchdog (`agentrl._watchdog`): however a process ends, what it started ends within
15 s: forked and spawned children, grandchildren, a child in its own session, one that ignores
SIGTERM (ended with SIGKILL after 8 s), one forked just before the end. Unrelated processes
live on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from agentrl._watchdog import running, start_time

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the watchdog reads /proc")

DEADLINE_S = 15.0

_OWNER = """
import json, multiprocessing as mp, os, signal, subprocess, sys, time
from agentrl._watchdog import watch, watchdog_pid

def parent_of_one(conn):
    grandchild = os.fork()
    if grandchild == 0:
        time.sleep(600)
        os._exit(0)
    conn.send(grandchild)
    time.sleep(600)

if __name__ == "__main__":
    watch()
    ours, theirs = mp.Pipe()
    forked = mp.get_context("fork").Process(target=parent_of_one, args=(theirs,), daemon=True)
    spawned = mp.get_context("spawn").Process(target=time.sleep, args=(600,), daemon=True)
    forked.start()
    spawned.start()
    own_session = subprocess.Popen(["sleep", "600"], start_new_session=True)
    ignore = "signal.SIG_IGN" if sys.argv[1] == "SIGKILL" else "signal.SIG_DFL"
    stubborn = subprocess.Popen(  # with SIGKILL: one that ignores SIGTERM
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
         f"{ignore}); print('ready', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE,
    )
    stubborn.stdout.readline()
    late = os.fork()  # the watchdog has had no time to see this one in a scan
    if late == 0:
        time.sleep(600)
        os._exit(0)
    pids = [forked.pid, ours.recv(), spawned.pid, own_session.pid, stubborn.pid, late]
    print(json.dumps({"pids": pids, "watchdog": watchdog_pid()}), flush=True)
    sys.stdin.readline()  # the test has seen them all
    if sys.argv[1] == "exit":
        sys.exit(0)
    if sys.argv[1] == "kill9-now":
        last = os.fork()  # and no scan between this fork and the end
        if last == 0:
            print(json.dumps({"last": os.getpid()}), flush=True)
            time.sleep(600)
            os._exit(0)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)
"""


def _wait_gone(procs: dict[int, int | None], timeout: float) -> dict[int, int | None]:
    """Wait until none of `procs` (pid -> start time) runs; return those still running."""
    end = time.monotonic() + timeout
    while True:
        left = {p: s for p, s in procs.items() if s is not None and running(p, s)}
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.1)


def _start_owner(how: str) -> tuple[subprocess.Popen[str], dict[int, int | None], int]:
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert owner.stdout is not None
    line = owner.stdout.readline()
    assert line, owner.communicate(timeout=30)[1]
    info = json.loads(line)
    started = {pid: start_time(pid) for pid in info["pids"]}
    assert all(started.values()), started
    return owner, started, info["watchdog"]


@pytest.mark.parametrize("how", ["exit", "SIGINT", "SIGTERM", "SIGKILL", "kill9-now"])
def test_everything_a_process_started_ends_with_it(how: str) -> None:
    bystander = subprocess.Popen(["sleep", "600"])  # not the owner's: must live on
    try:
        owner, children, watchdog = _start_owner(how)
        assert owner.stdin is not None and owner.stdout is not None
        owner.stdin.write("go\n")
        owner.stdin.flush()
        if how.startswith("SIG"):
            owner.send_signal(getattr(signal, how))
        owner.wait(timeout=30)
        if how == "kill9-now":  # forked right before the kill -9
            last = json.loads(owner.stdout.readline())["last"]
            children[last] = start_time(last)
        ended = time.monotonic()
        left = _wait_gone({**children, watchdog: start_time(watchdog)}, DEADLINE_S)
        seconds = time.monotonic() - ended
        print(f"{how}: {len(children)} processes and the watchdog gone {seconds:.1f} s after")
        assert not left, f"still running {DEADLINE_S:.0f} s after the owner ended: {left}"
        assert bystander.poll() is None
        if how in ("SIGKILL", "kill9-now"):  # the owner printed nothing, nor did the watchdog
            assert owner.stderr is not None and owner.stderr.read() == ""
    finally:
        bystander.kill()
        bystander.wait()


def test_watch_is_idempotent_and_marks_what_it_starts() -> None:
    code = (
        "import os, subprocess, sys\n"
        "from agentrl._watchdog import OWNER_ENV, watch, watchdog_pid\n"
        "watch(); first = watchdog_pid(); watch()\n"
        "assert watchdog_pid() == first, (first, watchdog_pid())\n"
        "mark = subprocess.run([sys.executable, '-c', 'import os; print(os.environ[%r])' "
        "% OWNER_ENV], capture_output=True, text=True).stdout.strip()\n"
        "print(mark == os.environ[OWNER_ENV] and mark.startswith(str(os.getpid())))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
