r"""The grading policy as a table: (answer, reference, expected verdict), plus hostile answers.

Policy (docs/math.md): numbers by value; decimals after rounding to 6 places; `x = 3` is 3;
`50\%` matches 50 and 0.5; units, currency and degree marks are ignored; `1,000` is 1000;
the rest is math-verify's symbolic equivalence.
"""

from __future__ import annotations

import time

import pytest

from agentrl.envs.math.grading import Grader, GradingConfig, clean_answer, extract_answer

GRADER = Grader(GradingConfig(timeout_s=3.0))

# fmt: off
TABLE: list[tuple[str, str, bool]] = [
    # one half, every way
    ("1/2", "0.5", True), ("0.5", "1/2", True), ("\\frac12", "0.5", True),
    ("\\frac{1}{2}", "1/2", True), ("\\dfrac{1}{2}", "\\frac12", True), ("\\tfrac{1}{2}", "0.5", True),
    ("50\\%", "0.5", True), ("0.5", "50\\%", True), ("50%", "1/2", True), ("50\\%", "50", True),
    ("50", "50\\%", True), ("2/4", "1/2", True), ("0.50", "1/2", True), (".5", "1/2", True),
    ("1/2", "2", False), ("2", "1/2", False), ("0.5", "5", False), ("50", "0.5", False),
    ("\\frac{2}{1}", "1/2", False), ("-1/2", "1/2", False),
    # three
    ("3", "3.0", True), ("3.0", "3", True), ("x = 3", "3", True), ("x=3", "3", True),
    ("3", "x = 3", True), ("y = 3", "3", True), ("3.00", "3", True), ("03", "3", True),
    ("{3}", "3", True), ("3", "4", False), ("x = 4", "3", False), ("3.1", "3", False),
    ("30", "3", False), ("x=3", "x=3", True),
    # radicals and symbolic forms
    ("\\sqrt{2}/2", "1/\\sqrt{2}", True), ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", True),
    ("\\sqrt{8}", "2\\sqrt{2}", True), ("\\sqrt{2}", "2", False), ("\\sqrt{3}/3", "1/\\sqrt{2}", False),
    ("2\\pi", "2\\pi", True), ("\\pi", "3.14", False), ("\\frac{\\pi}{2}", "\\pi/2", True),
    ("x^2+2x+1", "(x+1)^2", True), ("(x+1)^2", "x^2+1", False), ("2^{10}", "1024", True),
    ("\\frac{3}{4}", "0.75", True), ("e^{0}", "1", True), ("3+2i", "3+2i", True),
    ("\\infty", "\\infty", True), ("-\\infty", "\\infty", False), ("\\log_2 8", "3", True),
    ("10^3", "1000", True), ("1.5\\times10^{3}", "1500", True),
    # negative numbers
    ("-5", "-5", True), ("5", "-5", False), ("-5", "5", False), ("- 5", "-5", True),
    ("-0.25", "-1/4", True), ("-\\frac{1}{4}", "-0.25", True), ("\\frac{-1}{4}", "-\\frac14", True),
    ("-3", "x=-3", True), ("(-3)", "-3", True), ("-2", "2", False),
    # rounding policy: 6 places
    ("0.333333", "1/3", True), ("0.3333333", "\\frac13", True), ("0.33", "1/3", False),
    ("0.333", "1/3", False), ("0.666667", "2/3", True), ("0.67", "2/3", False),
    ("3.14159", "3.14159", True), ("1.4142136", "\\sqrt{2}", True), ("1.41", "\\sqrt{2}", False),
    # intervals
    ("(1,2)", "(1,2)", True), ("[1,2]", "(1,2)", False), ("(1,2]", "(1,2]", True),
    ("[1, 2)", "[1,2)", True), ("(-\\infty, 3)", "(-\\infty,3)", True), ("(0,\\infty)", "(0,5)", False),
    ("[0,1]", "[0,1]", True), ("(2,1)", "(1,2)", False),
    # sets and lists
    ("\\{1,2\\}", "\\{2,1\\}", True), ("\\{1,2,3\\}", "\\{1,2\\}", False), ("1,2", "2,1", True),
    ("1, 2, 3", "3,2,1", True), ("\\{1,3\\}", "\\{1,2\\}", False), ("2, 3", "2", False),
    # units, currency, degrees (ignored)
    ("5 \\text{ cm}", "5", True), ("5\\text{cm}", "5", True), ("5 cm", "5", True),
    ("5", "5\\text{ cm}", True), ("6 \\text{ cm}", "5", False), ("\\$5", "5", True),
    ("\\$5.00", "5", True), ("90^\\circ", "90", True), ("90^{\\circ}", "90", True),
    ("90°", "90", True), ("\\frac{\\pi}{2}", "90^\\circ", False), ("12 \\mbox{ dollars}", "12", True),
    ("45\\text{ degrees}", "45", True),
    # thousands separators
    ("1,000", "1000", True), ("1{,}000", "1000", True), ("1\\,000", "1000", True),
    ("1,234,567", "1234567", True), ("1000", "1,000", True), ("1,000.5", "1000.5", True),
    ("10,000", "1000", False), ("1,000", "1", False),
    # equations
    ("y = 2x + 1", "y=2x+1", True), ("2x + 1", "2x+1", True), ("x + 1", "x + 2", False),
    # wrapping and whitespace
    ("$42$", "42", True), ("\\(42\\)", "42", True), (" 42 ", "42", True), ("42\n", "42", True),
    ("\\left( 1, 2 \\right)", "(1,2)", True), ("", "42", False),
]
# fmt: on


def test_table_is_large() -> None:
    assert len(TABLE) >= 100


@pytest.mark.parametrize(("answer", "reference", "expected"), TABLE)
def test_grading_table(answer: str, reference: str, expected: bool) -> None:
    verdict = GRADER.grade(answer, reference)
    assert verdict.correct is expected, f"{answer!r} vs {reference!r}: {verdict}"


def test_rounding_is_configurable() -> None:
    loose = Grader(GradingConfig(float_rounding=2))
    assert loose.grade("0.33", "1/3").correct
    assert not loose.grade("0.34", "1/3").correct


@pytest.mark.parametrize(
    ("percent", "as_value", "as_number"),
    [("either", True, True), ("value", True, False), ("number", False, True)],
)
def test_percent_policy(percent: str, as_value: bool, as_number: bool) -> None:
    grader = Grader(GradingConfig(percent=percent))  # type: ignore[arg-type]
    assert grader.grade("0.5", "50\\%").correct is as_value
    assert grader.grade("50", "50\\%").correct is as_number
    assert grader.grade("50\\%", "50\\%").correct


HOSTILE = {
    "power tower": "10^{10^{10}}",
    "power tower text": "10**10**10",
    "python power": "9**9**9**9",
    "factorial": "1000000000!",
    "deep latex": "\\frac{" * 300 + "1" + "}{2}" * 300,
    "deep parens": "(" * 5000 + "1" + ")" * 5000,
    "1 MB": "1" * 1_000_000,
    "1 MB latex": "\\frac{1}{2}+" * 90_000,
    "invalid latex": "\\frac{1}{\\sqrt{",
    "unbalanced": "}}}{{{\\left(",
    "control chars": "\x00\x01\x1b[2J4\x7f2",
    "unicode": "\u202e٣\ufeff",
    "huge integer": "9" * 900,
    "nested sqrt": "\\sqrt{" * 35 + "2" + "}" * 35,
    "big matrix": "\\begin{pmatrix}" + "&".join(["x"] * 500) + "\\end{pmatrix}",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_answers_return_in_time(name: str) -> None:
    grader = Grader(GradingConfig(timeout_s=1.0))
    # a worker replaced after an earlier timeout finishes starting here, outside the clock
    assert grader.grade("\\sqrt{8}", "2\\sqrt{2}").correct
    start = time.monotonic()
    verdict = grader.grade(HOSTILE[name], "42")
    elapsed = time.monotonic() - start
    assert verdict.correct is False
    assert elapsed < 1.0 + 1.0, (name, verdict, elapsed)


def test_control_characters_are_dropped() -> None:
    assert GRADER.grade("4\x002", "42").correct
    assert clean_answer("$\\frac{1}{2}$\x1b") == "\\frac{1}{2}"


def test_grader_survives_a_timeout() -> None:
    grader = Grader(GradingConfig(timeout_s=1.0))
    assert grader.grade("10^{10^{10}}", "1").reason == "timeout"
    assert grader.grade("\\sqrt{8}", "2\\sqrt{2}").correct


@pytest.mark.parametrize(
    ("text", "fmt", "fallback", "expected"),
    [
        ("so \\boxed{42}.", "boxed", False, ("42", True)),
        ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "boxed", False, ("\\frac{1}{2}", True)),
        ("<answer> 7 </answer>", "answer_tag", False, ("7", True)),
        ("<answer>\\boxed{7}</answer>", "either", False, ("7", True)),
        ("\\boxed{7}", "answer_tag", False, (None, False)),
        ("<answer>7</answer>", "boxed", False, (None, False)),
        ("the answer is 1,234.", "boxed", True, ("1,234", False)),
        ("no numbers here", "boxed", True, (None, False)),
        ("\\boxed{unclosed", "boxed", False, (None, False)),
    ],
)
def test_extract_answer(
    text: str, fmt: str, fallback: bool, expected: tuple[str | None, bool]
) -> None:
    assert extract_answer(text, fmt, last_number_fallback=fallback) == expected  # type: ignore[arg-type]
