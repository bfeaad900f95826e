"""The rollout checks every `reset`/`step` return: the first that breaks the `TokenEnv`
contract stops it with an `EnvContractError`; an exception inside the env stays one
`env_error` episode; what the loop can use (numpy bools, int rewards) passes."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.envs.contract import EnvContractError
from agentrl.rollout.config import RolloutConfig
from agentrl.rollout.loop import rollout
from agentrl.rollout.testing import ScriptedEngine
from agentrl.trajectory.testing import ScriptedEnv, build_tokenizer, plain_vocab_ids
from agentrl.trajectory.types import Status

TOK = build_tokenizer("chatml")


class FourTupleOnStep2(ScriptedEnv):
    """The old Gym API from its second step on: 4 values."""

    def step(self, action: str):
        observation, reward, terminated, truncated, info = super().step(action)
        if self.steps >= 2:
            return observation, reward, terminated or truncated, info
        return observation, reward, terminated, truncated, info


class IntObservation(ScriptedEnv):
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 7, {}


class NumpyTypes(ScriptedEnv):
    """numpy bools and an int reward: not what `check_env` asks for, but usable."""

    def step(self, action: str):
        observation, reward, terminated, truncated, info = super().step(action)
        return observation, int(reward), np.bool_(terminated), np.bool_(truncated), info


def _rollout(env, **cfg):
    engine = ScriptedEngine(plain_vocab_ids(TOK), seed=0)
    return rollout(engine, env, TOK, [0, 1], group_size=2, cfg=RolloutConfig(**cfg))


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_a_wrong_arity_stops_the_rollout_naming_env_call_and_fix(executor) -> None:
    env = functools.partial(FourTupleOnStep2, min_steps=3, max_steps=3)
    with pytest.raises(EnvContractError) as caught:
        _rollout(env, env_executor=executor, num_env_workers=2)
    e = caught.value
    assert e.env == f"{__name__}.FourTupleOnStep2"
    assert e.call.startswith("step (turn 2 of the episode with seed")
    assert e.returned.startswith("a tuple of 4 values")
    assert e.fix == "return 5 values: (observation, reward, terminated, truncated, info)"


def test_an_int_observation_from_reset_stops_the_rollout() -> None:
    with pytest.raises(EnvContractError, match=r"reset\(seed=[01]\) returned an observation"):
        _rollout(IntObservation)


def test_an_exception_inside_the_env_stays_an_env_error_episode() -> None:
    result = _rollout(functools.partial(ScriptedEnv, fail_on_step=1))
    assert {t.status for t in result.trajectories} == {Status.ENV_ERROR}


def test_numpy_bools_and_int_rewards_pass() -> None:
    result = _rollout(NumpyTypes)
    assert {t.status for t in result.trajectories} <= {Status.OK, Status.TRUNCATED}
    assert all(isinstance(turn.terminated, bool) for t in result.trajectories for turn in t.turns)


@pytest.mark.parametrize("command", ["rollout", "eval"])
def test_rollout_and_eval_print_the_error_in_a_few_lines(command, tmp_path) -> None:
    env = f"{__name__}:IntObservation"
    args = {
        "rollout": ["rollout", "--out", str(tmp_path), "--no-progress"],
        "eval": ["eval", "--episodes", "2"],
    }[command]
    res = CliRunner().invoke(app, [*args, "--env", env, "--model", "tiny", "--max-new-tokens", "4"])
    assert res.exit_code == 1, res.output
    assert f"env {__name__}.IntObservation broke the TokenEnv contract" in res.output
    assert f"agentrl envs check {env}" in res.output and "fix: return a str" in res.output
    assert "resume" not in res.output
