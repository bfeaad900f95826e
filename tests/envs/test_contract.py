"""The checks of one `reset`/`step` return: what breaks the contract, and how to fix it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentrl.envs.contract import (
    EnvContractError,
    checked_reset,
    checked_step,
    env_label,
    observation_problem,
    reset_problem,
    step_problem,
)
from agentrl.trajectory.testing import ScriptedEnv

GOOD_STEP = ("ok", 1.0, True, False, {"success": True})


@pytest.mark.parametrize(
    "obs", ["text", "", [{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}]]
)
def test_text_and_messages_are_observations(obs) -> None:
    assert observation_problem(obs) is None


@pytest.mark.parametrize(
    ("obs", "returned"),
    [
        (7, "an observation that is an int: 7"),
        (None, "an observation that is a NoneType: None"),
        ([], "an observation that is a list of 0 values: []"),
        ([{"role": "assistant", "content": "x"}], "an observation with the message"),
        ([{"role": "user", "content": 3}], "an observation with the message"),
        (["text"], "an observation with the message 'text'"),
    ],
)
def test_other_observations_are_problems(obs, returned) -> None:
    problem = observation_problem(obs)
    assert problem is not None and problem.returned.startswith(returned)
    assert problem.fix.startswith("return a str, or a list of")


@pytest.mark.parametrize(
    ("out", "returned", "fix"),
    [
        (("ok", 0.0, True, {}), "a tuple of 4 values: ('ok', 0.0, True, {})", "return 5 values"),
        ("ok", "a str: 'ok'", "return 5 values"),
        (None, "a NoneType: None", "return 5 values"),
        (("ok", float("nan"), True, False, {}), "the reward nan (float)", "a finite Python float"),
        (("ok", "1", True, False, {}), "the reward '1' (str)", "a finite Python float"),
        (("ok", True, True, False, {}), "the reward True (bool)", "a finite Python float"),
        (("ok", 0.0, "yes", False, {}), "terminated='yes', truncated=False", "Python bools"),
        (("ok", 0.0, True, False, None), "an info that is a NoneType: None", "a dict"),
        ((7, 0.0, True, False, {}), "an observation that is an int: 7", "return a str"),
    ],
)
def test_step_problems_in_a_run(out, returned, fix) -> None:
    problem = step_problem(out, strict=False)
    assert problem is not None
    assert problem.returned == returned and fix in problem.fix


def test_a_run_takes_what_it_can_use_check_env_does_not() -> None:
    usable = [
        ("ok", 1, True, False, {}),  # int reward, no info["success"]
        ("ok", np.float32(0.5), np.bool_(True), np.bool_(False), {"success": True}),
        ["ok", 0.0, False, False, {}],  # a list
    ]
    for out in usable:
        assert step_problem(out, strict=False) is None
        assert step_problem(out) is not None  # check_env asks for more
    assert step_problem(GOOD_STEP) is None


def test_check_env_asks_for_success_at_the_end() -> None:
    problem = step_problem(("ok", 0.0, True, False, {}))
    assert problem is not None and "info['success']" in problem.fix


@pytest.mark.parametrize(
    ("out", "returned"),
    [
        ("text", "a str: 'text'"),
        (("text", {}, 1), "a tuple of 3 values"),
        (("text", None), "an info that is a NoneType: None"),
        ((7, {}), "an observation that is an int: 7"),
    ],
)
def test_reset_problems(out, returned) -> None:
    problem = reset_problem(out)
    assert problem is not None and problem.returned.startswith(returned)
    assert reset_problem(("text", {})) is None


def test_long_returns_are_cut_short() -> None:
    problem = step_problem(("x" * 1000, 0.0, True, {}))
    assert problem is not None and len(problem.returned) < 130 and problem.returned.endswith("...")


def test_checked_calls_return_good_values_and_raise_naming_env_and_call() -> None:
    assert checked_step(GOOD_STEP, env="m.E", call="step") == GOOD_STEP
    assert checked_reset(("text", {}), env="m.E", call="reset") == ("text", {})
    with pytest.raises(EnvContractError) as caught:
        checked_step(("ok", math.inf, True, False, {}), env="m.E", call="step (turn 2)")
    e = caught.value
    assert (e.env, e.call, e.returned) == ("m.E", "step (turn 2)", "the reward inf (float)")
    assert str(e) == f"m.E: step (turn 2) returned the reward inf (float); fix: {e.fix}"
    with pytest.raises(EnvContractError, match="reset returned a str"):
        checked_reset("text", env="m.E", call="reset")


def test_env_label_is_module_and_class() -> None:
    assert env_label(ScriptedEnv()) == "agentrl.trajectory.testing.ScriptedEnv"


def test_a_run_takes_a_list_from_reset_check_env_does_not() -> None:
    assert reset_problem(["text", {}], strict=False) is None
    assert reset_problem(["text", {}]) is not None
