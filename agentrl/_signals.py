"""Ctrl-C and SIGTERM stop a command as on every Unix tool: exit code 130 or 143, one line, no
traceback, after `finally` blocks and exit hooks have run (so a run saves what it has, and
engines, env workers and sandboxes are shut down).

`install()` makes both signals raise `Stopped`, a `SystemExit` (click does not turn it into
"Aborted!", asyncio does not swallow it, Python prints no traceback for it). A stretch that
must not be cut in the middle (an optimizer update and the step count after it) runs under
`deferred()`: a signal there takes effect at its end. A second signal while stopping ends
the process at once (`os._exit`); the watchdog (`agentrl._watchdog`) still ends its children.

    install()
    with deferred():
        optimizer.step(); state.step += 1   # never half done
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

NAMES = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "stopped (SIGTERM)"}


class Stopped(SystemExit):
    """Raised in the main thread by Ctrl-C (code 130) or SIGTERM (code 143)."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum

    @property
    def what(self) -> str:
        """`interrupted (Ctrl-C)` or `stopped (SIGTERM)`."""
        return NAMES.get(signal.Signals(self.signum), f"stopped (signal {self.signum})")


_state = {"stopping": False, "deferring": 0, "pending": 0}


def _handler(signum: int, frame: FrameType | None) -> None:
    if _state["stopping"]:  # a second signal: stop now, without cleaning up
        sys.stderr.write(f"\n{NAMES.get(signal.Signals(signum), 'stopped')} again: exiting now\n")
        sys.stderr.flush()
        os._exit(128 + signum)
    _state["stopping"] = True
    if _state["deferring"]:
        _state["pending"] = signum
        sys.stderr.write("\nstopping after the current update (again to stop at once)\n")
        sys.stderr.flush()
        return
    raise Stopped(signum)


def install() -> None:
    """Make Ctrl-C and SIGTERM raise `Stopped` in the main thread (call it from there)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _handler)
        signal.signal(signal.SIGTERM, _handler)
        _state.update(stopping=False, deferring=0, pending=0)


def stopping() -> bool:
    """Whether a stop signal has arrived."""
    return bool(_state["stopping"])


@contextmanager
def deferred() -> Iterator[None]:
    """Hold a stop signal that arrives inside until the block has finished (nests)."""
    _state["deferring"] += 1
    try:
        yield
    finally:
        _state["deferring"] -= 1
        if not _state["deferring"] and _state["pending"]:
            signum, _state["pending"] = _state["pending"], 0
            raise Stopped(signum)
