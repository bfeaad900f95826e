"""Programming problems for the `code` env: the shipped set and a loader for JSONL files.

A problem file has one JSON object per line with the fields:

- `id` (str, required): a unique name.
- `prompt` (str, required): the task as shown to the model (name the function to write).
- `tests` (list of str, required): Python statements run after the solution, one test each;
  a test passes when it raises nothing (typically an `assert`). Tests are hidden from the model;
  the source of a failing test is shown in the feedback. Tests run in a trusted process, not
  next to the solution (see `_harness.py`). A name the test reads that neither builtins, the
  setup nor the test defines is looked up in the solution. Calls to it send their arguments
  as plain data (None, bool, int, float, complex, str, bytes, list, tuple, dict, set,
  frozenset) and get plain data back. Objects that are not data (instances of the solution's
  classes) stay in the solution's process. Tests can call their methods, read attributes,
  and use `len`, iteration, `[]` and `in` on them, but they equal only themselves. So compare
  results with data, not with `isinstance` against a solution class, and do not pass
  functions (lambdas) to the solution. An exception the solution raises arrives as its
  nearest builtin class (a `ValueError` subclass is caught by `except ValueError`).
- `setup` (str, optional): code run before the solution (imports, helpers); it runs both in
  the solution's process and in the tests' process.
- `difficulty` (str, optional): a label such as `easy` or `medium`.
- `solution` (str, optional): a reference solution that passes every test. It is never shown
  to the model; `check_solutions` runs it to prove the tests are right (every shipped problem
  has one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

BUILTIN_PROBLEMS = Path(__file__).parent / "problems.jsonl"


@dataclass(frozen=True)
class Problem:
    """One programming task with hidden unit tests."""

    id: str
    prompt: str
    tests: list[str]
    setup: str = ""
    difficulty: str = ""
    solution: str = ""
    """Reference solution (never shown to the model); empty when the file gives none."""
    extra: dict = field(default_factory=dict)


def load_problems(path: str | Path | None = None) -> list[Problem]:
    """Problems from a JSONL file (fields in the module docstring); the shipped set by default.

    Raises ValueError naming the file and line of a malformed problem.
    """
    path = Path(path) if path is not None else BUILTIN_PROBLEMS
    problems: list[Problem] = []
    seen: set[str] = set()
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON ({e})") from None
            missing = [k for k in ("id", "prompt", "tests") if k not in row]
            if missing:
                raise ValueError(f"{where}: missing field(s) {', '.join(missing)}")
            tests = row["tests"]
            if (
                not isinstance(tests, list)
                or not tests
                or not all(isinstance(t, str) for t in tests)
            ):
                raise ValueError(f"{where}: `tests` must be a non-empty list of strings")
            if row["id"] in seen:
                raise ValueError(f"{where}: duplicate problem id {row['id']!r}")
            seen.add(row["id"])
            if not isinstance(row.get("solution", ""), str):
                raise ValueError(f"{where}: `solution` must be a string")
            known = {"id", "prompt", "tests", "setup", "difficulty", "solution"}
            problems.append(
                Problem(
                    id=str(row["id"]),
                    prompt=str(row["prompt"]),
                    tests=list(tests),
                    setup=str(row.get("setup", "")),
                    difficulty=str(row.get("difficulty", "")),
                    solution=row.get("solution", ""),
                    extra={k: v for k, v in row.items() if k not in known},
                )
            )
    if not problems:
        raise ValueError(f"{path}: no problems found")
    return problems
