"""Procedural problem generators that need no download: arithmetic, linear equations, Countdown.

Each generator takes the env's `np_random` and a difficulty level (1 = easiest) and returns a
`Problem`; the same generator state always gives the same problem.

>>> import numpy as np
>>> p = arithmetic(np.random.default_rng(0), 1)
>>> str(evaluate(p.question.split(": ", 1)[1].rstrip("?").strip(), LIMITS)) == p.answer
True
>>> c = countdown(np.random.default_rng(0), 2)
>>> evaluate(c.answer, LIMITS) == c.target
True
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np

from agentrl.envs.math.data import Problem
from agentrl.envs.math.expr import ExprLimits, evaluate

__all__ = ["GENERATORS", "MAX_DIFFICULTY", "arithmetic", "countdown", "linear"]

MAX_DIFFICULTY = 5
"""Levels run 1..MAX_DIFFICULTY; higher values are clamped."""

LIMITS = ExprLimits(allow_unary_minus=True, max_chars=500)
"""Limits for evaluating generated expressions (which may contain negative numbers)."""

# level: (operands min, operands max, largest literal, operators, negatives allowed)
_ARITH_LEVELS = {
    1: (2, 2, 9, "+-", False),
    2: (2, 3, 20, "+-*", False),
    3: (3, 4, 50, "+-*", True),
    4: (3, 4, 99, "+-*/", True),
    5: (4, 6, 999, "+-*/", True),
}


def _level(difficulty: int) -> int:
    return min(max(int(difficulty), 1), MAX_DIFFICULTY)


def _fmt(value: Fraction) -> str:
    return (
        str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    )


def _literal(rng: np.random.Generator, largest: int, negatives: bool) -> str:
    n = int(rng.integers(1, largest + 1))
    return f"({-n})" if negatives and rng.random() < 0.25 else str(n)


def _expression(rng: np.random.Generator, leaves: list[str], ops: str) -> str:
    """Join `leaves` with random operators into a random binary tree (fully parenthesized
    below the root, so the reading is unambiguous)."""
    parts = list(leaves)
    while len(parts) > 1:
        i = int(rng.integers(len(parts) - 1))
        op = ops[int(rng.integers(len(ops)))]
        joined = f"{parts[i]} {op} {parts[i + 1]}"
        parts[i : i + 2] = [f"({joined})" if len(parts) > 2 else joined]
    return parts[0]


def arithmetic(rng: np.random.Generator, difficulty: int = 1) -> Problem:
    """Evaluate an expression; higher levels add operands, larger numbers, negatives, division
    (answers may be fractions)."""
    level = _level(difficulty)
    lo, hi, largest, ops, negatives = _ARITH_LEVELS[level]
    while True:
        num_operands = int(rng.integers(lo, hi + 1))
        leaves = [_literal(rng, largest, negatives) for _ in range(num_operands)]
        text = _expression(rng, leaves, ops)
        try:
            value = evaluate(text, LIMITS)
        except ValueError:  # division by zero: draw again
            continue
        if value.denominator <= 50:
            break
    question = f"Compute: {text} ?"
    note = " Give the exact answer (a fraction if needed)." if "/" in ops else ""
    return Problem(question + note, _fmt(value), source=f"arithmetic level {level}")


def linear(rng: np.random.Generator, difficulty: int = 1) -> Problem:
    """Solve a linear equation for x: `x + b = d` at level 1 up to `a x + b = c x + d` with a
    fractional solution at level 5."""
    level = _level(difficulty)
    largest = (9, 12, 20, 30, 50)[level - 1]

    def coef() -> int:
        n = int(rng.integers(1, largest + 1))
        return -n if level >= 3 and rng.random() < 0.3 else n

    while True:
        a = 1 if level == 1 else coef()
        c = coef() if level >= 3 else 0
        if a == c:
            continue
        if level <= 4:
            x = Fraction(int(rng.integers(-largest, largest + 1)))
        else:
            x = Fraction(int(rng.integers(-largest, largest + 1)), int(rng.integers(2, 10)))
        b = int(rng.integers(-largest, largest + 1))
        if b == 0 and c == 0:
            continue  # `a x = d` with no constant is too easy to be worth a level
        d_frac = (a - c) * x + b
        if d_frac.denominator != 1:
            continue  # keep every printed coefficient an integer
        d = int(d_frac)
        break

    def side(k: int, const: int) -> str:
        parts = []
        if k:
            parts.append("x" if k == 1 else "-x" if k == -1 else f"{k}x")
        if const or not parts:
            parts.append(
                f"{const:+d}".replace("+", "+ ").replace("-", "- ") if parts else str(const)
            )
        return " ".join(parts)

    equation = f"{side(a, b)} = {side(c, d)}"
    return Problem(f"Solve for x: {equation}", _fmt(x), source=f"linear level {level}")


# level: (count of numbers, largest number)
_COUNTDOWN_LEVELS = {1: (3, 20), 2: (4, 50), 3: (4, 100), 4: (5, 100), 5: (6, 100)}


def countdown(rng: np.random.Generator, difficulty: int = 1) -> Problem:
    """Reach a target with the given numbers, each used at most once, with + - * / and
    parentheses. The target comes from a random expression over all numbers with positive
    integer intermediate results, so every problem is solvable."""
    level = _level(difficulty)
    count, largest = _COUNTDOWN_LEVELS[level]
    while True:
        numbers = [int(n) for n in rng.integers(1, largest + 1, size=count)]
        items = [(Fraction(n), str(n)) for n in numbers]
        order = rng.permutation(count)
        value, text = items[order[0]]
        ok = True
        for k in order[1:]:
            other, other_text = items[k]
            op = "+-*/"[int(rng.integers(4))]
            if op == "-" and value < other:
                value, text, other, other_text = other, other_text, value, text
            if op == "/" and (other == 0 or (value / other).denominator != 1):
                op = "+"
            value = {
                "+": value + other,
                "-": value - other,
                "*": value * other,
                "/": value / other,
            }[op]
            text = f"({text} {op} {other_text})"
            if value <= 0 or value > 10_000:
                ok = False
                break
        if ok and value.denominator == 1 and value not in numbers:
            break
    answer = text[1:-1] if text.startswith("(") else text
    target = int(value)
    question = (
        f"Using the numbers {numbers}, make {target}. Use + - * / and parentheses; "
        "each number at most once."
    )
    return Problem(
        question,
        answer,
        kind="countdown",
        numbers=tuple(numbers),
        target=target,
        source=f"countdown level {level}",
    )


GENERATORS: dict[str, Callable[[np.random.Generator, int], Problem]] = {
    "arithmetic": arithmetic,
    "linear": linear,
    "countdown": countdown,
}
"""Generators by the name `generator=` takes."""
