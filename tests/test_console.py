"""Output of the commands: log lines above live bars, plain lines off a terminal, no
third-party bars or DeepSpeed warning, and the first line names the output folder."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import agentrl._console as agentrl_console
from agentrl.sft._progress import sft_progress


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )


def test_log_lines_print_above_live_bars(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(agentrl_console, "_CONSOLE", Console(file=out, force_terminal=True))
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    agentrl_console.setup_logging()
    with sft_progress() as (on_episode, _):
        on_episode(1, 10)
        logging.getLogger("agentrl.test").info("a log line")
        on_episode(5, 10)
    lines = out.getvalue().splitlines()
    logged = [line for line in lines if "a log line" in line]
    assert len(logged) == 1 and "expert episodes" not in logged[0]
    assert any("expert episodes" in line for line in lines)


def test_log_lines_are_plain_off_a_terminal() -> None:
    done = _run(
        "import logging\n"
        "from agentrl._console import setup_logging\n"
        "setup_logging()\n"
        "logging.getLogger('agentrl').info('word ' * 40 + 'end')\n"
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.splitlines()  # one line, not wrapped at 80 columns
    assert line.endswith(" INFO " + "word " * 40 + "end")


def test_saving_a_model_does_not_import_deepspeed(tmp_path: Path) -> None:
    done = _run(
        "import sys\n"
        "from agentrl.config import TrainConfig\n"
        "from agentrl.rollout.models import load_model, resolve_model\n"
        "from agentrl.train.backends import backend_for_run\n"
        "model = load_model(str(resolve_model('tiny')), dtype='float32')\n"
        "backend = backend_for_run(TrainConfig(), model, lr=1e-3, num_optimizer_steps=1)\n"
        f"backend.save({str(tmp_path)!r})\n"
        "print('deepspeed' in sys.modules)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]
    assert (tmp_path / "model" / "model.safetensors").is_file()


def test_sft_output_names_its_folder_first_without_third_party_noise(tmp_path: Path) -> None:
    out = tmp_path / "sft"
    done = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "sft", "--episodes", "4", "--epochs", "1"]
        + ["--out", str(out)],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert f"output folder {out}" in done.stderr.splitlines()[0]
    for noise in ("Loading weights", "Writing model shards", "Setting accelerator", "it/s]"):
        assert noise not in done.stderr
    assert "expert episodes 4/4" in done.stderr  # a log line, not a bar, off a terminal


def test_progress_without_bars_logs_each_phase_end(caplog: pytest.LogCaptureFixture) -> None:
    from agentrl.sft._progress import sft_log_progress

    log = logging.getLogger("agentrl.test")
    on_episode, on_step = sft_log_progress(log, every_s=3600)
    with caplog.at_level(logging.INFO):
        for done in range(1, 5):
            on_episode(done, 4)
        for step in range(1, 4):
            on_step(step, 3, {"sft/nll": 0.5})
    assert caplog.messages == ["expert episodes 4/4", "sft step 3/3 nll 0.500"]


def test_vllm_logs_only_warnings_unless_the_user_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_LOGGING_LEVEL", raising=False)
    agentrl_console.quiet_third_party()
    assert os.environ["VLLM_LOGGING_LEVEL"] == "WARNING"  # engine processes inherit it
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "INFO")
    agentrl_console.quiet_third_party()
    assert os.environ["VLLM_LOGGING_LEVEL"] == "INFO"


def test_log_lines_on_an_80_column_terminal_keep_paths_whole() -> None:
    import io
    import logging

    from rich.console import Console

    from agentrl import _console

    buffer = io.StringIO()
    saved = _console._CONSOLE
    _console._CONSOLE = Console(file=buffer, force_terminal=True, width=80, color_system=None)
    try:
        handler = _console.log_handler()
        path = "/home/someone/projects/agentrl/runs/sokoban-tiny-20261207-101500/checkpoints"
        record = logging.LogRecord("agentrl.train", logging.INFO, "", 0, "done: %s", (path,), None)
        handler.emit(record)
    finally:
        _console._CONSOLE = saved
    (line,) = buffer.getvalue().splitlines()
    assert line.endswith(f"INFO done: {path}")


def test_hints_name_the_command_as_it_was_run(monkeypatch, tmp_path) -> None:
    from agentrl._console import command_name

    script = tmp_path / ".venv" / "bin" / "agentrl"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", [".venv/bin/agentrl", "train"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert command_name() == ".venv/bin/agentrl"
    monkeypatch.setenv("PATH", str(script.parent))  # the shell finds this one as `agentrl`
    assert command_name() == "agentrl"
    monkeypatch.setattr("sys.argv", ["/x/agentrl/cli/__main__.py"])  # python -m agentrl.cli
    assert command_name() == "agentrl"
