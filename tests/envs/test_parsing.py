"""Answer-format helpers (their doctests run too)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentrl.envs.parsing import parse_actions, parse_answer, parse_answer_int, parse_boxed


def test_parse_answer() -> None:
    assert parse_answer("no tags") is None
    assert parse_answer("<answer>a</answer> then <ANSWER> b </Answer>") == "b"
    assert parse_answer("<answer>a</answer> <answer>b</answer>", last=False) == "a"
    assert parse_answer("<answer>\nmulti\nline\n</answer>") == "multi\nline"
    assert parse_answer("<answer>unclosed") is None


def test_parse_actions() -> None:
    assert parse_actions("<answer>Up || Left ||  || down</answer>") == ["Up", "Left", "down"]
    assert parse_actions("<answer>Up || Left</answer>", max_actions=1) == ["Up"]
    assert parse_actions("<answer>a;b</answer>", sep=";") == ["a", "b"]
    assert parse_actions("nothing") == []


def test_parse_boxed() -> None:
    assert parse_boxed(r"\boxed{1} and \boxed{\frac{a}{b}}") == r"\frac{a}{b}"
    assert parse_boxed(r"\boxed{1} and \boxed{2}", last=False) == "1"
    assert parse_boxed(r"\boxed{unbalanced") is None
    assert parse_boxed("none") is None


def test_parse_answer_int() -> None:
    assert parse_answer_int("<answer>-7</answer>") == -7
    assert parse_answer_int("<answer>+3</answer>") == 3
    assert parse_answer_int("<answer>3.5</answer>") is None
    assert parse_answer_int("<answer>" + "9" * 400 + "</answer>") is None
    assert parse_answer_int("42") is None


@given(st.text(max_size=300))
def test_parsers_never_raise(text: str) -> None:
    parse_answer(text)
    parse_actions(text, max_actions=3)
    parse_boxed(text)
    parse_answer_int(text)
