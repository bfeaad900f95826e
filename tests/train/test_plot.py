"""`agentrl plot` on any run dir: one stopped in its warm start, one with both phases, and
reward and success drawn even when they never change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.train.plot import plot_runs

runner = CliRunner()


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _drawn(result) -> str:
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


@pytest.fixture(scope="module")
def warm_started(tmp_path_factory) -> Path:
    """A run folder as `agentrl train` leaves it when stopped right after its warm start's
    SFT: the real warm start of Sokoban (8 solver episodes, tiny model), no RL step."""
    from agentrl.cli.train import resolve_train_config
    from agentrl.cli.warm_start import warm_start

    run = tmp_path_factory.mktemp("plot") / "run"
    overrides = [
        "warm_start.num_episodes=8",
        "warm_start.batch_size=4",
        "warm_start.max_actions_per_turn=1",
        "env.max_turns=10",
        "trainer.num_threads=1",
    ]
    cfg = resolve_train_config(
        config_file=None, overrides=overrides, preset=None, flags={"env.name": "sokoban"}
    )
    assert cfg.warm_start.expert == "solver" and cfg.model.name == "tiny"
    warm_start(cfg, run, progress=False)
    assert not (run / "metrics.jsonl").exists()
    return run


def test_a_run_stopped_in_its_warm_start_plots(warm_started: Path, tmp_path: Path) -> None:
    out = tmp_path / "curves.png"
    text = _drawn(runner.invoke(app, ["plot", str(warm_started), "--out", str(out)]))
    assert f"wrote {out} (reward/mean, success_rate, warm_start/sft/nll" in text
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_both_phases_are_drawn(warm_started: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write(run / "warm_start" / "metrics.jsonl", [json.loads(line) for line in
           (warm_started / "warm_start" / "metrics.jsonl").read_text().splitlines()])  # fmt: skip
    _write(run / "metrics.jsonl", [{"step": i, "reward/mean": 0.1 * i} for i in (1, 2)])
    drawn = plot_runs([run], tmp_path / "both.png")
    assert drawn[0] == "reward/mean" and "warm_start/sft/nll" in drawn
    assert "success_rate" not in drawn  # logged by no run: no empty panel once RL has begun
    with pytest.raises(FileNotFoundError, match="warm_start"):
        plot_runs([tmp_path / "nothing"], tmp_path / "x.png")


def test_flat_reward_and_success_are_drawn(tmp_path: Path) -> None:
    """A run that fails at every step: its reward and success never change, and are drawn;
    a flat metric of another kind is still left out."""
    run = tmp_path / "failing"
    rows = [
        {"step": i, "reward/mean": -0.1, "success_rate": 0.0, "actor/kl": 0.0,
         "actor/entropy": 3.0 - 0.1 * i}
        for i in range(1, 5)
    ]  # fmt: skip
    _write(run / "metrics.jsonl", rows)
    out = tmp_path / "c.png"
    text = _drawn(runner.invoke(app, ["plot", str(run), "--out", str(out)]))
    assert f"wrote {out} (reward/mean, success_rate, actor/entropy)" in text
    search = tmp_path / "search"
    _write(search / "metrics.jsonl", [
        {"step": i, "search/greedy_solved_frac": 0.0, "search/solved_frac": 1.0} for i in (1, 2)
    ])  # fmt: skip
    assert plot_runs([search], out) == ["search/greedy_solved_frac", "search/solved_frac"]


def test_warm_start_keys_can_be_asked_for(warm_started: Path, tmp_path: Path) -> None:
    out = tmp_path / "one.png"
    args = ["plot", str(warm_started), "--out", str(out), "-m", "warm_start/sft/token_accuracy"]
    assert f"wrote {out} (warm_start/sft/token_accuracy)" in _drawn(runner.invoke(app, args))
