"""An env that breaks the `TokenEnv` contract stops `agentrl train` in a few lines, naming the
fix and `agentrl envs check`; the steps before it stay, and the run resumes once it is fixed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _train(run_dir: Path, env: str, *extra: str, fixed: bool = False):
    env_vars = {
        **os.environ,
        "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "OMP_NUM_THREADS": "1",
    }
    if fixed:
        env_vars["TRAINER_ENVS_FIXED"] = "1"
    args = [
        "train", "--env", env, "--model", "tiny", "--run-dir", str(run_dir),
        "--set", "trainer.num_groups=2", "--set", "rollout.group_size=2",
        "--set", "rollout.sampling.max_new_tokens=8", "--set", "checkpoint.every=1",
        "--set", "logging.progress=false",
    ]  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "agentrl.cli", *args, *extra],
        capture_output=True,
        text=True,
        timeout=600,
        env=env_vars,
    )


@pytest.mark.parametrize(
    ("env", "returned", "fix"),
    [
        ("FourTuple", "returned a tuple of 4 values", "return 5 values: (observation, reward"),
        ("IntObservation", "returned an observation that is an int: 7", "return a str"),
    ],
)
def test_a_broken_env_stops_train_in_a_few_lines(tmp_path, env, returned, fix) -> None:
    result = _train(tmp_path / "run", f"trainer_envs:{env}", "--steps", "1")
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    error = result.stderr[result.stderr.index("error:") :]
    assert len(error.splitlines()) <= 6, error
    assert f"env trainer_envs.{env} broke the TokenEnv contract" in error
    assert returned in error and f"fix: {fix}" in error
    assert f"agentrl envs check trainer_envs:{env}" in error


def test_steps_before_the_broken_one_stay_and_the_run_resumes(tmp_path) -> None:
    run_dir = tmp_path / "run"
    in_process = ("--set", "rollout.env_executor=thread")  # the env counts seeds per process
    result = _train(run_dir, "trainer_envs:BreaksOnThirdSeed", "--steps", "2", *in_process)
    assert result.returncode == 1, result.stderr[-3000:]
    assert f"then resume with: agentrl train --resume {run_dir}" in result.stderr
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1]
    assert (run_dir / "checkpoints" / "step-000001").is_dir()

    result = _train(
        run_dir, "trainer_envs:BreaksOnThirdSeed", "--resume", str(run_dir), *in_process, fixed=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
