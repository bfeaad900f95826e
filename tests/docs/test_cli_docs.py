"""docs/cli.md documents every `agentrl` command, and its examples run.

The command tree is read from the typer app, so a new command without a section in
docs/cli.md fails here. Examples run top to bottom in one scratch folder; `bash norun`
examples (Docker) are only checked against the command's options, and `bash needs=bwrap`
examples run in a test of their own that skips without bubblewrap.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
from _docs_helpers import DOCS, block_language, fenced_blocks, normalize, venv_env
from typer.testing import CliRunner

from agentrl.cli import app

CLI_DOC = DOCS / "cli.md"


def _commands() -> dict[str, Any]:
    """Every leaf command of the app by its path (`envs check`), hidden ones excluded."""
    found: dict[str, Any] = {}

    def walk(command: Any, path: list[str]) -> None:
        if hasattr(command, "commands"):  # a group (typer vendors its own click)
            for name, sub in command.commands.items():
                if not sub.hidden:
                    walk(sub, [*path, name])
        else:
            found[" ".join(path)] = command

    walk(typer.main.get_command(app), [])
    return found


def _sections() -> dict[str, str]:
    """`## agentrl <path>` sections of docs/cli.md: path -> section text."""
    parts = re.split(r"^## agentrl (.+)$", CLI_DOC.read_text(), flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def _command_lines(script: str) -> list[list[str]]:
    """The `agentrl ...` invocations of a shell block, as argv lists (after any pipe)."""
    lines = []
    for line in script.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars="|;&")
        lexer.whitespace_split = True
        words: list[str] = []
        for token in [*lexer, "|"]:
            if token.strip("|;&"):
                words.append(token)
                continue
            if words[:1] == ["agentrl"]:
                lines.append(words[1:])
            words = []
    return lines


def _split_path(argv: list[str], commands: dict[str, Any]) -> tuple[str, list[str]]:
    for n in (2, 1):
        if " ".join(argv[:n]) in commands:
            return " ".join(argv[:n]), argv[n:]
    raise AssertionError(f"`agentrl {' '.join(argv)}` is not a command of the app")


def test_commands_are_discovered() -> None:
    commands = _commands()
    assert {"train", "envs list", "envs check", "play"} <= set(commands)


def test_every_command_has_a_section_with_an_example() -> None:
    sections = _sections()
    missing = [path for path in _commands() if path not in sections]
    assert not missing, f"docs/cli.md has no `## agentrl <command>` section for: {missing}"
    for path, command in _commands().items():
        body = sections[path]
        summary = (command.help or "").strip().splitlines()[0].rstrip(".")
        assert normalize(summary) in normalize(body), (
            f"the section of `agentrl {path}` should quote its help line {summary!r}"
        )
        examples = [
            argv
            for info, code in fenced_blocks(body)
            if block_language(info) == "bash"
            for argv in _command_lines(code)
        ]
        assert any(" ".join(argv).startswith(path) for argv in examples), (
            f"the section of `agentrl {path}` has no example that runs it"
        )
    unknown = set(sections) - set(_commands())
    assert not unknown, f"docs/cli.md documents commands the app does not have: {unknown}"


def test_example_options_exist() -> None:
    """Every `--option` an example uses is an option of that command (norun ones too)."""
    commands = _commands()
    for info, code in fenced_blocks(CLI_DOC.read_text()):
        if block_language(info) != "bash":
            continue
        for argv in _command_lines(code):
            path, rest = _split_path(argv, commands)
            known = {o for p in commands[path].params for o in (*p.opts, *p.secondary_opts)}
            used = {w.split("=")[0] for w in rest if w.startswith("-")}
            assert used <= known, f"`agentrl {' '.join(argv)}`: unknown options {used - known}"


def test_every_command_help_works() -> None:
    runner = CliRunner()
    for path in _commands():
        result = runner.invoke(app, [*path.split(), "--help"])
        assert result.exit_code == 0, f"agentrl {path} --help:\n{result.output}"


def _examples(needs: str | None) -> list[str]:
    """The runnable bash examples of docs/cli.md that need the system part `needs` (a
    `needs=bwrap` tag on the fence), or, with None, those that need no optional part."""
    found = []
    for info, code in fenced_blocks(CLI_DOC.read_text()):
        words = info.split()
        tags = {w.split("=", 1)[1] for w in words if w.startswith("needs=")}
        if block_language(info) == "bash" and "norun" not in words:
            if (needs in tags) if needs else not tags:
                found.append(code)
    return found


def _run_example(code: str, cwd: Path) -> None:
    proc = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", code],
        cwd=cwd,
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"`{code.strip()}` failed:\n{(proc.stdout + proc.stderr)[-3000:]}"


def test_bwrap_examples_run(tmp_path: Path, require_bwrap: None) -> None:
    examples = _examples("bwrap")
    assert any("sandbox check --backend local" in code for code in examples)
    for code in examples:
        _run_example(code, tmp_path)


@pytest.mark.slow
def test_examples_run(tmp_path: Path) -> None:
    ran = 0
    for code in _examples(None):
        _run_example(code, tmp_path)
        ran += 1
    assert ran >= 10
    assert (tmp_path / "curves.png").is_file() and (tmp_path / "episode.html").is_file()
    assert (tmp_path / "exported-model" / "config.json").is_file()
