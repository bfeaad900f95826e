"""A calculator tool that evaluates arithmetic safely (an AST walk, never `eval`).

>>> calculate(expression="2 * (3 + 4) ** 2 - sqrt(16)")
'94.0'
"""

from __future__ import annotations

import ast
import math
import operator

from agentrl.envs.tool.tools import tool

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {
    "sqrt": math.sqrt,
    "abs": abs,
    "round": round,
    "floor": math.floor,
    "ceil": math.ceil,
    "log": math.log,
    "exp": math.exp,
    "min": min,
    "max": max,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}
MAX_EXPRESSION_CHARS = 500
MAX_MAGNITUDE = 10**100


def _eval(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 1000:
            raise ValueError("exponent too large")
        result = _BINARY[type(node.op)](left, right)
        if isinstance(result, int | float) and abs(result) > MAX_MAGNITUDE:
            raise ValueError("result too large")
        return result
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        return _FUNCTIONS[node.func.id](*[_eval(a) for a in node.args])
    raise ValueError(f"unsupported expression element: {type(node).__name__}")


def evaluate(expression: str) -> float | int:
    """The value of an arithmetic expression; ValueError for anything else."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"not an arithmetic expression: {e.msg}") from None
    try:
        return _eval(tree)
    except (ZeroDivisionError, OverflowError, TypeError) as e:
        raise ValueError(str(e)) from None


@tool(
    schema={
        "type": "object",
        "properties": {
            "expression": {
                "type": "string",
                "maxLength": MAX_EXPRESSION_CHARS,
                "description": "e.g. '(12 + 7) * 3 / sqrt(2)'; + - * / // % **, sqrt, log, pi, e",
            }
        },
        "required": ["expression"],
        "additionalProperties": False,
    }
)
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression and return its value."""
    return repr(evaluate(expression))
