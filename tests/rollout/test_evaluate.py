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
