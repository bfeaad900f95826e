"""A safe arithmetic evaluator (never `eval`): integers, + - * /, parentheses, exact fractions.

>>> evaluate("(6 - 2) * 3 / 4")
(Fraction(3, 1), [6, 2, 3, 4])
>>> evaluate("__import__('os')")
Traceback (most recent call last):
...
envs_contrib._expr.ExprError: only integers, + - * / and parentheses are allowed
"""

from __future__ import annotations

import ast
from fractions import Fraction

MAX_EXPR_CHARS = 200
"""Longer expressions are rejected before parsing."""
MAX_NUMBER = 10**6
"""Literals above this are rejected (keeps products small and fast)."""

_OPS = {ast.Add, ast.Sub, ast.Mult, ast.Div}


class ExprError(ValueError):
    """The expression is not a plain arithmetic expression, or cannot be evaluated."""


def evaluate(expr: str) -> tuple[Fraction, list[int]]:
    """The exact value of `expr` and the integer literals it uses, in order.

    Allowed: non-negative integer literals, binary `+ - * /`, unary minus, parentheses.
    Anything else (names, calls, floats, powers, attribute access) raises `ExprError`, as do
    division by zero and expressions longer than `MAX_EXPR_CHARS`.
    """
    if len(expr) > MAX_EXPR_CHARS:
        raise ExprError(f"expression longer than {MAX_EXPR_CHARS} characters")
    text = expr.strip().replace("×", "*").replace("÷", "/")
    if not text:
        raise ExprError("empty expression")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError) as e:
        raise ExprError(
            f"not an arithmetic expression: {e.msg if hasattr(e, 'msg') else e}"
        ) from None
    numbers: list[int] = []
    return _eval(tree.body, numbers), numbers


def _eval(node: ast.AST, numbers: list[int]) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        if node.value > MAX_NUMBER:
            raise ExprError(f"number {node.value} is too large")
        numbers.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, numbers)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left, numbers), _eval(node.right, numbers)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if right == 0:
            raise ExprError("division by zero")
        return left / right
    raise ExprError("only integers, + - * / and parentheses are allowed")
