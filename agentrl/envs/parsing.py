"""Helpers for the answer formats models commonly use, so env authors need no regexes.

>>> parse_answer("I think <answer> Up </answer>")
'Up'
>>> parse_actions("<answer>Up || left||  DOWN</answer>", max_actions=2)
['Up', 'left']
>>> parse_boxed(r"so \\boxed{\\frac{1}{2}} is it")
'\\\\frac{1}{2}'
>>> parse_answer_int("<answer>42</answer>")
42
"""

from __future__ import annotations

import re

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_INT_RE = re.compile(r"^[+-]?\d{1,18}$")


def parse_answer(text: str, *, last: bool = True) -> str | None:
    """The stripped content of the last (or first) `<answer>...</answer>`, or None."""
    found = _ANSWER_RE.findall(text)
    if not found:
        return None
    return (found[-1] if last else found[0]).strip()


def parse_actions(text: str, *, max_actions: int | None = None, sep: str = "||") -> list[str]:
    """Actions inside `<answer>a || b</answer>`, stripped, empty parts dropped, capped."""
    answer = parse_answer(text)
    if answer is None:
        return []
    actions = [part.strip() for part in answer.split(sep) if part.strip()]
    return actions if max_actions is None else actions[:max_actions]


def parse_boxed(text: str, *, last: bool = True) -> str | None:
    """The content of the last (or first) `\\boxed{...}`, braces balanced, or None."""
    contents = []
    start = 0
    while (i := text.find("\\boxed{", start)) != -1:
        depth, j = 1, i + len("\\boxed{")
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth:
            break
        contents.append(text[i + len("\\boxed{") : j - 1].strip())
        start = j
    if not contents:
        return None
    return contents[-1] if last else contents[0]


def parse_answer_int(text: str) -> int | None:
    """The integer inside `<answer>...</answer>`, or None if absent or not an integer."""
    answer = parse_answer(text)
    if answer is None or not _INT_RE.match(answer):
        return None
    return int(answer)
