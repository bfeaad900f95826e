"""benchmarks/sokoban_critic_fit.py: its rows and values are the turns' states and returns."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agentrl.trajectory.types import Sample, Trajectory, Turn


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("sokoban_critic_fit")


def _traj(rewards: list[float]) -> Trajectory:
    samples = [
        Sample([1, 2, 10 + k, 7, 8], [0, 0, 0, 1, 1], [0.0] * 5, [-1, -1, -1, k, k])
        for k in range(len(rewards))
    ]
    turns = [Turn(2, "Up", "stop", 0, reward=r) for r in rewards]
    return Trajectory(samples, turns, "sokoban", 0, 0, per_turn_samples=True)


def test_each_turn_is_its_prompt_and_its_return_to_go(bench) -> None:
    rows = bench.turn_rows([_traj([-0.1, -0.1, 10.9])])
    assert [r[0] for r in rows] == [[1, 2, 10], [1, 2, 11], [1, 2, 12]]
    assert [r[1] for r in rows] == pytest.approx([10.7, 10.8, 10.9])


def test_prompt_values_read_each_prompts_last_token_whatever_the_padding(bench) -> None:
    def critic(input_ids, attention_mask):  # the value of a position is its token id
        return SimpleNamespace(logits=input_ids.float().unsqueeze(-1))

    values = bench.prompt_values(critic, [[1, 2, 3], [4], [5, 6]])
    assert values.tolist() == [3.0, 4.0, 6.0]
    rows = [([1, 2, 3], 3.0), ([4], 4.0), ([5, 6], 6.0)]
    assert bench.explained(critic, rows, 0.0, 1.0) == pytest.approx(1.0)
    assert bench.explained(critic, rows, 1.0, 1.0) == pytest.approx(1.0)  # a shift: still all
