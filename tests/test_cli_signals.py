"""`agentrl` unwinds on SIGTERM as on Ctrl-C, so exit hooks shut engines and sandboxes down."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

_SCRIPT = """
import atexit, sys
from pathlib import Path
from agentrl.cli import main
flag = Path(sys.argv[1])
atexit.register(lambda: flag.write_text("cleaned up"))
sys.argv = ["agentrl", "play", "sokoban"]
main()
"""


def test_sigterm_runs_exit_hooks_and_exits_143(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, str(flag)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    seen = b""
    while b"#" not in seen and proc.poll() is None and time.monotonic() < deadline:
        seen += proc.stdout.read1(4096)  # until the first grid is on screen
    assert b"#" in seen, seen.decode(errors="replace")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert flag.read_text() == "cleaned up"
