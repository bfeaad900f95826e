"""The one stderr `Console` that progress bars and log lines share, and quiet third parties.

Log lines go through the same Console as the live progress bars, so rich prints them above
the bars instead of over them. Either way (a terminal, a log file, CI), lines are plain
`time LEVEL message`, one per record, never hard-wrapped or padded to 80 columns.
"""

from __future__ import annotations

import logging
import os
import sys

from rich.console import Console

_CONSOLE: Console | None = None
LOG_FORMAT = "%(asctime)s %(levelname)s %(message)s"


def console() -> Console:
    """The process's stderr Console (created on first use)."""
    global _CONSOLE
    if _CONSOLE is None:
        _CONSOLE = Console(stderr=True)  # writes to whatever sys.stderr is at the time
    return _CONSOLE


class _ConsoleHandler(logging.Handler):
    """`time LEVEL message` through the shared Console (above live bars), one logical line
    each: the terminal wraps it where it must, so no path is broken by inserted newlines."""

    STYLES = {logging.WARNING: "yellow", logging.ERROR: "red", logging.CRITICAL: "bold red"}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from rich.text import Text

            text = Text(self.format(record), style=self.STYLES.get(record.levelno, ""))
            console().print(text, soft_wrap=True, highlight=False)
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


def log_handler() -> logging.Handler:
    """A handler for the root logger: through the Console above live bars on a terminal,
    else plain; both print `time LEVEL message` lines that are never hard-wrapped."""
    out = console()
    handler: logging.Handler
    if out.is_terminal:
        handler = _ConsoleHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT, datefmt="%H:%M:%S"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT, datefmt="%H:%M:%S"))
    return handler


def command_name() -> str:
    """The `agentrl` command as the user ran it, for the commands a hint prints: `agentrl`
    when the shell finds this one by that name (and under `python -m agentrl.cli`), else the
    path that was typed, e.g. `.venv/bin/agentrl`."""
    import shlex
    import shutil
    from pathlib import Path

    argv0 = sys.argv[0] if sys.argv else ""
    if Path(argv0).name != "agentrl":
        return "agentrl"
    found = shutil.which("agentrl")
    if found is not None and Path(found).resolve() == Path(argv0).resolve():
        return "agentrl"
    return shlex.quote(argv0)


def setup_logging(level: int = logging.INFO) -> None:
    """INFO lines of `agentrl.*` to stderr through `console()`, unless the root logger has
    handlers already (an application's or pytest's own)."""
    root = logging.getLogger()
    if root.handlers:
        return
    root.addHandler(log_handler())
    root.setLevel(level)


def quiet_third_party() -> None:
    """No progress bars from Hugging Face libraries ("Loading weights", "Writing model
    shards"), and vLLM (and its engine processes, which inherit the environment) logs only
    warnings, not its ~60 INFO lines per engine start. The command's own bars say what is
    happening. Call before they are imported; it also switches the bars off when they
    already are. `VLLM_LOGGING_LEVEL=INFO` in the environment brings vLLM's lines back."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
