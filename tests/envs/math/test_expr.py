"""The safe expression evaluator: exact values, number-use checks, limits, hostile text."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrl.envs.math.expr import (
    ExprError,
    ExprLimits,
    check_numbers_used,
    evaluate,
    parse_expression,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 / 2", Fraction(7, 2)),
        ("10 - 4 - 3", 3),
        ("24 / 4 / 3", 2),
        ("((((5))))", 5),
        ("6 × 7", 42),
        ("84 ÷ 2", 42),
        ("(3+5)*2 = 16", 16),
        ("1 - 2", -1),
    ],
)
def test_values_are_exact(text: str, value: Fraction | int) -> None:
    assert evaluate(text) == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("__import__('os').system('x')", "not allowed"),
        ("2 ** 10", "unexpected"),
        ("1 / 0", "division by zero"),
        ("1 / (2 - 2)", "division by zero"),
        ("-3 + 5", "unary minus"),
        ("2.5 * 2", "decimal"),
        ("(1 + 2", "missing ')'"),
        ("1 +", "ends early"),
        ("1 2", "unexpected"),
        ("", "empty"),
        ("(" * 40 + "1" + ")" * 40, "nesting"),
        ("1" * 400, "longer than"),
        ("1234567890123 + 1", "digits"),
        ("+".join(["1"] * 40), "more than"),
        ("1e9", "not allowed"),
        ("\x00", "not allowed"),
    ],
)
def test_invalid_expressions_raise_expr_error(text: str, reason: str) -> None:
    with pytest.raises(ExprError, match=re.escape(reason)):
        evaluate(text)


def test_limits_allow_unary_minus_and_decimals() -> None:
    limits = ExprLimits(allow_unary_minus=True, allow_decimals=True)
    assert evaluate("-(2.5 * -2)", limits) == 5


def test_intermediate_size_is_bounded() -> None:
    limits = ExprLimits(max_bits=64, max_numbers=64, max_chars=1000)
    with pytest.raises(ExprError, match="bits"):
        evaluate("*".join(["999999"] * 8), limits)


def test_numbers_in_order_and_use_check() -> None:
    expr = parse_expression("(25 - 5) * 4 / 2")
    assert expr.numbers == (25, 5, 4, 2)
    check_numbers_used(expr.numbers, [2, 4, 5, 25, 100])
    with pytest.raises(ExprError, match="4 is used 1 time but given 0"):
        check_numbers_used([4], [5])
    with pytest.raises(ExprError, match="not all numbers used: 100"):
        check_numbers_used(expr.numbers, [2, 4, 5, 25, 100], exactly=True)
    check_numbers_used([5, 5], [5, 5, 3])


@given(st.text(max_size=60))
def test_arbitrary_text_never_raises_anything_but_expr_error(text: str) -> None:
    try:
        evaluate(text)
    except ExprError:
        pass


@given(st.lists(st.integers(1, 10**6), min_size=1, max_size=8))
def test_sums_match_python(numbers: list[int]) -> None:
    assert evaluate(" + ".join(map(str, numbers))) == sum(numbers)
