"""The sandbox contract: `Sandbox.run(code, *, stdin, files, timeout) -> ExecResult`."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ExecResult:
    """What one sandboxed run produced. Misbehaving code yields flags, never an exception."""

    stdout: str
    """Standard output, decoded as UTF-8 (invalid bytes replaced), at most the output cap."""
    stderr: str
    """Standard error, decoded like `stdout`."""
    exit_code: int
    """The program's exit status; negative is the signal that killed it (-9: SIGKILL)."""
    timed_out: bool = False
    """The program ran past its timeout and was killed with its whole process tree."""
    oom_killed: bool = False
    """The kernel killed a process of the run for exceeding the memory limit."""
    truncated: bool = False
    """stdout or stderr exceeded the output cap; the rest was discarded."""
    duration: float = 0.0
    """Wall-clock seconds the program ran."""
    sandbox_error: str | None = None
    """Set when the sandbox itself failed (container died, executor broke), not the program."""

    @property
    def ok(self) -> bool:
        """True when the program exited 0 with no flag raised."""
        return (
            self.exit_code == 0
            and not (self.timed_out or self.oom_killed or self.truncated)
            and self.sandbox_error is None
        )

    def summary(self, max_chars: int = 2000) -> str:
        """A short human-readable account for an env's feedback message."""
        parts = []
        if self.timed_out:
            parts.append(f"Timed out after {self.duration:.1f} s.")
        if self.oom_killed:
            parts.append("Killed: out of memory.")
        if self.sandbox_error:
            parts.append(f"Sandbox error: {self.sandbox_error}")
        if self.exit_code != 0 and not self.timed_out:
            parts.append(f"Exit code {self.exit_code}.")
        for name, text in (("stdout", self.stdout), ("stderr", self.stderr)):
            if text.strip():
                text = (
                    text
                    if len(text) <= max_chars
                    else text[: max_chars // 2] + "\n...\n" + text[-max_chars // 2 :]
                )
                parts.append(f"{name}:\n{text.rstrip()}")
        if self.truncated:
            parts.append("(output truncated)")
        return "\n".join(parts) if parts else "(no output)"


Files = Mapping[str, str | bytes]
"""Files to place in the run's work directory: relative path -> content."""


class SandboxError(RuntimeError):
    """The sandbox cannot run anything (as opposed to the program failing)."""


class SandboxUnavailableError(SandboxError):
    """The requested sandbox backend is not available on this machine; the message says why."""


class Sandbox(ABC):
    """Runs untrusted code. `run` is thread-safe; `arun` is its asyncio form.

    `code_or_command` is Python source (a `str`) or an argv list run as a command
    (`["sh", "-c", "ls"]`). Each call gets a fresh, empty work directory as its cwd, with
    `files` written into it and `stdin` fed to the program.
    """

    default_timeout: float = 10.0

    @abstractmethod
    def run(
        self,
        code_or_command: str | Sequence[str],
        *,
        stdin: str | bytes | None = None,
        files: Files | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """Run Python source or an argv command; return its `ExecResult`."""

    async def arun(
        self,
        code_or_command: str | Sequence[str],
        *,
        stdin: str | bytes | None = None,
        files: Files | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """`run` without blocking the event loop (runs in a worker thread)."""
        return await asyncio.to_thread(
            self.run, code_or_command, stdin=stdin, files=files, timeout=timeout
        )

    def close(self) -> None:
        """Release every resource the sandbox holds. Safe to call twice."""
        return None  # nothing held by default; pools override this

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def decode_output(data: bytes) -> str:
    """Program output as text: UTF-8 with invalid bytes replaced, NUL bytes kept."""
    return data.decode("utf-8", errors="replace")


def as_bytes(data: str | bytes | None) -> bytes:
    """Encode text as UTF-8; pass bytes through; None becomes empty."""
    if data is None:
        return b""
    return data.encode() if isinstance(data, str) else bytes(data)
