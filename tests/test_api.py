"""The Python API (`agentrl.load_config`, `agentrl.train`, `agentrl.evaluate`): the CLI's own
path, light to import, and the same errors. docs/guide/python-api.md runs it end to end
(tests/docs/test_python_api_guide.py)."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest

import agentrl
from agentrl.cli.train import resolve_train_config
from agentrl.envs.guess_number import GuessNumber
from agentrl.envs.registry import _REGISTRY, env_name, make


def test_import_and_load_config_leave_torch_unloaded() -> None:
    code = (
        "import sys, agentrl\n"
        "print('torch' in sys.modules)\n"
        "agentrl.load_config(env='sokoban', overrides={'trainer.num_steps': 2})\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_load_config_resolves_as_agentrl_train_does(tmp_path: Path) -> None:
    file = tmp_path / "run.yaml"
    file.write_text("rollout:\n  group_size: 2\n")
    got = agentrl.load_config(
        env="sokoban",
        overrides={"trainer.num_steps": 3, "env.kwargs": {"dim_room": [6, 6]}},
        preset="grpo",
        config_file=file,
        model="tiny",
    )
    want = resolve_train_config(
        config_file=file,
        overrides=["trainer.num_steps=3", "env.kwargs={dim_room: [6, 6]}"],
        preset="grpo",
        flags={"env.name": "sokoban", "model.name": "tiny"},
    )
    assert got == want
    assert (got.algo.name, got.rollout.group_size, got.trainer.num_steps) == ("grpo", 2, 3)
    assert agentrl.load_config("sokoban").warm_start.expert is not None  # the env's recipe


def test_load_config_errors_name_the_key() -> None:
    with pytest.raises(agentrl.ConfigError, match="did you mean trainer.num_steps"):
        agentrl.load_config(overrides={"trainer.num_step": 2})


def test_env_objects_get_a_name_make_builds() -> None:
    assert env_name(GuessNumber) == "agentrl.envs.guess_number:GuessNumber"

    class Local(GuessNumber):
        pass

    factory = functools.partial(GuessNumber, high=10)
    try:
        assert env_name(Local) == "Local" and isinstance(make("Local"), Local)
        assert env_name(Local) == "Local"  # the same class: the same name
        name = env_name(factory)
        assert name == "GuessNumber" and make(name).high == 10
        assert env_name(lambda: GuessNumber()) == "env"
        with pytest.raises(TypeError, match="TokenEnv subclass or a factory"):
            env_name(3)  # type: ignore[arg-type]
    finally:
        for name in ("Local", "GuessNumber", "env"):
            _REGISTRY.pop(name, None)


def test_train_is_the_callable_package() -> None:
    import agentrl.train.trainer

    assert callable(agentrl.train) and agentrl.train.trainer.Trainer


def test_train_refuses_before_writing(tmp_path: Path) -> None:
    cfg = agentrl.load_config(env="guess-number", model="tiny")
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(agentrl.RunError, match="already holds a run"):
        agentrl.train(cfg, run_dir=tmp_path)
    with pytest.raises(agentrl.RunError, match="unknown env 'guess-numbr'"):
        agentrl.train(cfg, env="guess-numbr", run_dir=tmp_path / "new")
    with pytest.raises(agentrl.RunError, match="needs the run_dir"):
        agentrl.train(resume=True)
    assert not (tmp_path / "new").exists() and not (tmp_path / "config.yaml").exists()


def test_evaluate_a_folder_without_a_model(tmp_path: Path) -> None:
    with pytest.raises(agentrl.RunError, match=str(tmp_path)):
        agentrl.evaluate(tmp_path)
