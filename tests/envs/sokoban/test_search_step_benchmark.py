"""benchmarks/search_step.py: the search finds the same solutions whichever way it copies
Sokoban envs, on a trained policy."""

from __future__ import annotations

from pathlib import Path

MODEL = Path(__file__).resolve().parents[3] / "results/sokoban-rl/warm_start"


def test_clone_and_deepcopy_search_alike(load_benchmark) -> None:
    from agentrl.envs.base import TokenEnv
    from agentrl.envs.sokoban.env import SokobanEnv

    own = SokobanEnv.clone
    times = load_benchmark("search_step").compare(str(MODEL), rooms=48, rounds=1)
    assert [len(t) for t in times.values()] == [1, 1]
    assert SokobanEnv.clone is own and SokobanEnv.clone is not TokenEnv.clone  # restored
