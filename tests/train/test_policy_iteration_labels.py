"""benchmarks/policy_iteration_labels.py: it labels states as the trainer does and scores the
labels against the Sokoban solver."""

from __future__ import annotations

from pathlib import Path

START = Path(__file__).resolve().parents[2] / "results/sokoban-rl/weak-start-45/start"


def test_labels_of_a_trained_policy_are_mostly_shortest_path_moves(load_benchmark) -> None:
    bench = load_benchmark("policy_iteration_labels")
    table = bench.label_table(
        str(START), 1, ["trainer.num_groups=16", "trainer.branch_states=32", "seed=3"]
    )
    assert table["total"] == sum(n for _, n in table["rows"]) > 0
    solvable = {key: n for key, n in table["rows"] if key[0] == "solvable"}
    optimal = sum(n for key, n in solvable.items() if key[2] == "optimal")
    assert optimal >= 0.5 * sum(solvable.values()) > 0  # measured: all of them (notes)
    # a shortest-path move is always feasible; a lost state has no feasible answer
    assert all(key[1] == "feasible" for key in solvable if key[2] == "optimal")
    assert all(key[1] == "not feasible" for key, _ in table["rows"] if key[0] == "lost")
