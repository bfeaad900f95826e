"""Evaluation metrics: the success rate's standard error and the optimal-length breakdown."""

from __future__ import annotations

import math

import pytest

from agentrl.rollout.evaluate import evaluation_metrics, success_stats
from agentrl.trajectory.types import Status, Trajectory, Turn


def _episode(success: bool, optimal_len: int | None = None, reward: float = 0.0) -> Trajectory:
    turn = Turn(num_sampled=1, action_text="a", finish_reason="stop", weight_version=0)
    turn.reward, turn.info = reward, {"success": success}
    info = {} if optimal_len is None else {"optimal_len": optimal_len}
    return Trajectory([], [turn], "env", seed=0, group_id=0, reset_info=info)


def test_success_se_is_the_binomial_standard_error() -> None:
    assert success_stats([True, False, False, False]) == (0.25, math.sqrt(0.25 * 0.75 / 4))
    assert success_stats([True] * 5) == (1.0, 0.0)
    p, se = success_stats([])
    assert math.isnan(p) and math.isnan(se)


def test_breakdown_by_optimal_solution_length() -> None:
    # short (<= 6 moves): 3 episodes, 2 solved; long (>= 7): 2 episodes, 0 solved
    trajs = [
        _episode(True, 2, reward=1.0),
        _episode(True, 6, reward=1.0),
        _episode(False, 5),
        _episode(False, 7),
        _episode(False, 12),
    ]
    m = evaluation_metrics(trajs)
    assert m["success_rate"] == pytest.approx(0.4)
    assert m["success_se"] == pytest.approx(math.sqrt(0.4 * 0.6 / 5))
    assert m["reward_mean"] == pytest.approx(0.4) and m["num_episodes"] == 5
    assert m["num_episodes_short"] == 3 and m["num_episodes_long"] == 2
    assert m["success_short"] == pytest.approx(2 / 3)
    assert m["success_short_se"] == pytest.approx(math.sqrt(2 / 3 * 1 / 3 / 3))
    assert m["success_long"] == 0.0 and m["success_long_se"] == 0.0


def test_breakdown_needs_optimal_len_on_every_episode() -> None:
    assert "success_short" not in evaluation_metrics([_episode(True), _episode(False)])
    assert "num_episodes_short" not in evaluation_metrics([_episode(True, 3), _episode(False)])
    only_short = evaluation_metrics([_episode(True, 3), _episode(False, 4)])
    assert only_short["num_episodes_long"] == 0 and "success_long" not in only_short
    assert all(math.isfinite(v) for v in only_short.values())


def test_error_frac_counts_untrainable_episodes() -> None:
    broken = _episode(False)
    broken.status = Status.ENV_ERROR
    assert evaluation_metrics([broken, _episode(True)])["error_frac"] == 0.5


def _tool_episode(task: str, success: bool, *calls: tuple[int, int]) -> Trajectory:
    turns = [Turn(1, "a", "stop", 0, info={"tool_calls": n, "tool_errors": e}) for n, e in calls]
    turns.append(
        Turn(1, "a", "stop", 0, info={"success": success, "tool_calls": 0, "tool_errors": 0})
    )
    return Trajectory([], turns, "tool-python", seed=0, group_id=0, reset_info={"task": task})


def test_tool_use_and_breakdown_by_task() -> None:
    from agentrl.cli.eval import result_lines

    trajs = [
        _tool_episode("product", True, (1, 0)),
        _tool_episode("product", False),  # answered at once
        _tool_episode("count", True, (2, 1), (1, 0)),
    ]
    m = evaluation_metrics(trajs)
    assert m["tool_call_rate"] == pytest.approx(2 / 3)
    assert m["tool_ok_rate"] == pytest.approx(3 / 4)  # 4 calls, 1 error
    assert (m["num_episodes_task_product"], m["success_task_product"]) == (2, 0.5)
    assert (m["num_episodes_task_count"], m["success_task_count"]) == (1, 1.0)
    text = result_lines(m, env="tool-python", temperature=0.5, seed_offset=10)
    assert (
        "tool use: a tool call in 66.7% of episodes; 75.0% of the calls ran without error" in text
    )
    assert "by task: count 1.000 ± 0.000 (1 episodes); product 0.500 ± 0.354 (2 episodes)" in text
    uncounted = _episode(True)  # an env that counts calls but not their errors
    uncounted.turns[0].info["tool_calls"] = 1
    m = evaluation_metrics([uncounted])
    assert m["tool_call_rate"] == 1.0 and "tool_ok_rate" not in m
    assert (
        "tool use: a tool call in 100.0% of episodes\n"
        in result_lines(m, env="math", temperature=0.5, seed_offset=0) + "\n"
    )
    no_call = evaluation_metrics([_tool_episode("product", False)])
    assert math.isnan(no_call["tool_ok_rate"])  # no call: no share (printed without one)
    text = result_lines(no_call, env="tool-python", temperature=0.5, seed_offset=0)
    assert "tool use: a tool call in 0.0% of episodes\n" in text and "nan" not in text
    plain = evaluation_metrics([_episode(True), _episode(False)])
    assert not any(k.startswith(("tool_", "success_task_")) for k in plain)


def test_an_env_that_offers_no_tool_prints_no_tool_use() -> None:
    """tool-python's no-tool control offers no tool: its evaluation says nothing of tool use
    rather than "a tool call in 0.0% of episodes"."""
    from agentrl.cli.eval import result_lines
    from agentrl.envs.tool.env import PythonToolEnv

    env = PythonToolEnv(tasks=["product"], tool=False)
    _, reset_info = env.reset(seed=0)
    *_, info = env.step("<answer>1</answer>")
    turn = Turn(1, "<answer>1</answer>", "stop", 0, info=info)
    control = Trajectory([], [turn], "tool-python", seed=0, group_id=0, reset_info=reset_info)
    m = evaluation_metrics([control])
    assert not any(k.startswith("tool_") for k in m)
    text = result_lines(m, env="tool-python", temperature=0.5, seed_offset=0)
    assert "tool use" not in text and "by task: product" in text
