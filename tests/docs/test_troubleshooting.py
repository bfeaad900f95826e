"""Every message docs/troubleshooting.md quotes (```text message blocks) still occurs in the
source tree, so a user who searches the page for what agentrl printed finds it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "troubleshooting.md"


def _messages() -> list[str]:
    return re.findall(r"```text message\n(.*?)```", PAGE.read_text(), flags=re.S)


def _source() -> str:
    """The package's Python source with adjacent string literals joined (`"a " "b"` and
    `"a "\\n    f"b"` read as `a b`), so a message split over source lines still matches."""
    text = "\n".join(p.read_text() for p in sorted((ROOT / "agentrl").rglob("*.py")))
    return re.sub(r"""(?<=[^\\])["']\s*\n\s*(?:rf|fr|f|r)?["']""", "", text)


def _fragments(message: str) -> list[str]:
    """The literal parts of a quoted message: its text between `<...>` placeholders, line by
    line (the page may break a long message into lines)."""
    parts = []
    for line in message.splitlines():
        parts += [p.strip() for p in re.split(r"<[^<>]*>", line)]
    return [p for p in parts if len(p) >= 8]


def test_the_page_quotes_messages() -> None:
    assert len(_messages()) >= 5


@pytest.mark.parametrize("message", _messages(), ids=lambda m: m.splitlines()[0][:50])
def test_quoted_message_occurs_in_the_source(message: str) -> None:
    source = _source()
    missing = [f for f in _fragments(message) if f not in source]
    assert not missing, f"not in agentrl/: {missing}"
