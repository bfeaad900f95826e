"""`DockerSandbox`: a warm pool of locked-down containers, each running a long-lived executor.

A call takes an idle container, sends it one request over the container's attached stdin and
reads one response from its stdout (about 5-10 ms of overhead, against ~90 ms for a
`docker exec` and ~350 ms for a fresh `docker run`). The executor inside (see `_executor.py`)
forks the program into a fresh work directory and kills everything it left behind.

Every container is labelled `agentrl.sandbox=1` with its owner (`host:pid`). A sandbox removes
its own containers on `close()`, at interpreter exit (also after Ctrl-C) and on SIGTERM. When
its process is killed outright (kill -9), the daemon closes each executor's stdin, so the
executors exit, and the process's watchdog (`agentrl._watchdog`) removes the containers;
containers whose owner is gone are also removed when a new `DockerSandbox` starts.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import queue
import signal
import socket
import struct
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agentrl._watchdog import watch_containers
from agentrl.sandbox.base import (
    ExecResult,
    Files,
    Sandbox,
    SandboxError,
    SandboxUnavailableError,
    as_bytes,
    decode_output,
)
from agentrl.sandbox.config import SandboxConfig

LABEL = "agentrl.sandbox"
OWNER_LABEL = "agentrl.sandbox.owner"
POOL_LABEL = "agentrl.sandbox.pool"
EXECUTOR_SOURCE = (Path(__file__).parent / "_executor.py").read_text()

HOW_TO_START_DOCKER = (
    "Start a Docker daemon first: `sudo systemctl start docker` (or, without systemd, "
    "`sudo dockerd > /tmp/dockerd.log 2>&1 &`; .ci/setup_docker.sh does this), make sure your "
    "user may use /var/run/docker.sock (or set DOCKER_HOST), then build the image with "
    "`agentrl sandbox build` (`--offline` without a registry). Without Docker, "
    "`backend: local` uses bubblewrap, with weaker isolation."
)


def connect(timeout: float = 10.0) -> Any:
    """A docker SDK client whose daemon answered a ping, or `SandboxUnavailableError`."""
    try:
        import docker
    except ImportError as e:  # pragma: no cover - the docker extra is missing
        raise SandboxUnavailableError(
            "the docker Python package is missing: pip install 'agentrl[docker]'"
        ) from e
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as e:
        raise SandboxUnavailableError(
            f"no Docker daemon answers ({e}). {HOW_TO_START_DOCKER}"
        ) from e
    return client


def unavailable_reason(image: str = "agentrl-sandbox:latest") -> str | None:
    """Why `DockerSandbox(image=image)` cannot start here, or None when it can."""
    try:
        client = connect(timeout=5)
    except SandboxUnavailableError as e:
        return str(e)
    try:
        client.images.get(image)
    except Exception:
        return f"sandbox image {image!r} missing: run `agentrl sandbox build --offline`"
    return None


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_leftovers(client: Any, *, everything: bool = False) -> int:
    """Remove sandbox containers whose owner process on this host is gone; return how many.

    With `everything=True`, remove every agentrl sandbox container on the daemon.
    """
    host = socket.gethostname()
    removed = 0
    for container in _labelled(client, f"{LABEL}=1"):
        labels = container.get("Labels") or {}
        owner_host, _, pid = labels.get(OWNER_LABEL, ":").partition(":")
        stale = owner_host == host and pid.isdigit() and not _pid_alive(int(pid))
        if everything or stale:
            try:
                client.api.remove_container(container["Id"], force=True)
                removed += 1
            except Exception:
                pass
    return removed


def _labelled(client: Any, label: str) -> list[dict[str, Any]]:
    """The containers (running or not) labelled `label`, as the daemon lists them: a dict
    each, with `Id` and `Labels` (unlike `containers.list`, which fails on one removed while
    it inspects them)."""
    return client.api.containers(all=True, filters={"label": label})


class _Worker:
    """One warm container and the attached socket to its executor."""

    def __init__(self, client: Any, cfg: SandboxConfig, pool: str):
        self.uses = 0
        self.container: Any = None
        self._frames = bytearray()  # docker's multiplexed stream, not yet parsed
        self._payload = bytearray()  # the executor's stdout bytes, parsed out of the frames
        uid, _, gid = cfg.user.partition(":")
        owner = f"uid={uid},gid={gid or uid}"
        limits = {
            "work_root": "/work",
            "max_output_bytes": cfg.max_output_bytes,
            "max_file_bytes": cfg.max_file_bytes,
            "fork_python": cfg.fork_python,
        }
        try:
            self.container = client.containers.create(
                cfg.image,
                command=["python3", "-I", "-u", "-c", EXECUTOR_SOURCE, json.dumps(limits)],
                user=cfg.user,
                stdin_open=True,
                tty=False,
                # Not detached, so the SDK sets StdinOnce: the daemon closes the executor's
                # stdin once our attached socket closes, however this process ended, and the
                # executor then exits (the container stops even if nothing removes it).
                detach=False,
                network_mode=cfg.network,
                read_only=True,
                tmpfs={
                    "/work": f"size={cfg.work_mb}m,{owner},mode=0700,noexec,nosuid,nodev",
                    "/tmp": f"size={cfg.tmp_mb}m,{owner},mode=0700,noexec,nosuid,nodev",
                },
                working_dir="/work",
                mem_limit=f"{cfg.memory_mb}m",
                memswap_limit=f"{cfg.memory_mb}m",
                pids_limit=cfg.pids_limit,
                nano_cpus=int(cfg.cpus * 1e9),
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                ipc_mode="private",
                log_config={"type": "none"},
                labels={LABEL: "1", OWNER_LABEL: _owner(), POOL_LABEL: pool},
            )
            self._sock = client.api.attach_socket(
                self.container.id, params={"stdin": 1, "stdout": 1, "stream": 1}
            )
            self._raw: socket.socket = getattr(self._sock, "_sock", self._sock)
            self.container.start()
            header, _, _ = self.request({"op": "ping"}, time.monotonic() + cfg.start_timeout)
            if not header.get("ok"):
                raise SandboxError(f"executor did not answer the ping: {header}")
        except BaseException:
            self.destroy()
            raise

    def request(
        self, header: dict[str, Any], deadline: float
    ) -> tuple[dict[str, Any], bytes, bytes]:
        """Send one request and read its response; `socket.timeout` past `deadline`."""
        data = json.dumps(header).encode()
        self._raw.settimeout(max(deadline - time.monotonic(), 0.001))
        self._raw.sendall(struct.pack(">I", len(data)) + data)
        size = struct.unpack(">I", self._read(4, deadline))[0]
        response = json.loads(self._read(size, deadline))
        stdout = self._read(response.get("stdout_len", 0), deadline)
        stderr = self._read(response.get("stderr_len", 0), deadline)
        return response, stdout, stderr

    def _read(self, n: int, deadline: float) -> bytes:
        while len(self._payload) < n:
            while len(self._frames) >= 8:
                size = struct.unpack(">I", self._frames[4:8])[0]
                if len(self._frames) < 8 + size:
                    break
                if self._frames[0] == 1:  # stdout; anything else is ignored
                    self._payload += self._frames[8 : 8 + size]
                del self._frames[: 8 + size]
            if len(self._payload) >= n:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("executor did not answer in time")
            self._raw.settimeout(remaining)
            chunk = self._raw.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the container's executor closed its output")
            self._frames += chunk
        out = bytes(self._payload[:n])
        del self._payload[:n]
        return out

    def oom_killed(self) -> bool:
        """Whether Docker saw this container's main process killed for memory."""
        try:
            self.container.reload()
            return bool(self.container.attrs["State"].get("OOMKilled"))
        except Exception:
            return False

    def destroy(self) -> None:
        """Close the socket and force-remove the container (never raises)."""
        try:
            self._sock.close()
        except Exception:
            pass
        if self.container is not None:
            try:
                self.container.remove(force=True)
            except Exception:
                pass
            self.container = None


class DockerSandbox(Sandbox):
    """Runs code in a warm pool of locked-down Docker containers (see `SandboxConfig`).

    No network (only loopback), read-only root, tmpfs work dir, memory/pids/CPU limits,
    non-root user, all capabilities dropped, no-new-privileges, nothing of the host mounted.
    """

    def __init__(self, config: SandboxConfig | None = None, **overrides: Any):
        self.config = (config or SandboxConfig()).model_copy(update=overrides)
        self.default_timeout = self.config.timeout
        self.client = connect()
        try:
            self.client.images.get(self.config.image)
        except Exception as e:
            raise SandboxUnavailableError(
                f"sandbox image {self.config.image!r} not found ({e}). Build it with "
                "`agentrl sandbox build` (or `agentrl sandbox build --offline` without a registry)."
            ) from e
        reap_leftovers(self.client)
        watch_containers(f"{OWNER_LABEL}={_owner()}")  # removed even after a kill -9
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._workers: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._spawner = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sandbox-spawn")
        self._pool_id = os.urandom(8).hex()
        """Labels this sandbox's containers, so `close()` finds one whose creation was cut off."""
        self.num_replaced = 0
        self._missing = 0
        """Containers the pool lacks: replacements that failed (the daemon was away)."""
        _track(self)
        try:
            list(self._spawner.map(lambda _: self._add_worker(), range(self.config.pool_size)))
        except BaseException:
            self.close()
            raise

    # -- pool management --------------------------------------------------------------
    def _add_worker(self) -> None:
        if self._closed:
            return
        worker = _Worker(self.client, self.config, self._pool_id)
        with self._lock:
            if self._closed:
                worker.destroy()
                return
            self._workers.add(worker)
        self._idle.put(worker)

    def _replace(self, worker: _Worker) -> None:
        # The worker stays in `_workers` until destroyed: `close()` may cancel this task
        # before it starts, and must then remove the container itself.
        self.num_replaced += 1

        def replace() -> None:
            worker.destroy()
            with self._lock:
                self._workers.discard(worker)
            for attempt in range(3):
                try:
                    self._add_worker()
                    return
                except Exception:
                    time.sleep(0.5 * (attempt + 1))
            with self._lock:  # refilled by `_take` once the daemon answers again
                self._missing += 1

        try:
            self._spawner.submit(replace)
        except RuntimeError:  # closing: the spawner takes no more work
            replace()

    def _take(self) -> _Worker:
        """An idle container. While none is free, containers the pool lost are replaced once
        the daemon answers; while it does not, this fails at once instead of waiting."""
        wait = self.config.start_timeout * 2
        deadline = time.monotonic() + wait
        while True:
            try:
                return self._idle.get(timeout=min(0.5, max(deadline - time.monotonic(), 0.01)))
            except queue.Empty:
                pass
            self._refill()
            if time.monotonic() >= deadline:
                raise SandboxError(f"no sandbox container became free within {wait:.0f} s")

    def _refill(self) -> None:
        """Start the containers the pool lost (`_missing`), after removing what is left of
        them; `SandboxError` when the Docker daemon does not answer."""
        with self._lock:
            missing, self._missing = self._missing, 0
        if not missing:
            return
        try:
            self.client.ping()
            with self._lock:
                live = {w.container.id for w in self._workers if w.container is not None}
            for container in _labelled(self.client, f"{POOL_LABEL}={self._pool_id}"):
                if container["Id"] not in live:  # stopped by the daemon's restart
                    self.client.api.remove_container(container["Id"], force=True)
        except Exception as e:
            with self._lock:
                self._missing += missing
            raise SandboxError(f"the Docker daemon does not answer ({e})") from None
        for _ in range(missing):
            try:
                self._spawner.submit(self._refill_one)
            except RuntimeError:  # closing
                return

    def _refill_one(self) -> None:
        try:
            self._add_worker()
        except Exception:
            with self._lock:
                self._missing += 1

    # -- running ----------------------------------------------------------------------
    def run(
        self,
        code_or_command: str | Sequence[str],
        *,
        stdin: str | bytes | None = None,
        files: Files | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """Run Python source or an argv command in a warm container (thread-safe)."""
        if self._closed:
            raise SandboxError("this DockerSandbox is closed")
        timeout = self.config.timeout if timeout is None else float(timeout)
        request: dict[str, Any] = {
            "timeout": timeout,
            "stdin": base64.b64encode(as_bytes(stdin)).decode(),
            "files": {k: base64.b64encode(as_bytes(v)).decode() for k, v in (files or {}).items()},
        }
        if isinstance(code_or_command, str):
            request["code"] = code_or_command
        else:
            request["argv"] = [str(a) for a in code_or_command]
        for attempt in range(2):
            worker = self._take()
            start = time.monotonic()
            deadline = start + timeout + self.config.timeout_grace
            try:
                header, out, err = worker.request(request, deadline)
            except (TimeoutError, OSError, ConnectionError, ValueError) as e:
                duration = time.monotonic() - start
                oom = worker.oom_killed()
                self._replace(worker)
                if isinstance(e, TimeoutError | socket.timeout):
                    return ExecResult("", "", -9, timed_out=True, duration=duration)
                if oom:
                    return ExecResult("", "", -9, oom_killed=True, duration=duration)
                if attempt == 0 and duration < 0.05:
                    continue  # the container died while idle: try a fresh one
                return ExecResult(
                    "", "", -1, duration=duration, sandbox_error=f"container failed: {e!r}"
                )
            worker.uses += 1
            bad = (
                header.get("timed_out") or header.get("oom_killed") or not header.get("clean", True)
            )
            leftover = header.get("leftover_processes", 0) and self.config.replace_on_leftover
            if bad or leftover or worker.uses >= self.config.max_uses:
                self._replace(worker)
            else:
                self._idle.put(worker)
            return ExecResult(
                stdout=decode_output(out),
                stderr=decode_output(err),
                exit_code=int(header.get("exit_code", -1)),
                timed_out=bool(header.get("timed_out")),
                oom_killed=bool(header.get("oom_killed")),
                truncated=bool(header.get("truncated")),
                duration=float(header.get("duration", 0.0)),
                sandbox_error=header.get("error") if header.get("exit_code") == 126 else None,
            )
        raise AssertionError("unreachable")

    def health_check(self) -> dict[str, int]:
        """Ping every idle container, replace those that do not answer; counts by outcome."""
        healthy, replaced = 0, 0
        idle = []
        while True:
            try:
                idle.append(self._idle.get_nowait())
            except queue.Empty:
                break
        for worker in idle:
            try:
                header, _, _ = worker.request({"op": "ping"}, time.monotonic() + 5)
                ok = header.get("ok") and header.get("others", 0) == 0
            except Exception:
                ok = False
            if ok:
                healthy += 1
                self._idle.put(worker)
            else:
                replaced += 1
                self._replace(worker)
        return {"healthy": healthy, "replaced": replaced}

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until the pool holds `pool_size` idle containers (e.g. after replacements)."""
        end = time.monotonic() + timeout
        while self._idle.qsize() < self.config.pool_size:
            if time.monotonic() > end:
                raise SandboxError(f"pool not refilled within {timeout:.0f} s")
            time.sleep(0.02)

    def container_ids(self) -> list[str]:
        """IDs of the containers this sandbox holds now."""
        with self._lock:
            return [w.container.id for w in self._workers if w.container is not None]

    def close(self) -> None:
        """Remove every container of this sandbox. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._spawner.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            workers, self._workers = list(self._workers), set()
        try:
            with ThreadPoolExecutor(max_workers=max(1, len(workers))) as pool:
                list(pool.map(_Worker.destroy, workers))
        except RuntimeError:  # at interpreter exit no new threads start: one by one
            for worker in workers:
                worker.destroy()
        try:  # a container whose creation an interrupt cut off is known by its label only
            for container in _labelled(self.client, f"{POOL_LABEL}={self._pool_id}"):
                self.client.api.remove_container(container["Id"], force=True)
        except Exception:
            pass


# -- removal at exit, Ctrl-C and SIGTERM ------------------------------------------------
_LIVE: weakref.WeakSet[DockerSandbox] = weakref.WeakSet()
_hooks_installed = False


def _close_all() -> None:
    for sandbox in list(_LIVE):
        try:
            sandbox.close()
        except Exception:
            pass


def _on_sigterm(signum: int, frame: Any) -> None:
    _close_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _track(sandbox: DockerSandbox) -> None:
    global _hooks_installed
    _LIVE.add(sandbox)
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(_close_all)  # also runs after an uncaught KeyboardInterrupt (Ctrl-C)
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
