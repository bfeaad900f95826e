"""Loading problems from JSONL, CSV, Parquet and saved datasets; clear errors; the split."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentrl.envs.math.data import DataError, Problem, load_problems, split_problems

ROWS = [
    {"problem": "1+1?", "solution": "It is \\boxed{2}.", "level": 1},
    {"problem": "2+2?", "solution": "#### 4"},
    {"problem": "half?", "solution": "\\frac{1}{2}"},
]


def _write(tmp_path: Path, suffix: str, rows: list[dict]) -> Path:
    path = tmp_path / f"data{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif suffix == ".csv":
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, ["problem", "solution"], extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
    else:
        pq.write_table(
            pa.Table.from_pylist([{k: r[k] for k in ("problem", "solution")} for r in rows]), path
        )
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_formats_load_with_field_names(tmp_path: Path, suffix: str) -> None:
    path = _write(tmp_path, suffix, ROWS)
    problems = load_problems(path, question_field="problem", answer_field="solution")
    assert [(p.question, p.answer) for p in problems] == [
        ("1+1?", "2"),
        ("2+2?", "4"),
        ("half?", "\\frac{1}{2}"),
    ]


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found: .*nope.jsonl"):
        load_problems(tmp_path / "nope.jsonl")


def test_missing_field_names_file_field_and_record(tmp_path: Path) -> None:
    path = _write(tmp_path, ".jsonl", ROWS)
    with pytest.raises(DataError, match=r"data.jsonl: record data.jsonl:1 has no field 'question'"):
        load_problems(path)


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    with pytest.raises(DataError, match="empty.jsonl: no problems"):
        load_problems(path)


def test_bad_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "a", "answer": "1"}\n{oops\n')
    with pytest.raises(DataError, match="bad.jsonl:2: not valid JSON"):
        load_problems(path)


def test_directory_needs_datasets(tmp_path: Path) -> None:
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(DataError, match="pip install datasets"):
            load_problems(tmp_path)
    else:  # pragma: no cover - only where `datasets` is installed
        datasets.Dataset.from_list([{"question": "q", "answer": "1"}]).save_to_disk(
            str(tmp_path / "d")
        )
        assert load_problems(tmp_path / "d")[0].answer == "1"


def test_split_is_deterministic_disjoint_and_complete() -> None:
    problems = [Problem(f"q{i}", str(i)) for i in range(50)]
    train = split_problems(problems, "train", validation_fraction=0.2, seed=7)
    val = split_problems(problems, "validation", validation_fraction=0.2, seed=7)
    assert len(val) == 10 and len(train) == 40
    assert {p.question for p in train}.isdisjoint({p.question for p in val})
    assert split_problems(problems, "validation", validation_fraction=0.2, seed=7) == val
    assert split_problems(problems, "validation", validation_fraction=0.2, seed=8) != val
    assert split_problems(problems, "all") == problems
    assert len(split_problems(problems[:2], "validation", validation_fraction=0.01)) == 1
