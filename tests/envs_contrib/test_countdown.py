"""Countdown: every generated puzzle is solvable; RAGEN scoring; never evals model text."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.envs import check_env
from agentrl.envs.math.expr import check_numbers_used, parse_expression
from envs_contrib.countdown import CountdownEnv, generate_puzzle


def test_generated_solutions_reach_the_target_with_every_number() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        numbers, target, solution = generate_puzzle(rng, num_numbers=4)
        expr = parse_expression(solution)
        assert expr.value == target and 1 <= target <= 100
        check_numbers_used(expr.numbers, numbers, exactly=True)


@pytest.mark.parametrize(
    ("answer", "reward", "success"),
    [
        ("<answer>(6 - 2) * 3</answer>", 1.0, True),
        ("<answer>3 * (6 - 2) = 12</answer>", 1.0, True),
        ("<answer>6 + 2 + 3</answer>", 0.1, False),  # well formed, wrong value
        ("<answer>6 * 2</answer>", 0.0, False),  # 3 unused
        ("<answer>6 * 2 * 3 / 3</answer>", 0.0, False),  # 3 used twice
        ("<answer>__import__('os').system('true')</answer>", 0.0, False),
        ("(6 - 2) * 3", 0.0, False),  # no answer tag
    ],
)
def test_scoring(answer: str, reward: float, success: bool) -> None:
    env = CountdownEnv(numbers=[6, 2, 3], target=12)
    obs, _ = env.reset(seed=0)
    assert obs == "Target: 12. Numbers: [6, 2, 3]."
    _, r, terminated, truncated, info = env.step(answer)
    assert (r, info["success"]) == (reward, success)
    assert terminated and not truncated  # one attempt: the answer ends the task


def test_last_of_several_attempts_truncates() -> None:
    env = CountdownEnv(numbers=[6, 2, 3], target=12, max_turns=2)
    env.reset(seed=0)
    env.step("<answer>6 + 2 + 3</answer>")
    _, _, terminated, truncated, info = env.step("<answer>6 + 2 + 3</answer>")
    assert (terminated, truncated, info["success"]) == (False, True, False)


def test_retries_give_feedback_until_turns_run_out() -> None:
    env = CountdownEnv(numbers=[6, 2, 3], target=12, max_turns=2)
    env.reset(seed=0)
    obs, _, terminated, truncated, _ = env.step("<answer>6 + 2 + 3</answer>")
    assert "equals 11" in obs and "Try again" in obs and not (terminated or truncated)
    assert env.step("<answer>6 * 2 * (3 / 3)</answer>")[1] == 0.0


def test_check_env() -> None:
    assert check_env(CountdownEnv).ok
