"""Executes docs/guide/custom-env.md: the tutorial's code and commands must keep working.

Blocks run in order in a fresh project folder: a block with `title="path"` is written to that
file, `pycon` blocks run as doctests, `bash` blocks run through bash (`bash norun` blocks are
checked instead: `pip install -e .` becomes an install into a temporary folder, `agentrl
train` gets `--print-config`), and a `text` block right after a command lists lines its
output must contain.
"""

from __future__ import annotations

import doctest
import importlib
import io
import shlex
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from _docs_helpers import (
    DOCS,
    ROOT,
    block_language,
    block_title,
    fenced_blocks,
    missing_output_lines,
    venv_env,
)

TUTORIAL = DOCS / "guide" / "custom-env.md"


def _run_doctest(body: str, name: str, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    registry_module = importlib.import_module(
        "agentrl.envs.registry"
    )  # the module, not the function

    registry_module.registry()  # load the built-ins first: restoring an unloaded (empty)
    # snapshot after the doctest loaded them would leave the registry empty but "loaded"
    saved_registry = dict(registry_module._REGISTRY)
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    test = doctest.DocTestParser().get_doctest(body, {}, name, str(TUTORIAL), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = io.StringIO()
    try:
        with redirect_stdout(report):
            runner.run(test, out=report.write)
    finally:
        registry_module._REGISTRY.clear()
        registry_module._REGISTRY.update(saved_registry)
        for module in [m for m in sys.modules if m == "bulls_cows" or m.startswith("bulls_cows.")]:
            del sys.modules[module]
    assert runner.failures == 0, f"{name} of {TUTORIAL.name} failed:\n{report.getvalue()}"


def _bash(script: str, project: Path, pythonpath: list[str]) -> str:
    """Run `script` in `project` with this tree's agentrl (`ROOT` on the path: a worktree's
    code, not whichever checkout the venv installed)."""
    proc = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=project,
        env=venv_env([*pythonpath, str(ROOT)]),
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"`{script.strip()}` exited {proc.returncode}:\n{output[-3000:]}"
    return output


def _install(project: Path, site: Path) -> None:
    """`pip install -e .`, made harmless: the package goes into `site`, not the shared venv."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--no-build-isolation", "--target", str(site), str(project)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _check_norun(script: str, project: Path, site: Path, pythonpath: list[str]) -> bool:
    """Handle a `bash norun` block; True when it installed the package."""
    commands = [c for c in script.replace("\\\n", " ").splitlines() if c.strip()]
    installed = False
    for command in commands:
        words = shlex.split(command)
        if words[:3] == ["pip", "install", "-e"]:
            _install(project, site)
            installed = True
        elif words[:2] == ["agentrl", "train"]:
            _bash(shlex.join([*words, "--print-config"]), project, pythonpath)
        else:
            raise AssertionError(f"no check for the norun command {command!r}; add one")
    return installed


def _check_listing(shown: str, script: str, project: Path) -> None:
    """When `script` ends in `ls FOLDER`, `shown` must list exactly what is in FOLDER (a
    folder the run writes, say `tensorboard`, missing from the page fails)."""
    words = shlex.split(script.strip().splitlines()[-1])
    if words[:1] != ["ls"]:
        return
    listed = sorted(p.name for p in (project / words[-1]).iterdir())
    assert shown.split() == listed, (
        f"the page lists {shown.split()}; `{shlex.join(words)}`: {listed}"
    )


@pytest.mark.slow
def test_tutorial_runs_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "bulls-cows"
    project.mkdir()
    site = tmp_path / "site"
    pythonpath: list[str] = []
    last_output: str | None = None
    last_script = ""
    seen = {"file": 0, "pycon": 0, "bash": 0, "output": 0, "norun": 0}
    for index, (info, body) in enumerate(fenced_blocks(TUTORIAL.read_text())):
        language, title = block_language(info), block_title(info)
        output, last_output = last_output, None
        if title is not None:
            path = project / title
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
            seen["file"] += 1
        elif language == "pycon":
            _run_doctest(body, f"block {index}", project, monkeypatch)
            seen["pycon"] += 1
        elif language == "bash" and "norun" in info.split():
            if _check_norun(body, project, site, pythonpath):
                # as after `pip install -e .`: the entry point from the install, the package's
                # files as the page writes them later (section 7 adds bulls_cows/expert.py)
                pythonpath = [str(project), str(site)]
            seen["norun"] += 1
        elif language == "bash":
            last_output = _bash(body, project, pythonpath)
            last_script = body
            seen["bash"] += 1
        elif language == "text" and output is not None:
            missing = missing_output_lines(body, output)
            assert not missing, f"block {index}: output lines not printed: {missing}\n{output}"
            _check_listing(body, last_script, project)
            seen["output"] += 1
    assert seen == {"file": 5, "pycon": 3, "bash": 5, "output": 4, "norun": 3}, seen
    assert (project / "runs" / "bulls-cows-tiny" / "metrics.jsonl").is_file()
    assert (project / "runs" / "bulls-cows-sft" / "expert_trajectories.parquet").is_file()


def test_tutorial_covers_the_contract() -> None:
    text = TUTORIAL.read_text()
    for needle in (
        "class BullsAndCows(TokenEnv)",
        "parse_answer(action)",
        "self.np_random",
        "super().reset(seed=seed)",
        '"success"',
        "agentrl envs check",
        "agentrl play",
        '[project.entry-points."agentrl.envs"]',
        "agentrl train --env bulls-cows --model tiny",
        "register_expert(",
        "agentrl sft --env bulls-cows --expert first-consistent",
        "--set warm_start.expert=first-consistent",
    ):
        assert needle in text, f"the tutorial no longer shows {needle!r}"


def test_output_check_catches_changes() -> None:
    out = "│ determinism   │ ok   │ 3 episodes │\nall checks passed\n"
    assert missing_output_lines("│ determinism │ ok │ 3 episodes │\n┏━━┓", out) == []
    assert missing_output_lines("│ determinism │ failed │", out) == ["│ determinism │ failed │"]
