"""Env worker processes: every env call is bounded, because a process can be killed.

A thread running an env call that never returns cannot be stopped (STACK.md), so envs live in
worker processes, several envs to a worker, an episode's env on one worker. Each call is sent
to its worker and awaited for at most its time limit. A call past its limit, or a worker that
dies, kills the worker and starts a fresh one in its place; the call fails with
`EnvCallTimeout` (or `EnvWorkerDied`), and the other envs that lived on that worker are rebuilt
in the new one by replaying their calls (`reset(seed)` and the actions since: envs are
deterministic, which `agentrl envs check` checks).

Pools outlive a rollout (a trainer's next step reuses its workers) and end at interpreter exit.
Workers ignore Ctrl-C and SIGTERM: the command that owns them decides how to stop, and ends
them; a worker asked to end closes its envs first (a sandbox removes its containers).

    pool = take_pool(partial(make, "sokoban"), num_workers=4)
    header, (obs, info) = await pool.call(0, "start", 7, timeout=60)
    return_pool(pool)
"""

from __future__ import annotations

import asyncio
import atexit
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from agentrl.envs.base import TokenEnv
from agentrl.envs.contract import env_label

EnvFactory = Callable[[], TokenEnv]

CLOSE_TIMEOUT_S = 5.0
"""Longest an env's `close()` may take."""
END_TIMEOUT_S = 20.0
"""Longest the workers of a pool may take to close their envs and run their exit hooks when
the pool ends (a sandbox removing its containers); then they are killed."""


class EnvCallTimeout(Exception):
    """An env call did not return within its time limit; its worker was replaced."""


class EnvWorkerDied(Exception):
    """The worker process running an env call exited (a crash, `os._exit`, a signal)."""


class EnvWorkerStartError(Exception):
    """The env factory cannot be rebuilt in a worker process (a lambda, or an env class that
    lives in a script's `__main__`)."""


class EnvCallError(Exception):
    """An env call raised in its worker; the message is `Type: message` from there."""


def env_header(env: TokenEnv) -> tuple[str, int, list[dict[str, Any]], str]:
    """What the loop needs from a new env: system prompt, turn limit, tool schemas (if any),
    and its class (`module.Class`, for errors)."""
    tools = getattr(env, "tools", None) or []
    return env.system_prompt, env.max_turns, [dict(t) for t in tools], env_label(env)


def serve(
    envs: dict[int, TokenEnv], factory: EnvFactory, eid: int, method: str, arg: Any
) -> tuple[bool, Any]:
    """One env call in a worker (process or Ray actor): `(True, result)` or `(False, error)`."""
    try:
        if method == "start":  # create + reset in one call
            env = envs[eid] = factory()
            return True, (env_header(env), env.reset(seed=arg))
        if method == "create":
            env = envs[eid] = factory()
            return True, env_header(env)
        if method == "reset":
            return True, envs[eid].reset(seed=arg)
        if method == "step":
            return True, envs[eid].step(arg)
        closing = envs.pop(eid, None)
        return True, closing.close() if closing is not None else None
    except Exception as e:  # sent back; the episode becomes env_error
        return False, f"{type(e).__name__}: {e}"


def _worker_main(conn: Connection, factory: EnvFactory) -> None:
    """A worker process: serves env calls one at a time until it receives None, then closes
    the envs it still holds and runs its exit hooks (a sandbox removes its containers)."""
    envs: dict[int, TokenEnv] = {}
    try:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):  # the owner is gone
                return
            if msg is None:
                return
            conn.send(serve(envs, factory, *msg))
    finally:
        for env in envs.values():
            try:
                env.close()
            except Exception:  # noqa: BLE001 - the worker is ending either way
                pass
        atexit._run_exitfuncs()  # the worker ends with os._exit, which skips them


# -- the zygote: one process that has imported the env, and forks a worker in milliseconds -----
def _zygote_main(fd: int) -> None:
    """The zygote process: reads `(sys.path, pickled factory, pickled env registrations)`,
    imports what the factory needs, then forks one worker per request (sending back its pid
    and its end of a socket pair) until the owner closes the control socket; then kills the
    workers it forked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C and SIGTERM are the owner's to
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # handle: it closes the workers' envs
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # ended workers are reaped at once
    control = socket.socket(fileno=fd)
    conn = Connection(os.dup(fd))
    path, data, specs = conn.recv()
    sys.path[:] = path
    _add_registrations(specs)
    try:
        factory = pickle.loads(data)
    except Exception as e:  # e.g. an env class defined in a script's __main__
        conn.send(f"{type(e).__name__}: {e}")
        return
    conn.send(None)
    forked: list[int] = []
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            request = None
        if request is None:
            for pid in forked:
                _signal(pid, signal.SIGKILL)
            return
        mine, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the worker
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            conn.close()
            control.close()
            theirs.close()
            try:
                _worker_main(Connection(mine.detach()), factory)
            finally:
                os._exit(0)
        mine.close()
        forked.append(pid)
        socket.send_fds(control, [pickle.dumps(pid)], [theirs.fileno()])
        theirs.close()


def _registrations() -> dict[str, bytes]:
    """The owner's env registrations, each pickled (those made at run time, say by
    `register` in a script or a test, exist in no fresh process); one that cannot be pickled
    (a lambda entry point) is left out: a factory that needs it fails to start, and the
    rollout falls back to threads."""
    from agentrl.envs.registry import registry

    out = {}
    for name, spec in registry().items():
        try:
            out[name] = pickle.dumps(spec)
        except Exception:  # noqa: BLE001 - any pickling failure: see the docstring
            continue
    return out


def _add_registrations(specs: dict[str, bytes]) -> None:
    """Register in this process the owner's envs it does not know (`_registrations`)."""
    from agentrl.envs.registry import _REGISTRY, registry

    known = registry()
    for name, data in specs.items():
        if name not in known:
            try:
                _REGISTRY[name] = pickle.loads(data)
            except Exception:  # noqa: BLE001 - e.g. a module this process cannot import
                continue


def _ended(conn: Connection, deadline: float) -> bool:
    """Whether the worker at the other end of `conn` ended (EOF) before `deadline`; an answer
    it still sends (a retired worker's last call) is read and dropped."""
    while conn.poll(max(0.0, deadline - time.monotonic())):
        try:
            conn.recv()
        except (EOFError, OSError):
            return True
    return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


_ZYGOTE_CODE = (
    "import sys; from agentrl.rollout.env_workers import _zygote_main; "
    "_zygote_main(int(sys.argv[1]))"
)
_ZYGOTE_START_S = 120.0
"""Longest the zygote may take to import the env's modules."""


class _Zygote:
    """The owner's end of the zygote process."""

    def __init__(self, factory: EnvFactory) -> None:
        try:
            data = pickle.dumps(factory)
        except Exception as e:
            raise EnvWorkerStartError(f"{type(e).__name__}: {e}") from e
        mine, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE_CODE, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.control = mine
        self.conn = Connection(os.dup(mine.fileno()))
        self.conn.send((list(sys.path), data, _registrations()))
        error = self.conn.recv() if self.conn.poll(_ZYGOTE_START_S) else "no answer in time"
        if error is not None:
            self.close()
            raise EnvWorkerStartError(error)

    def fork(self) -> tuple[int, Connection]:
        """A new worker: its pid and a connection to it."""
        self.conn.send(True)
        data, fds, _, _ = socket.recv_fds(self.control, 1024, 1)
        if not fds:
            raise EnvWorkerDied("the env zygote process is gone")
        return pickle.loads(data), Connection(fds[0])

    def close(self) -> None:
        """End the zygote (it kills the workers it forked)."""
        self.conn.close()
        self.control.close()
        try:
            self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class _Worker:
    pid: int
    conn: Connection
    generation: int = 0
    """Counts replacements: an env built in an older generation must be replayed."""


@dataclass
class _EnvLog:
    """What rebuilds one env in a fresh worker: its calls since it was built."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    generation: int = 0


class ProcessEnvPool:
    """`num_workers` worker processes hosting envs built by `factory`; see the module doc.
    Raises `EnvWorkerStartError` when `factory` cannot be rebuilt in another process."""

    def __init__(self, factory: EnvFactory, num_workers: int) -> None:
        self.factory = factory
        self.num_workers = num_workers
        self.zygote = _Zygote(factory)
        self.workers = [self._start() for _ in range(num_workers)]
        _live.add(self)
        self.logs: dict[int, _EnvLog] = {}
        self.locks: dict[int, asyncio.Lock] = {}
        self.num_replaced = 0
        """Workers killed and replaced (timeouts and deaths)."""
        self.retired: list[_Worker] = []
        """Workers replaced after a cancelled call, ending on their own (`_retire`)."""

    def _start(self, generation: int = 0) -> _Worker:
        pid, conn = self.zygote.fork()
        return _Worker(pid, conn, generation)

    def _replace(self, index: int) -> None:
        old = self.workers[index]
        _signal(old.pid, signal.SIGKILL)
        old.conn.close()
        self.workers[index] = self._start(old.generation + 1)
        self.num_replaced += 1

    def _retire(self, index: int) -> None:
        """Replace worker `index` without killing it: it ends after its current call, closing
        its envs (a sandbox removes its containers); `close` kills it if it does not."""
        old = self.workers[index]
        try:
            old.conn.send(None)
        except OSError:
            pass
        self.retired.append(old)
        self.workers[index] = self._start(old.generation + 1)
        self.num_replaced += 1

    def begin(self) -> None:
        """Start of a rollout (a new event loop): fresh locks."""
        self.locks = {i: asyncio.Lock() for i in range(self.num_workers)}

    async def call(self, eid: int, method: str, arg: Any = None, *, timeout: float | None) -> Any:
        """Run `method` on env `eid` (`start`, `create`, `reset`, `step`, `close`) in its worker,
        for at most `timeout` seconds of the worker's time (waiting for the worker is free)."""
        index = eid % self.num_workers
        async with self.locks[index]:
            log = self.logs.get(eid)
            if method in ("start", "create"):
                log = self.logs[eid] = _EnvLog([], self.workers[index].generation)
            elif log is None:
                raise RuntimeError(f"env {eid} was not created")
            elif log.generation != self.workers[index].generation:  # its worker was replaced
                if method == "close":
                    del self.logs[eid]
                    return None
                await self._replay(index, eid, log, timeout)
            if method == "close":
                del self.logs[eid]
                return await self._request(index, (eid, method, arg), CLOSE_TIMEOUT_S)
            result = await self._request(index, (eid, method, arg), timeout)
            log.calls.append((method, arg))
            return result

    async def _replay(self, index: int, eid: int, log: _EnvLog, timeout: float | None) -> None:
        log.generation = self.workers[index].generation
        try:
            for method, arg in log.calls:
                await self._request(index, (eid, method, arg), timeout)
        except Exception as e:
            raise EnvCallError(
                f"its worker process was replaced (another env's call hung or crashed it), "
                f"and replaying this env's {len(log.calls)} calls failed: {e}"
            ) from e

    async def _request(self, index: int, msg: tuple[int, str, Any], timeout: float | None) -> Any:
        worker = self.workers[index]
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        fd = worker.conn.fileno()
        try:
            worker.conn.send(msg)
            loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
            try:
                await asyncio.wait_for(ready, timeout)
            finally:
                loop.remove_reader(fd)
            ok, result = worker.conn.recv()
        except TimeoutError:
            self._replace(index)
            raise EnvCallTimeout(
                f"did not return within {timeout:g} s; its worker process was replaced"
            ) from None
        except (EOFError, OSError):
            self._replace(index)
            raise EnvWorkerDied("its worker process died") from None
        except BaseException:  # cancelled mid-call (or Ctrl-C): its answer would come to the
            self._retire(index)  # next call, so a fresh worker takes its place
            raise
        if not ok:
            raise EnvCallError(result)
        return result

    def close(self) -> None:
        """End every worker (asks first: a worker closes its envs; kills what has not ended
        within `END_TIMEOUT_S`)."""
        _live.discard(self)
        for worker in self.workers:
            try:
                worker.conn.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + END_TIMEOUT_S
        for worker in self.workers + self.retired:
            if not _ended(worker.conn, deadline):
                _signal(worker.pid, signal.SIGKILL)
            worker.conn.close()
        self.workers, self.retired = [], []
        self.zygote.close()  # which kills any worker left


_live: weakref.WeakSet[ProcessEnvPool] = weakref.WeakSet()
"""Every pool not closed yet, idle or in use (a Ctrl-C can stop a rollout mid-step)."""
_idle: dict[tuple[int, int, int], ProcessEnvPool] = {}
"""Idle pools by (process id, id of the factory, size), kept between rollouts."""
_idle_lock = threading.Lock()


def take_pool(factory: EnvFactory, num_workers: int) -> ProcessEnvPool:
    """An idle pool for `factory` left by an earlier rollout, or a new one. A pool serves one
    rollout at a time; concurrent rollouts get pools of their own."""
    key = (os.getpid(), id(factory), num_workers)
    with _idle_lock:
        pool = _idle.pop(key, None)
    if pool is None or pool.factory is not factory:
        if pool is not None:
            pool.close()
        pool = ProcessEnvPool(factory, num_workers)
    pool.begin()
    return pool


def return_pool(pool: ProcessEnvPool) -> None:
    """Keep `pool` for the next rollout (its envs are closed), unless one is kept already."""
    pool.logs.clear()
    key = (os.getpid(), id(pool.factory), pool.num_workers)
    with _idle_lock:
        if key not in _idle:
            _idle[key] = pool
            return
    pool.close()


def close_pools() -> None:
    """End every pool's workers, idle or in use (at interpreter exit, and for tests)."""
    with _idle_lock:
        _idle.clear()
    for pool in list(_live):
        pool.close()


atexit.register(close_pools)
