"""Helpers shared by the grid envs: splitting an answer into named actions."""

from __future__ import annotations

import re
from collections.abc import Mapping

from agentrl.envs.parsing import parse_answer

_SPLIT_RE = re.compile(r"\s*\|\|\s*|\s*,\s*|\s+")


def parse_named_actions(
    text: str, names: Mapping[str, int], *, split_words: bool = True
) -> tuple[list[int], str | None]:
    """Action ids from `<answer>a || b</answer>` up to the first unknown word, and the problem.

    `names` maps lower-case action names to ids. The problem is None when every word was
    known; otherwise it says what was wrong (no answer tag, empty answer, unknown word). With
    `split_words=False` only `||` and commas separate actions (names may contain spaces).

    >>> parse_named_actions("<answer>Up || left</answer>", {"up": 0, "left": 1})
    ([0, 1], None)
    >>> parse_named_actions("<answer>Up Jump</answer>", {"up": 0})
    ([0], "Unknown action 'Jump'.")
    """
    answer = parse_answer(text)
    if answer is None:
        return [], "No <answer>...</answer> found."
    parts = (
        _SPLIT_RE.split(answer.strip())
        if split_words
        else re.split(r"\s*\|\|\s*|\s*,\s*", answer.strip())
    )
    ids = []
    for word in parts:
        if not word:
            continue
        key = " ".join(word.lower().split())
        if key not in names:
            shown = word if len(word) <= 20 else word[:20] + "..."
            return ids, f"Unknown action {shown!r}."
        ids.append(names[key])
    if not ids:
        return [], "Empty answer."
    return ids, None
