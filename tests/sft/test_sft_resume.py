"""SFT checkpoints: a run killed (kill -9) or crashed mid-way and resumed ends exactly as an
uninterrupted one, and reuses the expert episodes it had written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.runtime.metrics import read_metrics
from agentrl.sft.checkpoint import CHECKPOINT_DIR, STATE_FILE, check_sft_checkpoint
from agentrl.sft.config import SFTConfig
from agentrl.sft.train import RESULT_FILE, TRAJECTORIES_FILE, run_sft

ARGS = ("--env", "sokoban", "--model", "tiny", "--episodes", "32", "--epochs", "2")
SETS = ("batch_size=8", "history_turns=0", "max_actions_per_turn=1", "checkpoint_every_s=0")


def _sft(out: Path, *extra: str) -> list[str]:
    sets = [x for s in SETS for x in ("--set", s)]
    return [sys.executable, "-m", "agentrl.cli", "sft", *ARGS, *sets, "--out", str(out), *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _checkpoint_step(out: Path) -> int:
    try:
        return json.loads((out / CHECKPOINT_DIR / STATE_FILE).read_text())["step"]
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


def _nlls(out: Path) -> list[float]:
    return [r["sft/nll"] for r in read_metrics(out)]


@pytest.mark.slow
def test_kill9_then_resume_matches_uninterrupted_sft(tmp_path: Path) -> None:
    full, killed = tmp_path / "full", tmp_path / "killed"
    reference = subprocess.Popen(
        _sft(full), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    victim = subprocess.Popen(
        _sft(killed), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 120
    while _checkpoint_step(killed) < 5:
        assert victim.poll() is None, "sft exited before its fifth checkpoint"
        assert time.monotonic() < deadline, "no checkpoint after 120 s"
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL
    assert not (killed / RESULT_FILE).exists()
    episodes_written = (killed / TRAJECTORIES_FILE).stat().st_mtime_ns

    resumed = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "sft", "--resume", str(killed)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "reusing the expert episodes" in resumed.stderr
    assert "resumed SFT from" in resumed.stderr
    assert (killed / TRAJECTORIES_FILE).stat().st_mtime_ns == episodes_written
    _, err = reference.communicate(timeout=120)
    assert reference.returncode == 0, err[-3000:]

    want = json.loads((full / RESULT_FILE).read_text())
    got = json.loads((killed / RESULT_FILE).read_text())
    for key in ("initial_nll", "final_nll", "final_token_accuracy", "num_optimizer_steps"):
        assert got[key] == want[key], key
    assert _nlls(killed) == _nlls(full)  # every step, none twice
    assert not (killed / CHECKPOINT_DIR).exists()  # removed once the result is written


class _Crash(Exception):
    pass


def _crash_at(step: int):
    def on_step(done: int, total: int, metrics: dict[str, float]) -> None:
        if done == step:
            raise _Crash

    return on_step


def _small(**kwargs: object) -> SFTConfig:
    """8 episodes, one sample per turn: 6 steps of 4 rows an epoch."""
    fields = {"model": "tiny", "num_episodes": 8, "batch_size": 4, "checkpoint_every_s": 0}
    return SFTConfig(history_turns=0, max_actions_per_turn=1, **(fields | kwargs))


@pytest.mark.parametrize("crash_step", [7, 10])  # checkpoint at the end of epoch 1, mid epoch 2
def test_crash_then_rerun_continues_from_the_checkpoint(tmp_path: Path, crash_step: int) -> None:
    cfg = _small(num_epochs=3)
    reference = run_sft(cfg, tmp_path / "full")
    assert reference.num_optimizer_steps == 3 * 6
    out = tmp_path / "crashed"
    with pytest.raises(_Crash):
        run_sft(cfg, out, on_step=_crash_at(crash_step))
    assert _checkpoint_step(out) == crash_step - 1  # the crashed step left no checkpoint

    steps: list[int] = []
    result = run_sft(cfg, out, on_step=lambda s, n, m: steps.append(s))
    assert steps == list(range(crash_step, 19))
    assert result.final_nll == reference.final_nll
    assert result.initial_nll == reference.initial_nll
    assert _nlls(out) == _nlls(tmp_path / "full")


def test_resume_with_other_settings_is_refused(tmp_path: Path) -> None:
    cfg = _small(num_epochs=2)
    with pytest.raises(_Crash):
        run_sft(cfg, tmp_path, on_step=_crash_at(3))
    written = (tmp_path / TRAJECTORIES_FILE).stat().st_mtime_ns
    with pytest.raises(ValueError, match=r"batch_size: 4 -> 2"):
        run_sft(cfg.model_copy(update={"batch_size": 2}), tmp_path)
    with pytest.raises(ValueError, match=r"num_episodes: 8 -> 9"):  # refused before playing
        run_sft(cfg.model_copy(update={"num_episodes": 9}), tmp_path)
    assert (tmp_path / TRAJECTORIES_FILE).stat().st_mtime_ns == written


def test_episodes_are_played_again_when_their_settings_changed(tmp_path: Path) -> None:
    cfg = SFTConfig(model="tiny", num_episodes=4, num_epochs=1, batch_size=4)
    run_sft(cfg, tmp_path / "a")
    first = (tmp_path / "a" / TRAJECTORIES_FILE).stat().st_mtime_ns
    (tmp_path / "a" / RESULT_FILE).unlink()
    same = run_sft(cfg, tmp_path / "a")  # same settings: the file is read back
    assert (tmp_path / "a" / TRAJECTORIES_FILE).stat().st_mtime_ns == first
    assert same.num_trajectories == 4 and same.expert_success_rate == 1.0
    run_sft(cfg.model_copy(update={"num_episodes": 6}), tmp_path / "b")
    (tmp_path / "b" / RESULT_FILE).unlink()
    other = run_sft(cfg.model_copy(update={"num_episodes": 5}), tmp_path / "b")
    assert other.num_trajectories == 5


def test_a_resume_may_change_the_thread_count(tmp_path: Path) -> None:
    """`num_threads` does not touch the optimizer steps (a run slowed by shared cores is
    resumed with `--set trainer.num_threads=1`); other settings are still compared."""
    (tmp_path / STATE_FILE).write_text(
        json.dumps({"step": 3, "config": {"num_threads": 0, "batch_size": 4}})
    )
    assert check_sft_checkpoint(tmp_path, {"num_threads": 1, "batch_size": 4}).step == 3
    with pytest.raises(ValueError, match=r"batch_size: 4 -> 2"):
        check_sft_checkpoint(tmp_path, {"num_threads": 0, "batch_size": 2})
