"""The math-verify side of grading, run inside a grading worker process (see `_pool`).

Inputs are already cleaned, size-checked strings; this module only parses them with
math-verify and compares. Timeouts are the pool's job, so math-verify's own signal-based
timeouts are off.
"""

from __future__ import annotations

from typing import Any


def _parse(text: str) -> list[Any]:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    return parse(
        f"${text}$",
        extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()],
        parsing_timeout=None,  # type: ignore[arg-type]
    )


def equal(answers: list[str], references: list[str], float_rounding: int) -> bool:
    """True when any answer candidate matches any reference candidate under math-verify."""
    from math_verify import verify

    golds = [g for r in references for g in _parse(r)]
    preds = [p for a in answers for p in _parse(a)]
    if not golds or not preds:
        return False
    return bool(verify(golds, preds, float_rounding=float_rounding, timeout_seconds=None))


def warm_up() -> None:
    """Import math-verify and its LaTeX parser so the first real call is fast."""
    equal(["\\frac{1}{2}"], ["0.5"], 6)
