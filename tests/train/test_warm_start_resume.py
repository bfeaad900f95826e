"""`agentrl train --resume` on a run that died in its warm start: the expert episodes are
reused, the SFT continues from its checkpoint and ends as an uninterrupted one, then RL runs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

import agentrl.sft.train as sft_train
from agentrl.cli import app
from agentrl.cli.warm_start import WARM_START_DIR, sft_config
from agentrl.config import load_config
from agentrl.sft.checkpoint import CHECKPOINT_DIR
from agentrl.sft.train import RESULT_FILE, TRAJECTORIES_FILE, run_sft

runner = CliRunner()
SETS = {
    "warm_start.expert": "solver",
    "warm_start.num_episodes": 8,
    "warm_start.num_epochs": 2,
    "warm_start.batch_size": 4,
    "warm_start.max_actions_per_turn": 1,
    "warm_start.checkpoint_every_s": 0,
    "env.max_turns": 10,
    "logging.progress": "false",
    "trainer.num_threads": 1,
    "trainer.num_groups": 1,  # the one RL step: small
    "rollout.group_size": 2,
    "eval.every": 0,
}


def test_train_resume_continues_a_killed_warm_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    args = ["train", "--env", "sokoban", "--model", "tiny", "--steps", "1"]
    args += [x for k, v in SETS.items() for x in ("--set", f"{k}={v}")]
    real_step, calls = sft_train._sft_step, []

    def dies_at_step_10(*a, **kw):  # mid second epoch (7 steps an epoch)
        calls.append(1)
        if len(calls) == 10:
            raise KeyboardInterrupt
        return real_step(*a, **kw)

    monkeypatch.setattr(sft_train, "_sft_step", dies_at_step_10)
    killed = runner.invoke(app, [*args, "--run-dir", str(run_dir)])
    assert killed.exit_code == 130, killed.output
    ws = run_dir / WARM_START_DIR
    assert (ws / CHECKPOINT_DIR).is_dir() and not (ws / RESULT_FILE).exists()
    written = (ws / TRAJECTORIES_FILE).stat().st_mtime_ns
    monkeypatch.setattr(sft_train, "_sft_step", real_step)

    with caplog.at_level(logging.INFO):
        resumed = runner.invoke(app, ["train", "--resume", str(run_dir)])
    assert resumed.exit_code == 0, resumed.output
    assert "reusing the expert episodes" in caplog.text
    assert "resumed SFT from" in caplog.text and "(step 9 of 14)" in caplog.text
    assert (ws / TRAJECTORIES_FILE).stat().st_mtime_ns == written
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1]

    cfg = load_config(run_dir / "config.yaml")
    reference = run_sft(sft_config(cfg), tmp_path / "reference")
    got = json.loads((ws / RESULT_FILE).read_text())
    assert got["num_optimizer_steps"] == reference.num_optimizer_steps == 14
    assert got["final_nll"] == reference.final_nll
    assert got["initial_nll"] == reference.initial_nll
