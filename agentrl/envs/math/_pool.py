"""A small persistent pool of grading processes with a hard deadline per call.

math-verify bounds its own time with `signal.alarm`, which only works in a main thread, and
sympy can hang or eat memory on hostile input (`10^{10^{10}}`). So the slow path of grading
runs in worker processes: each call waits at most `timeout_s`; a worker that misses the
deadline, dies or runs out of memory is killed and replaced, and the call reports it.
Workers are started with `spawn` (safe beside threads) and shared by every env in a process.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing as mp
import queue
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger(__name__)

_START_TIMEOUT_S = 120.0


class GradingTimeout(Exception):
    """A grading call missed its deadline; the worker was killed and replaced."""


class GradingCrash(Exception):
    """A grading worker died (out of memory, a crash); it was replaced."""


def _worker_main(conn: Connection, max_memory_bytes: int | None) -> None:
    """Worker loop: import math-verify once, then answer `(fn, args)` requests until None."""
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if max_memory_bytes:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (max_memory_bytes, max_memory_bytes))
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    from agentrl.envs.math import _verify

    _verify.warm_up()
    conn.send(("ready", None))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        try:
            conn.send(("ok", _verify.equal(*request)))
        except MemoryError:
            conn.send(("error", "MemoryError"))
        except Exception as e:  # noqa: BLE001 - a grading error is a verdict, not a crash
            conn.send(("error", f"{type(e).__name__}: {str(e)[:200]}"))


class _Worker:
    def __init__(self, ctx: Any, max_memory_bytes: int | None) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_worker_main, args=(child, max_memory_bytes), daemon=True, name="agentrl-grader"
        )
        self.process.start()
        child.close()
        self.ready = False

    def wait_ready(self) -> None:
        if self.ready:
            return
        if not self.conn.poll(_START_TIMEOUT_S):
            raise GradingCrash(f"grading worker did not start within {_START_TIMEOUT_S:.0f} s")
        status, _ = self.conn.recv()
        if status != "ready":
            raise GradingCrash(f"grading worker failed to start: {status}")
        self.ready = True

    def kill(self) -> None:
        self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class GradingPool:
    """`num_workers` processes running `agentrl.envs.math._verify.equal` with a deadline.

    Thread-safe: concurrent callers each check out a worker (waiting if all are busy).
    """

    def __init__(self, num_workers: int = 1, max_memory_mb: int | None = 4096) -> None:
        """Start the workers (they import math-verify in the background)."""
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self._ctx = mp.get_context("spawn")
        self._max_memory = max_memory_mb * 2**20 if max_memory_mb else None
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.num_workers = num_workers
        self.num_replaced = 0
        for _ in range(num_workers):
            self._idle.put(self._spawn())

    def _spawn(self) -> _Worker:
        worker = _Worker(self._ctx, self._max_memory)
        with self._lock:
            self._all.add(worker)
        return worker

    def _replace(self, worker: _Worker) -> None:
        with self._lock:
            self._all.discard(worker)
            self.num_replaced += 1
        worker.kill()
        if not self._closed:
            self._idle.put(self._spawn())

    def call(self, args: tuple[Any, ...], timeout_s: float) -> Any:
        """Run `_verify.equal(*args)` in a worker; raise `GradingTimeout` after `timeout_s`.

        The deadline counts from when a started worker receives the request; waiting for a
        free worker or for a fresh worker to finish importing does not count.
        """
        if self._closed:
            raise RuntimeError("GradingPool is closed")
        worker = self._idle.get()
        try:
            worker.wait_ready()
            worker.conn.send(args)
            deadline = time.monotonic() + timeout_s
            if not worker.conn.poll(max(deadline - time.monotonic(), 0.0)):
                self._replace(worker)
                raise GradingTimeout(f"grading took longer than {timeout_s:g} s")
            status, value = worker.conn.recv()
        except (EOFError, OSError, BrokenPipeError, GradingCrash) as e:
            self._replace(worker)
            raise GradingCrash(f"grading worker died: {type(e).__name__}: {e}") from None
        self._idle.put(worker)
        if status == "error":
            raise GradingCrash(value)
        return value

    def close(self) -> None:
        """Stop every worker."""
        self._closed = True
        with self._lock:
            workers = list(self._all)
            self._all.clear()
        for worker in workers:
            try:
                worker.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            worker.process.join(timeout=1)
            if worker.process.is_alive():
                worker.kill()


_shared: GradingPool | None = None
_shared_lock = threading.Lock()


def shared_pool(num_workers: int = 1) -> GradingPool:
    """The process-wide pool (started on first use, grown to `num_workers`, closed at exit)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared._closed:
            _shared = GradingPool(num_workers)
            atexit.register(_shared.close)
        while _shared.num_workers < num_workers:
            _shared.num_workers += 1
            _shared._idle.put(_shared._spawn())
        return _shared
