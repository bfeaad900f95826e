"""Nothing outlives its owner: a watchdog ends what a process started once that process has
exited, however it exited (a kill -9 included).

`watch()` starts, once per process, a small watchdog: a separate Python process in a session of
its own (so Ctrl-C in the terminal does not reach it), standard library only, printing nothing.
It waits for the process that started it, the owner, to exit (a pidfd says when).

A process whose parent died is adopted by init, so the owner's processes must be known before
it dies. Three ways find them: the watchdog records the owner's descendants every `SCAN_S`
seconds; a process the owner starts after `watch()` carries the owner's mark (`AGENTRL_OWNER`)
in its environment; a process the owner forks inherits the write end of the watchdog's pipe,
and reports its pid through it at once. Once the owner has exited, the watchdog

1. removes the Docker containers the owner named with `watch_containers`,
2. finds what is left: every recorded process still running, every marked process, every
   process holding the pipe (a fork too recent to have reported itself), and all below them;
   it sends SIGTERM to those whose parent is not among them, and to any whose parent ends
   meanwhile, so that a process can end its own children in order,
3. sends SIGKILL to those left after `TERM_GRACE_S` (multiprocessing's resource trackers get
   `TRACKER_GRACE_S` more to unlink the shared memory they track, then SIGKILL too),

and exits. So vLLM's engine core and workers, env worker pools, a private Ray instance and
sandbox containers end within about 5 s of their owner (vLLM's own orderly shutdown takes 8 s
or more when its owner is gone, so it is cut short). Other watchdogs are spared: a nested
owner's watchdog cleans up after its own owner.

Linux only (it reads /proc); elsewhere `watch()` does nothing.
"""

from __future__ import annotations

import os
import selectors
import signal
import sys
import threading
import time
from typing import Any

OWNER_ENV = "AGENTRL_OWNER"
"""Set in the owner's environment: every process it starts afterwards carries the mark."""
WATCHDOG_ENV = "AGENTRL_WATCHDOG"
"""Set in each watchdog's environment, so that no watchdog ends another."""
SCAN_S = 0.5
"""Seconds between two records of the owner's descendants."""
TERM_GRACE_S = 3.0
"""Seconds from SIGTERM to SIGKILL for the processes left behind."""
TRACKER_GRACE_S = 2.0
"""Seconds more for multiprocessing's resource trackers, which unlink shared memory on exit."""


class _Link:
    """The owner's end: the watchdog's pid and the pipe it reads messages from."""

    def __init__(self, owner: int, pid: int, write_fd: int) -> None:
        self.owner = owner
        self.pid = pid
        self.write_fd = write_fd
        self.labels: set[str] = set()
        """The container labels already sent."""


_link: _Link | None = None
_lock = threading.Lock()
_fork_hook_installed = False


def watch() -> None:
    """Start this process's watchdog, unless it runs already (a forked child starts its own)."""
    global _link, _fork_hook_installed
    if not sys.platform.startswith("linux"):
        return
    with _lock:
        if _link is not None and _link.owner == os.getpid():
            return
        token = f"{os.getpid()}-{os.urandom(6).hex()}"
        env = {k: v for k, v in os.environ.items() if k != OWNER_ENV}
        env[WATCHDOG_ENV] = "1"
        read_fd, write_fd = os.pipe()
        try:
            pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", os.path.abspath(__file__), str(os.getpid()), token],
                env,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, read_fd, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_DUP2, 1, 2),
                ],
                setsid=True,
            )
        except Exception:  # no watchdog here (a safety net only): run without it
            os.close(write_fd)
            return
        finally:
            os.close(read_fd)
        os.set_blocking(write_fd, False)  # never wait on the watchdog
        os.environ[OWNER_ENV] = token
        _link = _Link(os.getpid(), pid, write_fd)
        if not _fork_hook_installed:
            os.register_at_fork(after_in_child=_report_fork)
            _fork_hook_installed = True


def watch_containers(label: str) -> None:
    """Also remove the Docker containers labelled `label` (`key=value`) once this process ends."""
    watch()
    link = _link
    if link is not None and link.owner == os.getpid() and label not in link.labels:
        link.labels.add(label)
        _send(link, f"containers {label}\n")


def watchdog_pid() -> int | None:
    """The pid of this process's watchdog, or None when it has none."""
    link = _link
    return link.pid if link is not None and link.owner == os.getpid() else None


def _report_fork() -> None:
    """In a forked child: tell the owner's watchdog about this process before it does anything."""
    link = _link
    if link is not None:
        _send(link, f"pid {os.getpid()}\n")


def _send(link: _Link, message: str) -> None:
    try:
        os.write(link.write_fd, message.encode())  # one short write: atomic on a pipe
    except OSError:  # the watchdog is gone (or far behind): nothing to do about it here
        pass


# -- the watchdog process ----------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of `pid`, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0].decode(), int(fields[1]), int(fields[19])


def start_time(pid: int) -> int | None:
    """When `pid` started (clock ticks after boot), or None when it is not running."""
    stat = _stat(pid)
    return stat[2] if stat is not None and stat[0] not in "ZXx" else None


def running(pid: int, start: int) -> bool:
    """Whether the process `pid` that started at `start` still runs (a zombie does not)."""
    return start_time(pid) == start


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _children(pid: int) -> list[int] | None:
    """Children of `pid` from /proc (None where the kernel does not list children)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    children = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                children += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None
        except OSError:
            continue
    return children


def _holds(pid: int, target: str) -> bool:
    """Whether `pid` has a file descriptor open on `target` (as /proc shows it, `pipe:[N]`)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                return True
        except OSError:
            continue
    return False


def descendants(roots: list[int]) -> dict[int, int]:
    """Every process below `roots`, with its start time."""
    found: dict[int, int] = {}
    by_parent: dict[int, list[int]] | None = None
    todo = list(roots)
    while todo:
        pid = todo.pop()
        children = _children(pid) if by_parent is None else by_parent.get(pid, [])
        if children is None:  # no children lists: one scan of every process's parent
            by_parent = {}
            for other in _all_pids():
                stat = _stat(other)
                if stat is not None:
                    by_parent.setdefault(stat[1], []).append(other)
            children = by_parent.get(pid, [])
        for child in children:
            stat = _stat(child)
            if child not in found and stat is not None:
                found[child] = stat[2]
                todo.append(child)
    return found


class _Watchdog:
    """Runs in the watchdog process: waits for the owner, then ends what it left behind."""

    def __init__(self, owner: int, token: str) -> None:
        self.owner = owner
        self.mark = f"\0{OWNER_ENV}={token}\0".encode()
        stat = _stat(owner)
        self.owner_start = stat[2] if stat is not None else None
        self.known: dict[int, int] = {}
        """The owner's descendants seen so far, with their start times."""
        self.labels: set[str] = set()
        self.pipe = os.readlink("/proc/self/fd/0")
        """Our stdin, `pipe:[inode]`: the owner and every process it forked hold its other end."""
        self._pending = b""

    def owner_running(self) -> bool:
        return self.owner_start is not None and running(self.owner, self.owner_start)

    def wait_for_owner(self) -> None:
        os.set_blocking(0, False)
        selector = selectors.DefaultSelector()
        selector.register(0, selectors.EVENT_READ)
        try:  # readable once the owner exits
            selector.register(os.pidfd_open(self.owner), selectors.EVENT_READ)
        except (AttributeError, OSError):
            pass  # an old kernel: the scans below notice the exit
        while self.owner_running():
            self.record()
            for key, _ in selector.select(SCAN_S):
                if key.fd == 0 and not self.read_messages():
                    selector.unregister(0)
        self.read_messages()  # what the owner and its forks said last

    def record(self) -> None:
        """Add the owner's descendants running now; forget those that ended."""
        self.known = {pid: s for pid, s in self.known.items() if running(pid, s)}
        for pid, start in descendants([self.owner]).items():
            self.known.setdefault(pid, start)

    def read_messages(self) -> bool:
        """Read the owner's messages; False once the pipe has no writer left."""
        while True:
            try:
                data = os.read(0, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            *lines, self._pending = (self._pending + data).split(b"\n")
            for line in lines:
                kind, _, value = line.decode(errors="replace").partition(" ")
                if kind == "pid" and value.isdigit():
                    stat = _stat(int(value))
                    if stat is not None:
                        self.known.setdefault(int(value), stat[2])
                elif kind == "containers" and value:
                    self.labels.add(value)

    def left_behind(self) -> dict[int, int]:
        """Processes to end now: the recorded ones, the marked ones, those holding the owner's
        end of our pipe (its forks, even one too recent to have said so), and all below them."""
        self.read_messages()
        found = {pid: s for pid, s in self.known.items() if running(pid, s)}
        for pid in _all_pids():
            if pid in found or pid == os.getpid():
                continue
            marked = self.mark in b"\0" + _read(f"/proc/{pid}/environ") + b"\0"
            if marked or _holds(pid, self.pipe):
                stat = _stat(pid)
                if stat is not None:
                    found[pid] = stat[2]
        return self.below(found)

    def below(self, found: dict[int, int]) -> dict[int, int]:
        """`found` and every process below it, but no watchdog, and only those running."""
        everything = {**found, **descendants(list(found))}
        spared = {os.getpid(), 1, self.owner}
        watchdog = f"\0{WATCHDOG_ENV}=1\0".encode()
        return {
            pid: start
            for pid, start in everything.items()
            if pid not in spared
            and running(pid, start)
            and watchdog not in b"\0" + _read(f"/proc/{pid}/environ")
        }

    def end_processes(self) -> None:
        """SIGTERM to each process left behind whose parent is gone, so that it can end its own
        children in order (Ray's raylet its workers), and to each process whose parent ends
        meanwhile; SIGKILL to what is left after `TERM_GRACE_S`."""
        found = self.left_behind()  # one scan of every process; then only their descendants
        signalled: set[int] = set()
        deadline = time.monotonic() + TERM_GRACE_S
        while found and time.monotonic() < deadline:
            for pid, start in found.items():
                stat = _stat(pid)
                orphan = stat is not None and stat[1] not in found
                if pid not in signalled and orphan and running(pid, start):
                    signalled.add(pid)
                    _signal(pid, signal.SIGTERM)
            time.sleep(0.1)
            found = self.below({pid: s for pid, s in found.items() if running(pid, s)})
        if not found:
            return
        survivors = self.below({**found, **self.left_behind()})
        trackers = {
            pid for pid in survivors if b"resource_tracker" in _read(f"/proc/{pid}/cmdline")
        }
        for pid in survivors.keys() - trackers:
            _signal(pid, signal.SIGKILL)
        deadline = time.monotonic() + TRACKER_GRACE_S
        while any(running(p, survivors[p]) for p in trackers) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in trackers:
            if running(pid, survivors[pid]):
                _signal(pid, signal.SIGKILL)

    def remove_containers(self) -> None:
        try:
            from concurrent.futures import ThreadPoolExecutor

            import docker

            api = docker.from_env(timeout=30).api
            ids = {
                c["Id"]
                for label in self.labels
                for c in api.containers(all=True, filters={"label": label})
            }
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(lambda cid: _quietly(api.remove_container, cid, force=True), ids))
        except Exception:
            pass  # the next sandbox's start removes them (agentrl.sandbox.docker.reap_leftovers)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _quietly(fn: Any, *args: Any, **kwargs: Any) -> None:
    try:
        fn(*args, **kwargs)
    except Exception:
        pass


def _serve(owner: int, token: str) -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    dog = _Watchdog(owner, token)
    dog.wait_for_owner()
    remover = threading.Thread(target=dog.remove_containers) if dog.labels else None
    if remover is not None:
        remover.start()
    dog.end_processes()
    if remover is not None:
        remover.join(timeout=60)


if __name__ == "__main__":
    _serve(int(sys.argv[1]), sys.argv[2])
