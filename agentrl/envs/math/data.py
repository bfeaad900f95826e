r"""Math problems: the `Problem` record, file loaders and a deterministic train/validation split.

Files: JSONL (`.jsonl`, `.json` with one object per line), Parquet (`.parquet`), CSV
(`.csv`), or a directory written by Hugging Face `datasets`' `save_to_disk` (needs the
`datasets` package). Field names are configurable. A reference answer holding a whole
solution is reduced to its answer: the last `\boxed{...}`, or the text after `####`
(GSM8K style).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from agentrl.envs.parsing import parse_boxed

__all__ = ["DataError", "Problem", "load_problems", "reference_answer", "split_problems"]

Split = Literal["train", "validation", "all"]


class DataError(ValueError):
    """A data file is missing, malformed, lacks a field, or holds no problems."""


@dataclass(frozen=True)
class Problem:
    """One problem: the question shown to the model and the reference answer it is graded on."""

    question: str
    answer: str
    """Reference answer (LaTeX or plain); for Countdown, one valid expression."""
    kind: Literal["math", "countdown"] = "math"
    """`countdown` answers are expressions graded by value and number use, not by math-verify."""
    numbers: tuple[int, ...] = ()
    """Countdown: the numbers that may each be used at most once."""
    target: int | None = None
    """Countdown: the value to reach."""
    source: str = ""
    """Where it came from (`file.jsonl:12`, `arithmetic level 2`)."""
    meta: dict[str, Any] = field(default_factory=dict, compare=False)
    """Other fields of the record, kept for logging."""


def reference_answer(text: Any) -> str:
    r"""The answer part of a reference: `\boxed{...}` content, text after `####`, or all of it.

    >>> reference_answer("so it is \\boxed{\\frac{1}{2}}.")
    '\\frac{1}{2}'
    >>> reference_answer("Natalia sold 48/2 = 24 clips.\n#### 72")
    '72'
    >>> reference_answer(3)
    '3'
    """
    if isinstance(text, float) and text.is_integer():
        text = int(text)
    text = str(text).strip()
    if "\\boxed{" in text:
        boxed = parse_boxed(text)
        if boxed is not None:
            return boxed
    if "####" in text:
        return text.rsplit("####", 1)[1].strip()
    return text


def _jsonl_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{line_no}: not valid JSON: {e}") from None
            if not isinstance(row, dict):
                raise DataError(
                    f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}"
                )
            yield f"{path.name}:{line_no}", row


def _csv_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    with path.open(encoding="utf-8", newline="") as f:
        for row_no, row in enumerate(csv.DictReader(f), 2):
            yield f"{path.name}:{row_no}", dict(row)


def _parquet_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for bad files
        raise DataError(f"{path}: cannot read as Parquet: {e}") from None
    for i, row in enumerate(table.to_pylist()):
        yield f"{path.name}[{i}]", row


def _hf_rows(path: Path, hf_split: str | None) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        import datasets  # type: ignore[import-not-found]
    except ImportError:
        raise DataError(
            f"{path} is a directory, read as a Hugging Face dataset saved with save_to_disk, "
            "but the `datasets` package is not installed: pip install datasets"
        ) from None
    data = datasets.load_from_disk(str(path))
    if isinstance(data, datasets.DatasetDict):
        if hf_split is None:
            if len(data) != 1:
                raise DataError(f"{path} holds splits {sorted(data)}; choose one with hf_split=...")
            hf_split = next(iter(data))
        if hf_split not in data:
            raise DataError(f"{path} has no split {hf_split!r}; it has {sorted(data)}")
        data = data[hf_split]
    for i, row in enumerate(data):
        yield f"{path.name}[{i}]", dict(row)


def load_problems(
    path: str | Path,
    *,
    question_field: str = "question",
    answer_field: str = "answer",
    hf_split: str | None = None,
) -> list[Problem]:
    """Read every problem in `path` (JSONL, Parquet, CSV, or a saved HF dataset directory)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DataError(f"data file not found: {path}")
    if path.is_dir():
        rows = _hf_rows(path, hf_split)
    elif path.suffix in (".jsonl", ".json", ".ndjson"):
        rows = _jsonl_rows(path)
    elif path.suffix == ".csv":
        rows = _csv_rows(path)
    elif path.suffix in (".parquet", ".pq"):
        rows = _parquet_rows(path)
    else:
        raise DataError(f"{path}: unknown format {path.suffix!r}; use .jsonl, .parquet or .csv")
    problems = []
    for where, row in rows:
        for name in (question_field, answer_field):
            if name not in row or row[name] is None:
                raise DataError(
                    f"{path}: record {where} has no field {name!r} "
                    f"(fields: {', '.join(sorted(map(str, row)))}); "
                    f"set question_field=/answer_field= to the right names"
                )
        answer = reference_answer(row[answer_field])
        question = str(row[question_field]).strip()
        if not question or not answer:
            raise DataError(
                f"{path}: record {where} has an empty {question_field!r} or {answer_field!r}"
            )
        meta = {k: v for k, v in row.items() if k not in (question_field, answer_field)}
        problems.append(Problem(question, answer, source=where, meta=meta))
    if not problems:
        raise DataError(f"{path}: no problems found (the file is empty)")
    return problems


def split_problems(
    problems: Sequence[Problem], split: Split, *, validation_fraction: float = 0.1, seed: int = 0
) -> list[Problem]:
    """The `train` or `validation` part of `problems` (or `all`), the same for the same seed.

    At least one problem goes to each side when there are two or more.
    """
    if split == "all":
        return list(problems)
    if not 0.0 <= validation_fraction < 1.0:
        raise DataError(f"validation_fraction must be in [0, 1), got {validation_fraction}")
    order = np.random.default_rng(seed).permutation(len(problems))
    num_val = round(len(problems) * validation_fraction)
    if len(problems) >= 2 and validation_fraction > 0:
        num_val = min(max(num_val, 1), len(problems) - 1)
    chosen = order[:num_val] if split == "validation" else order[num_val:]
    if len(chosen) == 0:
        raise DataError(
            f"the {split!r} split is empty ({len(problems)} problems, "
            f"validation_fraction={validation_fraction})"
        )
    return [problems[i] for i in sorted(chosen)]
