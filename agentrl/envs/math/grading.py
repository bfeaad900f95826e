r"""Grading math answers: extraction, the project's equivalence policy, and a time-bounded grader.

Policy (docs/math.md has the full table):
- numbers compare by value: `1/2` = `0.5` = `\frac12` = `\dfrac{1}{2}`; `3` = `3.0`;
  a decimal matches when both sides agree after rounding to `float_rounding` places
  (default 6: `0.333333` = `1/3` but `0.33` != `1/3`; set 2 to accept `0.33`).
- `x = 3` matches `3` (a one-variable assignment is its right-hand side).
- percent: by default (`percent="either"`) `50\%` matches both `50` and `0.5`;
  `"value"` reads `50\%` as 0.5 only, `"number"` as 50 only.
- units, currency and degree marks are ignored: `5\text{ cm}` = `5`, `\$5` = `5`,
  `90^\circ` = `90` (not `\pi/2`). Units are not compared: `5 cm` = `5 m`.
- `1,000` = `1{,}000` = `1\,000` = `1000` (a comma before groups of exactly three digits is a
  thousands separator); `1,2` is a list.
- everything else (expressions, intervals, sets, tuples, equations) goes to math-verify
  (symbolic equivalence) in a worker process with a hard deadline.
- hostile answers never crash and never hang: control characters are dropped, answers
  longer than `max_answer_chars` or nested deeper than `max_nesting` are wrong at once, and
  a math-verify call past `timeout_s` is killed (the answer is graded wrong).

>>> grader = Grader()
>>> grader.grade("0.5", "\\frac{1}{2}").correct
True
>>> grader.grade("x = -3", "-3").correct
True
>>> grader.grade("2", "1/2").correct
False
>>> extract_answer("so \\boxed{42}.", "boxed")
('42', True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from pydantic import BaseModel, ConfigDict

from agentrl.envs.parsing import parse_answer, parse_boxed

__all__ = [
    "AnswerFormat",
    "Grader",
    "GradingConfig",
    "Verdict",
    "clean_answer",
    "extract_answer",
]

AnswerFormat = Literal["boxed", "answer_tag", "either"]


class GradingConfig(BaseModel):
    """How answers are compared with references."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    float_rounding: int = 6
    """Decimal places a decimal answer is rounded to before comparing (2 accepts 0.33 for 1/3)."""
    percent: Literal["either", "value", "number"] = "either"
    """How `50%` reads: `either` matches 50 or 0.5, `value` only 0.5, `number` only 50."""
    timeout_s: float = 3.0
    """Hard time limit per math-verify call; a slower answer is graded wrong."""
    max_answer_chars: int = 1000
    """Longer extracted answers are graded wrong without parsing."""
    max_nesting: int = 40
    """Deeper brace/parenthesis nesting is graded wrong without parsing."""
    use_math_verify: bool = True
    """Fall back to math-verify (symbolic) when the fast numeric path cannot decide."""
    num_workers: int = 1
    """Grading worker processes shared by all math envs in this process."""


@dataclass(frozen=True)
class Verdict:
    """The outcome of grading one answer."""

    correct: bool
    reason: str
    """How it was decided: `exact`, `numeric`, `math-verify`, `no answer`, `too long`,
    `too deep`, `timeout`, `grader error`."""


# -- extraction --------------------------------------------------------------------------------

_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def extract_answer(
    text: str, answer_format: AnswerFormat = "either", *, last_number_fallback: bool = False
) -> tuple[str | None, bool]:
    r"""The answer in `text` and whether it was in the requested format.

    `boxed` reads the last `\boxed{...}`, `answer_tag` the last `<answer>...</answer>`,
    `either` tries the tag then the box. With `last_number_fallback`, the last number in the
    text is used when the format is missing (and the second value is False).
    """
    found: str | None = None
    if answer_format in ("answer_tag", "either"):
        found = parse_answer(text)
        if found is not None and answer_format == "either":
            found = parse_boxed(found) or found
    if found is None and answer_format in ("boxed", "either"):
        found = parse_boxed(text)
    if found is not None:
        return found, True
    if last_number_fallback:
        numbers = _NUMBER_RE.findall(text[-10_000:])
        if numbers:
            return numbers[-1].rstrip(","), False
    return None, False


# -- cleaning ----------------------------------------------------------------------------------

_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\ufeff]")
_THIN_SPACE_RE = re.compile(r"(?<=\d)(?:\{,\}|\\,|\\ |\\!|~)(?=\d{3}(?!\d))")


def clean_answer(text: str) -> str:
    r"""Drop control characters and math delimiters, normalize thousands separators.

    >>> clean_answer("$1{,}000$\x00")
    '1,000'
    """
    text = _CONTROL_RE.sub("", text).replace("\t", " ").replace("\n", " ").strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
            text = text[len(left) : len(text) - len(right)].strip()
    return _THIN_SPACE_RE.sub(",", text)


def _nesting(text: str) -> int:
    depth = deepest = 0
    for ch in text:
        if ch in "{([":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "})]":
            depth -= 1
    return deepest


# -- the fast numeric path --------------------------------------------------------------------

_UNIT_RE = re.compile(
    r"\s*(?:\\(?:text|mbox|mathrm|textrm|textbf)\{[^{}]*\}|\^\s*\{?\\circ\}?|°|\\circ)\s*$"
)
_ASSIGN_RE = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*=\s*(?!.*=)")
_DECIMAL_RE = re.compile(r"^([+-]?)(\d{1,3}(?:,\d{3})+|\d+)?(?:\.(\d+))?$")
_SLASH_RE = re.compile(r"^([+-]?)(\d+)\s*/\s*(\d+)$")
_FRAC_RE = re.compile(r"^([+-]?)\\[dt]?frac(?:\{\s*(\d+)\s*\}|(\d))(?:\{\s*(\d+)\s*\}|(\d))$")


@dataclass(frozen=True)
class _Number:
    value: Fraction
    decimal: bool  # written with a decimal point (compared after rounding)


def _strip_decorations(text: str) -> tuple[str, bool]:
    """Remove units, currency and an assignment prefix; report a trailing percent sign."""
    text = text.replace("\\$", "").replace("\\left", "").replace("\\right", "").strip()
    for _ in range(3):
        text = _UNIT_RE.sub("", text).strip()
    percent = text.endswith("%")
    if percent:
        text = text[:-2] if text.endswith("\\%") else text[:-1]
    text = _ASSIGN_RE.sub("", text.strip())
    if text.startswith("{") and text.endswith("}") and text.count("{") == 1:
        text = text[1:-1]
    return text.strip(), percent


def _parse_plain(text: str) -> _Number | None:
    if len(text) > 400:
        return None
    if m := _DECIMAL_RE.match(text):
        sign, whole, frac = m.groups()
        if whole is None and frac is None:
            return None
        value = Fraction(f"{whole or '0'}".replace(",", "") + (f".{frac}" if frac else ""))
        return _Number(-value if sign == "-" else value, frac is not None)
    if m := _SLASH_RE.match(text):
        sign, num, den = m.groups()
        if int(den) == 0:
            return None
        value = Fraction(int(num), int(den))
        return _Number(-value if sign == "-" else value, False)
    if m := _FRAC_RE.match(text):
        sign, n1, n2, d1, d2 = m.groups()
        den = int(d1 or d2)
        if den == 0:
            return None
        value = Fraction(int(n1 or n2), den)
        return _Number(-value if sign == "-" else value, False)
    return None


def _percent_candidates(number: _Number, percent: bool, policy: str) -> list[_Number]:
    if not percent:
        return [number]
    as_value = _Number(number.value / 100, number.decimal)
    return {"value": [as_value], "number": [number], "either": [number, as_value]}[policy]


def _round(value: Fraction, places: int) -> Fraction:
    return Fraction(round(value, places))


def _numbers_equal(a: _Number, b: _Number, places: int) -> bool:
    if a.value == b.value:
        return True
    if a.decimal or b.decimal:
        return _round(a.value, places) == _round(b.value, places)
    return False


def _fast_numeric(answer: str, reference: str, config: GradingConfig) -> bool | None:
    """Decide plain-number answers without sympy; None when either side is not a plain number."""
    a_text, a_pct = _strip_decorations(answer)
    r_text, r_pct = _strip_decorations(reference)
    a_num, r_num = _parse_plain(a_text), _parse_plain(r_text)
    if a_num is None or r_num is None:
        return None
    return any(
        _numbers_equal(a, r, config.float_rounding)
        for a in _percent_candidates(a_num, a_pct, config.percent)
        for r in _percent_candidates(r_num, r_pct, config.percent)
    )


def _mv_candidates(text: str, policy: str) -> list[str]:
    """Strings to give math-verify for one side, following the percent policy."""
    stripped = text.rstrip()
    if not stripped.endswith("%"):
        return [text]
    bare = stripped[:-2] if stripped.endswith("\\%") else stripped[:-1]
    return {"value": [text], "number": [bare], "either": [text, bare]}[policy]


def _squash(text: str) -> str:
    return re.sub(r"\s+|\\[,;:! ]|\\left|\\right", "", text).replace("\\dfrac", "\\frac")


# -- the grader --------------------------------------------------------------------------------


class Grader:
    """Grades answers against references under `GradingConfig`; never raises, never hangs."""

    def __init__(self, config: GradingConfig | None = None) -> None:
        """`config`: the policy and limits (defaults: see `GradingConfig`)."""
        self.config = config or GradingConfig()

    def grade(self, answer: str | None, reference: str) -> Verdict:
        """Compare one extracted answer with one reference."""
        cfg = self.config
        if answer is None:
            return Verdict(False, "no answer")
        if len(answer) > 4 * cfg.max_answer_chars:
            return Verdict(False, "too long")
        answer, reference = clean_answer(answer), clean_answer(reference)
        if not answer:
            return Verdict(False, "no answer")
        if len(answer) > cfg.max_answer_chars:
            return Verdict(False, "too long")
        if _nesting(answer) > cfg.max_nesting:
            return Verdict(False, "too deep")
        if _squash(answer) == _squash(reference):
            return Verdict(True, "exact")
        fast = _fast_numeric(answer, reference, cfg)
        if fast is not None:
            return Verdict(fast, "numeric")
        if not cfg.use_math_verify:
            return Verdict(False, "numeric")
        return self._math_verify(answer, reference)

    def _math_verify(self, answer: str, reference: str) -> Verdict:
        from agentrl.envs.math._pool import GradingCrash, GradingTimeout, shared_pool

        cfg = self.config
        args = (
            _mv_candidates(answer, cfg.percent),
            _mv_candidates(reference, cfg.percent),
            cfg.float_rounding,
        )
        try:
            return Verdict(
                bool(shared_pool(cfg.num_workers).call(args, cfg.timeout_s)), "math-verify"
            )
        except GradingTimeout:
            return Verdict(False, "timeout")
        except GradingCrash:
            return Verdict(False, "grader error")
