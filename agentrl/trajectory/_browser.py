"""Headless Chromium, to see an `agentrl view --html` page as a person would.

No Python driver: the browser's own `--dump-dom` (the DOM after the page's load, layout and
scripts) and `--screenshot` flags, each run in a fresh profile with networking features off.
The tests check the page with it and `scripts/screenshot_view.py` makes the docs' picture.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
HOW_TO_INSTALL_CHROMIUM = (
    "Install Chromium: `sudo apt-get install -y chromium` (Debian; the `chromium-browser` "
    "snap on Ubuntu), or set AGENTRL_CHROMIUM to a Chrome or Chromium binary."
)
_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--virtual-time-budget=5000",  # let the page load and its scripts run before the output
)


def find_chromium() -> str | None:
    """The Chromium binary: `AGENTRL_CHROMIUM`, else the first of CHROMIUM_NAMES on PATH."""
    override = os.environ.get("AGENTRL_CHROMIUM")
    if override:
        return shutil.which(override)
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


def unavailable_reason() -> str | None:
    """Why headless Chromium cannot render a page here, or None when it can (one blank page)."""
    if find_chromium() is None:
        return f"no Chromium binary found ({', '.join(CHROMIUM_NAMES)}). {HOW_TO_INSTALL_CHROMIUM}"
    try:
        dom = _run("about:blank", "--dump-dom", timeout=60)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        return f"Chromium is installed but cannot run headless here: {e}"
    if "<body" not in dom:
        return f"Chromium printed no page for about:blank: {dom[:200]!r}"
    return None


def _run(url: str, *flags: str, timeout: float) -> str:
    """Run headless Chromium on `url` in a throwaway profile; its stdout."""
    binary = find_chromium()
    if binary is None:
        raise RuntimeError(f"no Chromium binary found. {HOW_TO_INSTALL_CHROMIUM}")
    with tempfile.TemporaryDirectory(prefix="agentrl-chromium-") as profile:
        proc = subprocess.run(
            [binary, *_FLAGS, f"--user-data-dir={profile}", *flags, url],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"{binary} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def dump_dom(page: Path, *, width: int = 1200, height: int = 900, timeout: float = 60) -> str:
    """The page's DOM as HTML after loading, laying out and running its scripts."""
    url = Path(page).resolve().as_uri()
    return _run(url, f"--window-size={width},{height}", "--dump-dom", timeout=timeout)


def screenshot(
    page: Path, png: Path, *, width: int = 1200, height: int = 900, timeout: float = 60
) -> Path:
    """Write a `width` x `height` PNG of the top of the page to `png`."""
    png = Path(png).resolve()
    png.parent.mkdir(parents=True, exist_ok=True)
    png.unlink(missing_ok=True)
    url = Path(page).resolve().as_uri()
    _run(url, f"--window-size={width},{height}", f"--screenshot={png}", timeout=timeout)
    if not png.is_file():
        raise RuntimeError(f"Chromium wrote no screenshot to {png}")
    return png
