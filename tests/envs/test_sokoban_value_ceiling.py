"""benchmarks/sokoban_value_ceiling.py: its value estimates score what they should."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ceiling(load_benchmark):
    return load_benchmark("sokoban_value_ceiling")


def _row(seed: int, state: str, to_go: float, left: int = 5) -> dict:
    return {"seed": seed, "state": (state, left), "left": left, "to_go": to_go}


def test_leave_one_out_state_mean_skips_single_visits_and_never_sees_its_own_return(
    ceiling,
) -> None:
    rows = [_row(0, "a", 10.0), _row(1, "a", 10.0), _row(2, "b", 0.0), _row(3, "b", 0.0)]
    rows.append(_row(4, "c", 5.0))  # visited once: not scored
    assert ceiling.state_mean_loo(rows) == (1.0, 0.8)
    # two visits with different returns: each is predicted by the other, so worse than a
    # constant (the leave-one-out estimate is held out)
    ev, share = ceiling.state_mean_loo([_row(0, "a", 10.0), _row(1, "a", 0.0)])
    assert share == 1.0 and ev < 0


def test_held_out_table_is_fit_on_even_seeds_and_scored_on_odd_ones(ceiling) -> None:
    # returns follow actions left exactly: a table keyed by it explains all of them
    rows = [_row(s, str(s), 2.0 * left, left) for s in range(8) for left in (1, 3)]
    assert ceiling.held_out_table(rows, lambda r: r["left"]) == pytest.approx(1.0)
    # a key that does not tell the odd seeds' returns apart predicts a constant there
    rows = [_row(s, str(s), 0.0 if s % 2 == 0 else float(s), 1) for s in range(8)]
    assert ceiling.held_out_table(rows, lambda r: r["left"]) == pytest.approx(0.0)
