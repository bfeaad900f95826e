"""docs/quickstart.md: its run-folder commands run, and every file and folder name it shows
is in the folders they write (and the run folder holds nothing the page leaves out).

The page's `bash` blocks run in order in a scratch folder (`bash norun` blocks are the
install and the long runs); `agentrl train` gets `--set logging.progress=false`. The run is
the page's own: 1 step of the `tiny` model.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from _docs_helpers import DOCS, block_language, fenced_blocks, venv_env

QUICKSTART = DOCS / "quickstart.md"
RUN = "runs/first"
_MENTIONED_RE = re.compile(r"\b((?:runs|rollouts)/first(?:/[\w.-]+)*/?)")


def shown_tree(page: str) -> list[str]:
    """The paths of the page's `runs/first/` tree, relative to the run folder (a folder ends
    in `/`). A line's indent (2 spaces a level) puts it under the line above it.

    >>> shown_tree("```text\\nruns/first/\\n  a.yaml   note\\n  ckpt/\\n    policy/model/  x\\n```\\n")
    ['a.yaml', 'ckpt/', 'ckpt/policy/model/']
    """
    block = next(body for _, body in fenced_blocks(page) if body.startswith(f"{RUN}/\n"))
    paths: list[str] = []
    parents: list[str] = []
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        level = (len(line) - len(line.lstrip())) // 2
        name = line.split()[0]
        parents = [*parents[: level - 1], name.rstrip("/")]
        paths.append("/".join(parents) + ("/" if name.endswith("/") else ""))
    return paths


def _exists(path: Path, shown: str) -> bool:
    return path.is_dir() if shown.endswith("/") else path.exists()


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scratch folder after the page's commands ran in it."""
    folder = tmp_path_factory.mktemp("quickstart")
    for info, body in fenced_blocks(QUICKSTART.read_text()):
        if block_language(info) != "bash" or "norun" in info.split():
            continue
        for line in body.replace("\\\n", " ").splitlines():
            words = shlex.split(line)
            if not words:
                continue
            assert words[0] == "agentrl", f"no way to run {line!r} here; add one"
            if words[1] == "train":
                words += ["--set", "logging.progress=false"]
            done = subprocess.run(
                words, cwd=folder, env=venv_env(), capture_output=True, text=True, timeout=600
            )
            assert done.returncode == 0, f"`{line}` exited {done.returncode}:\n{done.stderr}"
    return folder


@pytest.mark.slow
def test_every_name_the_page_shows_exists(ran: Path) -> None:
    page = QUICKSTART.read_text()
    tree = shown_tree(page)
    assert {"config.yaml", "tensorboard/", "trajectories/step_000001.jsonl"} <= set(tree)
    missing = [p for p in tree if not _exists(ran / RUN / p, p)]
    assert not missing, f"the run-directory tree shows {missing}, which {RUN} does not hold"
    mentioned = set(_MENTIONED_RE.findall(page))
    assert f"{RUN}/curves.png" in mentioned
    missing = [p for p in sorted(mentioned) if not _exists(ran / p, p)]
    assert not missing, f"the page names {missing}, which its commands did not write"


@pytest.mark.slow
def test_the_tree_leaves_out_nothing_the_run_writes(ran: Path) -> None:
    """Every entry of the run folder and of its checkpoint is on the page."""
    page = QUICKSTART.read_text()
    paths = [p.rstrip("/") for p in shown_tree(page)]
    paths += [m.rstrip("/").removeprefix(f"{RUN}/") for m in _MENTIONED_RE.findall(page)]
    shown = {"/".join(p.split("/")[:n]) for p in paths for n in range(1, p.count("/") + 2)}
    run = ran / RUN
    checkpoint = run / "checkpoints" / "step-000001"
    written = [*run.iterdir(), *checkpoint.iterdir(), *(checkpoint / "policy").iterdir()]
    left_out = [str(p.relative_to(run)) for p in written if str(p.relative_to(run)) not in shown]
    assert not left_out, f"{RUN} holds {left_out}, which the page does not show"
