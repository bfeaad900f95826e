"""Checks over all of docs/: links resolve, quoted messages exist in the code, recipes load,
and documented `agentrl` commands only use options the commands have."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from _docs_helpers import DOCS, ROOT, block_language, block_title, fenced_blocks, normalize

PAGES = sorted(DOCS.rglob("*.md"))
_LINK_RE = re.compile(r"\]\(([^)\s]+)\)")
_PLACEHOLDER_RE = re.compile(r"<[^<>]*>")
_STRING_JOIN_RE = re.compile(r"""["']\s*\n\s*[rbfu]*["']""")


def _anchors(page: Path) -> set[str]:
    """GitHub-style anchors of the headings of a Markdown page."""
    anchors = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def _source_text() -> str:
    """All Python source of agentrl, with adjacent string literals joined across lines."""
    text = "\n".join(p.read_text() for p in sorted((ROOT / "agentrl").rglob("*.py")))
    return normalize(_STRING_JOIN_RE.sub("", text))


def test_index_links_every_page() -> None:
    index = (DOCS / "index.md").read_text()
    for page in PAGES:
        if page.name != "index.md":
            assert f"({page.relative_to(DOCS)})" in index, f"docs/index.md does not link {page}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_links_resolve(page: Path) -> None:
    for target in _LINK_RE.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: broken link {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.name}: no heading #{anchor} in {dest.name}"


def test_quoted_messages_occur_in_the_code() -> None:
    source = _source_text()
    checked = 0
    for page in PAGES:
        for info, body in fenced_blocks(page.read_text()):
            if info.split()[1:2] != ["message"]:
                continue
            fragments = [f for line in body.splitlines() for f in _PLACEHOLDER_RE.split(line)]
            for fragment in fragments:
                fragment = normalize(fragment)
                if len(fragment) >= 6:
                    assert fragment in source, (
                        f"{page.name}: the quoted message part {fragment!r} no longer occurs "
                        "in agentrl/; update the page to what the code prints now"
                    )
                    checked += 1
    assert checked >= 8


def test_message_check_joins_split_string_literals() -> None:
    code = 'x = (\n    "consider a lower lr, "\n    f"a higher ratio"\n)'
    assert "lower lr, a higher ratio" in normalize(_STRING_JOIN_RE.sub("", code))


def test_config_recipes_load(tmp_path: Path) -> None:
    from agentrl.config import load_config

    loaded = 0
    for page in PAGES:
        for info, body in fenced_blocks(page.read_text()):
            title = block_title(info)
            if block_language(info) == "yaml" and title and title.endswith(".yaml"):
                assert isinstance(yaml.safe_load(body), dict)
                path = tmp_path / Path(title).name
                path.write_text(body)
                load_config(path)  # raises ConfigError naming the bad key
                loaded += 1
    assert loaded >= 2


def test_documented_commands_use_real_options() -> None:
    from test_cli_docs import _command_lines, _commands, _split_path

    commands = _commands()
    for page in PAGES:
        for info, body in fenced_blocks(page.read_text()):
            if block_language(info) != "bash":
                continue
            for argv in _command_lines(body):
                path, rest = _split_path(argv, commands)
                known = {o for p in commands[path].params for o in (*p.opts, *p.secondary_opts)}
                used = {w.split("=")[0] for w in rest if w.startswith("--") or w == "-c"}
                assert used <= known, f"{page.name}: `agentrl {' '.join(argv)}`: {used - known}"
