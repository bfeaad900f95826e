"""A small safe evaluator for arithmetic expressions written by a model.

Model text is never passed to `eval`: this module tokenizes and parses `+ - * /` and
parentheses itself, computes with exact `Fraction`s, and enforces size limits, so a hostile
expression costs microseconds and raises `ExprError` instead of hanging or crashing.

>>> evaluate("(3 + 5) * 2 / 4")
Fraction(4, 1)
>>> expr = parse_expression("(25 - 5) * 4")
>>> expr.value, expr.numbers
(Fraction(80, 1), (25, 5, 4))
>>> check_numbers_used(expr.numbers, [4, 5, 25, 7])
>>> check_numbers_used((5, 5), [5, 3])
Traceback (most recent call last):
...
agentrl.envs.math.expr.ExprError: 5 is used 2 times but given 1 time
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

__all__ = [
    "ExprError",
    "Expression",
    "ExprLimits",
    "check_numbers_used",
    "evaluate",
    "parse_expression",
]

_TOKEN_RE = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|(.))", re.DOTALL)
_OPERATOR_ALIASES = {"×": "*", "x": "*", "X": "*", "·": "*", "÷": "/", "−": "-", "–": "-"}


class ExprError(ValueError):
    """The text is not a valid expression, breaks a limit, or divides by zero."""


@dataclass(frozen=True)
class ExprLimits:
    """Size limits for `parse_expression`; all are checked before or while parsing."""

    max_chars: int = 300
    """Longest accepted expression text."""
    max_numbers: int = 32
    """Most number literals in one expression."""
    max_digits: int = 12
    """Most digits in one number literal."""
    max_depth: int = 32
    """Deepest parenthesis nesting."""
    max_bits: int = 4096
    """Largest numerator or denominator (in bits) of any intermediate value."""
    allow_unary_minus: bool = False
    """Whether `-3` or `-(2+1)` is allowed (Countdown forbids it)."""
    allow_decimals: bool = False
    """Whether literals like `2.5` are allowed (Countdown uses integers only)."""


@dataclass(frozen=True)
class Expression:
    """A parsed expression: its exact value and the number literals it uses, in order."""

    text: str
    value: Fraction
    numbers: tuple[Fraction | int, ...]


class _Parser:
    """Recursive descent over the grammar
    expr := term (('+'|'-') term)*; term := unary (('*'|'/') unary)*;
    unary := '-' unary | atom; atom := NUMBER | '(' expr ')'."""

    def __init__(self, tokens: list[tuple[str, str]], limits: ExprLimits) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0
        self.limits = limits
        self.numbers: list[Fraction | int] = []

    def peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def checked(self, value: Fraction) -> Fraction:
        bits = max(value.numerator.bit_length(), value.denominator.bit_length())
        if bits > self.limits.max_bits:
            raise ExprError(f"an intermediate value exceeds {self.limits.max_bits} bits")
        return value

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()[1]
            rhs = self.term()
            value = self.checked(value + rhs if op == "+" else value - rhs)
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while self.peek() in ("*", "/"):
            op = self.take()[1]
            rhs = self.unary()
            if op == "*":
                value = self.checked(value * rhs)
            elif rhs == 0:
                raise ExprError("division by zero")
            else:
                value = self.checked(value / rhs)
        return value

    def unary(self) -> Fraction:
        if self.peek() == "-":
            if not self.limits.allow_unary_minus:
                raise ExprError("unary minus is not allowed")
            self.take()
            self.enter()
            value = -self.unary()
            self.depth -= 1
            return value
        return self.atom()

    def enter(self) -> None:
        self.depth += 1
        if self.depth > self.limits.max_depth:
            raise ExprError(f"nesting deeper than {self.limits.max_depth}")

    def atom(self) -> Fraction:
        if self.pos >= len(self.tokens):
            raise ExprError("expression ends early")
        kind, text = self.take()
        if kind == "num":
            return self.number(text)
        if text == "(":
            self.enter()
            value = self.expr()
            if self.peek() != ")":
                raise ExprError("missing ')'")
            self.take()
            self.depth -= 1
            return value
        raise ExprError(f"unexpected {text!r}")

    def number(self, text: str) -> Fraction:
        if "." in text and not self.limits.allow_decimals:
            raise ExprError(f"decimal {text!r} is not allowed; use integers")
        if len(text.replace(".", "")) > self.limits.max_digits:
            raise ExprError(f"number {text[:20]}... has more than {self.limits.max_digits} digits")
        if len(self.numbers) >= self.limits.max_numbers:
            raise ExprError(f"more than {self.limits.max_numbers} numbers")
        value = Fraction(text)
        self.numbers.append(int(value) if value.denominator == 1 and "." not in text else value)
        return value


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    for match in _TOKEN_RE.finditer(text):
        number, other = match.groups()
        if number is not None:
            tokens.append(("num", number))
        elif other is not None and not other.isspace():
            op = _OPERATOR_ALIASES.get(other, other)
            if op not in "+-*/()":
                raise ExprError(f"character {other!r} is not allowed; use digits, + - * / ( )")
            tokens.append(("op", op))
    return tokens


def parse_expression(text: str, limits: ExprLimits | None = None) -> Expression:
    """Parse and evaluate `text` exactly; raise `ExprError` with a short reason if invalid.

    `=` and anything after it is ignored, so `"(3+5)*2 = 16"` reads as `(3+5)*2`.
    """
    limits = limits or ExprLimits()
    if not isinstance(text, str):
        raise ExprError(f"expected a str, got {type(text).__name__}")
    if len(text) > limits.max_chars:
        raise ExprError(f"expression longer than {limits.max_chars} characters")
    body = text.split("=", 1)[0].strip()
    if not body:
        raise ExprError("empty expression")
    parser = _Parser(_tokenize(body), limits)
    value = parser.expr()
    if parser.pos != len(parser.tokens):
        raise ExprError(f"unexpected {parser.tokens[parser.pos][1]!r}")
    return Expression(body, value, tuple(parser.numbers))


def evaluate(text: str, limits: ExprLimits | None = None) -> Fraction:
    """The exact value of `text` (see `parse_expression`)."""
    return parse_expression(text, limits).value


def check_numbers_used(
    used: Iterable[Fraction | int], available: Iterable[Fraction | int], *, exactly: bool = False
) -> None:
    """Raise `ExprError` unless each number in `used` appears at most as often as given.

    With `exactly=True`, every given number must also be used (as often as it is given).
    """
    have = Counter(Fraction(n) for n in available)
    want = Counter(Fraction(n) for n in used)
    for number, count in want.items():
        if count > have[number]:
            shown = int(number) if number.denominator == 1 else number
            given = have[number]
            raise ExprError(
                f"{shown} is used {count} time{'s' * (count != 1)} "
                f"but given {given} time{'s' * (given != 1)}"
            )
    if exactly:
        unused = sorted(have - want)
        if unused:
            raise ExprError(f"not all numbers used: {', '.join(str(n) for n in unused)} left")
