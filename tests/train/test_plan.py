"""The first screen of `agentrl train`: the plan, one turn limit, the resume hint on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agentrl.cli.plan import PhaseClock, plan_lines, time_lines, turn_limit
from agentrl.cli.train import resolve_train_config

HERE = Path(__file__).resolve().parent


def _cfg(env: str, *overrides: str):
    return resolve_train_config(
        config_file=None, overrides=list(overrides), preset=None, flags={"env.name": env}
    )


def test_default_sokoban_plan_names_its_phases_sizes_and_resume(tmp_path) -> None:
    text = "\n".join(plan_lines(_cfg("sokoban"), tmp_path / "run", resume=False))
    assert "plan (3 phases):" in text
    assert "1. expert episodes: 65,536 from the solver expert on sokoban" in text
    assert "2. warm start (SFT): 1 epoch(s) over them, 64 samples (one per turn) a step" in text
    assert "3. RL: 72 steps of expert-iteration" in text
    assert "from the warm start" in text
    assert "turns per episode: 10 (rollout.max_turns (sokoban allows 10))" in text
    assert f"continue with: agentrl train --resume {tmp_path / 'run'}" in text
    assert "Ctrl-C or SIGTERM" in text


def test_an_env_plays_its_own_turn_limit_everywhere() -> None:
    # guess-number allows 8 turns; train used to cap every env at 3 (cpu.yaml)
    cfg = _cfg("guess-number")
    assert cfg.rollout.max_turns is None  # so eval, rollout and play use the env's 8 too
    assert turn_limit(cfg) == (8, "the env's own max_turns")
    text = "\n".join(plan_lines(cfg, Path("r"), resume=False))
    assert "plan (1 phase):" in text
    assert "turns per episode: 8 (the env's own max_turns)" in text
    capped = _cfg("guess-number", "rollout.max_turns=3")
    assert turn_limit(capped) == (3, "rollout.max_turns (guess-number allows 8)")


def test_phase_clock_estimates_once_after_its_first_steps() -> None:
    said: list[str] = []
    times = iter([0.0, 5.0, 10.0, 30.0, 40.0])
    clock = PhaseClock("SFT", min_steps=3, min_s=20, emit=said.append, clock=lambda: next(times))
    for step in range(1, 6):
        clock.step(step, 101)
    assert len(said) == 1
    assert said[0].startswith("SFT: about 16 min left (10.0 s a step over 3 steps")


def test_sigterm_prints_the_resume_hint(tmp_path) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrl.cli", "train", "--env", "trainer_envs:VowelCount"]
        + ["--model", "tiny", "--steps", "200", "--run-dir", str(run_dir)]
        + ["--set", "logging.progress=false", "--set", "rollout.sampling.max_new_tokens=8"],
        env={
            **os.environ,
            "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "OMP_NUM_THREADS": "1",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not (run_dir / "metrics.jsonl").is_file():
        assert proc.poll() is None, proc.stderr.read()[-3000:] if proc.stderr else ""
        assert time.monotonic() < deadline, "no step after 240 s"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert f"stopped (SIGTERM); resume with: agentrl train --resume {run_dir}" in err
    assert "plan (1 phase):" in err


def _pace(**kw):
    from agentrl.sft.train import SFTPace

    return SFTPace(**({"expert_s": 180.0, "num_steps": 4000, "s_per_step": 0.75} | kw))


def test_the_first_screen_estimates_the_total_from_a_short_measurement() -> None:
    from agentrl.cli.train import env_rl_pace

    cfg = _cfg("sokoban")
    measured = []
    lines = time_lines(
        cfg, resume=False, measure=lambda c: measured.append(c) or _pace(measured_s=6.0)
    )
    assert measured == [cfg]
    ratio = env_rl_pace("sokoban")
    assert ratio is not None and 5 < ratio < 100
    rl_min = round(72 * ratio * 0.75 / 60)
    total = 3 + 50 + rl_min
    assert lines == [
        f"time: about {total // 60} h {total % 60:02d} min in all (expert episodes 3 min, "
        f"warm start 50 min, RL {rl_min} min), measured in 6 s on this machine; RL at the "
        f"recipe's pace (a step takes as long as {ratio:g} SFT steps)"
    ]


def test_without_the_recipes_rl_the_estimate_stops_before_rl() -> None:
    # 8 times the rooms a step: the recipe's pace no longer holds, so RL is timed as it runs
    cfg = _cfg("sokoban", "trainer.num_groups=8192")
    lines = time_lines(cfg, resume=False, measure=lambda c: _pace(measured_s=6.0))
    assert lines == [
        "time: about 53 min before RL (expert episodes 3 min, warm start 50 min), measured in "
        "6 s on this machine; RL (72 steps) is timed once it starts"
    ]


def test_runs_without_a_warm_start_or_resumed_time_their_first_steps() -> None:
    def never(c):
        raise AssertionError("nothing to measure ahead")

    cfg = _cfg("guess-number")
    assert time_lines(cfg, resume=False, measure=never) == [
        f"time: RL ({cfg.trainer.num_steps} steps) is timed once it starts"
    ]
    one = _cfg("guess-number", "trainer.num_steps=1")
    assert time_lines(one, resume=False, measure=never) == [
        "time: RL (1 step) is timed once it starts"
    ]
    assert time_lines(_cfg("sokoban"), resume=True, measure=never) == [
        "time: each phase is timed once it starts"
    ]
