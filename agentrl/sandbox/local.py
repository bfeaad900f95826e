"""`LocalSandbox`: bubblewrap on the host, for machines without Docker. WEAKER isolation.

Each run gets new user, PID, network, IPC and UTS namespaces, a read-only view of `/usr`
only (no home, no project checkout, no `/etc`), a fresh `/work` directory, rlimits and a hard
timeout that kills the whole namespace. It shares the host kernel with no seccomp filter and
no cgroup memory/pids limits (only rlimits), so prefer `DockerSandbox` for untrusted code.
"""

from __future__ import annotations

import os
import resource
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl.sandbox.base import (
    ExecResult,
    Files,
    Sandbox,
    SandboxUnavailableError,
    as_bytes,
    decode_output,
)
from agentrl.sandbox.config import SandboxConfig

HOW_TO_INSTALL_BWRAP = (
    "Install bubblewrap: `sudo apt-get install -y bubblewrap` (Debian/Ubuntu; "
    "`dnf install bubblewrap` on Fedora), or use the docker backend."
)


def unavailable_reason() -> str | None:
    """Why `LocalSandbox` cannot run code here, or None when it can (one trivial run)."""
    if shutil.which("bwrap") is None:
        return f"bubblewrap (`bwrap`) is not installed. {HOW_TO_INSTALL_BWRAP}"
    result = LocalSandbox(timeout=10).run(["true"])
    if result.exit_code != 0 or result.timed_out:
        return (
            f"bubblewrap is installed but cannot start a sandbox here "
            f"({result.stderr.strip() or f'exit code {result.exit_code}'}): unprivileged user "
            "namespaces may be off (`sudo sysctl -w kernel.unprivileged_userns_clone=1`, or "
            "inside a container run it with `--privileged`), or use the docker backend."
        )
    return None


class LocalSandbox(Sandbox):
    """Runs code under bubblewrap (`bwrap`) on this machine; see the module docstring."""

    def __init__(self, config: SandboxConfig | None = None, **overrides: Any):
        self.config = (config or SandboxConfig(backend="local")).model_copy(update=overrides)
        self.default_timeout = self.config.timeout
        self.bwrap = shutil.which("bwrap")
        if self.bwrap is None:
            raise SandboxUnavailableError(
                f"bubblewrap (`bwrap`) is not installed. {HOW_TO_INSTALL_BWRAP}"
            )

    def _argv(self, workdir: str, command: list[str]) -> list[str]:
        argv = [self.bwrap, "--ro-bind", "/usr", "/usr"]
        for link in ("bin", "lib", "lib64", "sbin"):
            target = os.path.realpath(f"/{link}")
            if target.startswith("/usr/"):
                argv += ["--symlink", target.lstrip("/"), f"/{link}"]
        argv += [
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            "--bind",
            workdir,
            "/work",
            "--chdir",
            "/work",
            "--unshare-all",
            "--unshare-user",
            "--uid",
            "65534",
            "--gid",
            "65534",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            "--setenv",
            "PATH",
            "/usr/local/bin:/usr/bin:/bin",
            "--setenv",
            "HOME",
            "/work",
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--setenv",
            "PYTHONDONTWRITEBYTECODE",
            "1",
        ]
        return argv + command

    def _limits(self, timeout: float) -> Any:
        cfg = self.config

        def setup() -> None:
            memory = cfg.memory_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            resource.setrlimit(resource.RLIMIT_FSIZE, (cfg.max_file_bytes, cfg.max_file_bytes))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            cpu = int(timeout) + 2
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))

        return setup

    def run(
        self,
        code_or_command: str | Sequence[str],
        *,
        stdin: str | bytes | None = None,
        files: Files | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """Run Python source or an argv command under bubblewrap."""
        timeout = self.config.timeout if timeout is None else float(timeout)
        with tempfile.TemporaryDirectory(prefix="agentrl-bwrap-") as workdir:
            root = Path(workdir)
            for name, content in (files or {}).items():
                path = (root / name).resolve()
                if not path.is_relative_to(root.resolve()):
                    raise ValueError(f"file name {name!r} leaves the work directory")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(as_bytes(content))
            if isinstance(code_or_command, str):
                (root / "main.py").write_bytes(code_or_command.encode("utf-8", "surrogateescape"))
                command = ["python3", "/work/main.py"]
            else:
                command = [str(a) for a in code_or_command]
            (root / ".stdin").write_bytes(as_bytes(stdin))
            with open(root / ".stdin", "rb") as stdin_file:
                return self._execute(self._argv(workdir, command), stdin_file, timeout)

    def _execute(self, argv: list[str], stdin_file: Any, timeout: float) -> ExecResult:
        start = time.monotonic()
        proc = subprocess.Popen(
            argv,
            stdin=stdin_file,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=self._limits(timeout),
        )
        cap = self.config.max_output_bytes
        bufs = {proc.stdout: bytearray(), proc.stderr: bytearray()}
        truncated = timed_out = False
        with selectors.DefaultSelector() as sel:
            for f in bufs:
                sel.register(f, selectors.EVENT_READ)
            while sel.get_map():
                remaining = start + timeout - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                for key, _ in sel.select(remaining):
                    chunk = os.read(key.fileobj.fileno(), 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    buf = bufs[key.fileobj]
                    if len(buf) + len(chunk) > cap:
                        truncated = True
                        chunk = chunk[: max(cap - len(buf), 0)]
                    buf += chunk
        try:
            exit_code = proc.wait(timeout=max(start + timeout - time.monotonic(), 0) + 0.1)
        except subprocess.TimeoutExpired:
            timed_out = True
        if timed_out:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # bwrap's namespace dies with it
            except ProcessLookupError:
                pass
            exit_code = proc.wait()
        for f in bufs:
            f.close()
        return ExecResult(
            stdout=decode_output(bytes(bufs[proc.stdout])),
            stderr=decode_output(bytes(bufs[proc.stderr])),
            exit_code=exit_code,
            timed_out=timed_out,
            truncated=truncated,
            duration=time.monotonic() - start,
        )
