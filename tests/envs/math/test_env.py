"""`MathEnv` through the registry: single-turn, retries, format reward, Countdown, files."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentrl.config import load_config
from agentrl.envs import make
from agentrl.envs.check import check_env

VARIANTS = ["math", "math-arithmetic", "math-linear", "math-multiturn", "countdown"]


@pytest.mark.parametrize("name", VARIANTS)
def test_check_env_passes(name: str) -> None:
    report = check_env(name)
    assert report.ok, str(report)


def test_single_turn_correct_and_wrong() -> None:
    env = make("math-linear", difficulty=2)
    env.reset(seed=3)
    answer = env.problem.answer  # type: ignore[attr-defined]
    obs, reward, terminated, truncated, info = env.step(f"so \\boxed{{x = {answer}}}")
    assert (obs, reward, terminated, truncated) == ("Correct.", 1.0, True, False)
    assert info["success"] and info["formatted"]
    env.reset(seed=3)
    obs, reward, terminated, truncated, info = env.step("\\boxed{12345}")
    assert (reward, terminated, info["success"]) == (0.0, True, False)


def test_multi_turn_retries_with_discount_and_feedback() -> None:
    env = make("math", multi_turn=True, max_turns=3, retry_discount=0.5, format_reward=0.1)
    assert env.max_turns == 3
    env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step("I don't know")
    assert "No answer found" in obs and reward == 0.0 and not (terminated or truncated)
    obs, reward, terminated, truncated, _ = env.step("\\boxed{-99999}")
    assert obs == "Incorrect, try again." and reward == pytest.approx(0.1)
    answer = env.problem.answer  # type: ignore[attr-defined]
    obs, reward, terminated, truncated, info = env.step(f"\\boxed{{{answer}}}")
    assert terminated and not truncated and info["attempt"] == 3
    assert reward == pytest.approx(0.1 + 0.25)


def test_multi_turn_runs_out_of_attempts() -> None:
    env = make("math-multiturn")
    env.reset(seed=1)
    ends = [env.step("\\boxed{-99999}")[2:4] for _ in range(3)]
    assert ends == [(False, False), (False, False), (False, True)]


def test_answer_tag_format_and_last_number_fallback() -> None:
    env = make("math", answer_format="answer_tag", last_number_fallback=True, format_reward=0.2)
    env.reset(seed=5)
    answer = env.problem.answer  # type: ignore[attr-defined]
    _, reward, *_, info = env.step(f"the result is {answer}")
    assert info["success"] and not info["formatted"] and reward == 1.0
    env.reset(seed=5)
    assert env.step(f"<answer>{answer}</answer>")[1] == pytest.approx(1.2)
    assert "<answer>" in env.system_prompt


def test_countdown_grades_by_value_and_number_use() -> None:
    env = make("countdown", difficulty=2)
    env.reset(seed=0)
    p = env.problem  # type: ignore[attr-defined]
    assert env.step(f"<answer>{p.answer}</answer>")[4]["success"]
    env.reset(seed=0)
    twice = f"{p.numbers[0]} + {p.numbers[0]}"
    info = env.step(f"<answer>{twice}</answer>")[4]
    assert not info["success"] and "used 2 times" in info["grading"]
    env.reset(seed=0)
    assert env.step("<answer>__import__('os')</answer>")[4]["grading"].startswith("invalid")


def test_file_backed_env_and_split(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    rows = [{"q": f"What is {i} + {i}?", "a": str(2 * i)} for i in range(20)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train = make("math", data_path=str(path), question_field="q", answer_field="a")
    val = make(
        "math", data_path=str(path), question_field="q", answer_field="a", split="validation"
    )
    assert (len(train), len(val)) == (18, 2)
    obs, _ = val.reset(seed=0)
    i = int(obs.split()[2])
    assert val.step(f"\\boxed{{{2 * i}}}")[4]["success"]
    seen = {train.reset(seed=s)[0] for s in range(len(train))}
    assert len(seen) == len(train)


def test_bad_arguments_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="generator_name"):
        make("math", generator_name="arithmetic")
    with pytest.raises(ValueError, match="either generator or data_path"):
        make("math", generator="linear", data_path="x.jsonl")
    with pytest.raises(ValueError, match="not found"):
        make("math", data_path=str(tmp_path / "missing.jsonl"))


def test_kwargs_from_config_overrides() -> None:
    cfg = load_config(
        overrides=[
            "env.name=math",
            "env.kwargs.generator=linear",
            "env.kwargs.difficulty=3",
            "env.kwargs.grading.float_rounding=2",
        ]
    )
    env = make(cfg.env.name, **cfg.env.kwargs)
    assert env.config.generator == "linear"  # type: ignore[attr-defined]
    assert env.grader.config.float_rounding == 2  # type: ignore[attr-defined]


def test_grading_from_threads_uses_the_process_pool() -> None:
    env = make("math")
    cases = [("\\sqrt{8}", "2\\sqrt{2}", True), ("(1,2]", "(1,2)", False)] * 3
    with ThreadPoolExecutor(3) as pool:
        verdicts = list(pool.map(lambda c: env.grader.grade(c[0], c[1]), cases))  # type: ignore[attr-defined]
    assert [v.correct for v in verdicts] == [c[2] for c in cases]
    assert {v.reason for v in verdicts} == {"math-verify"}


class _FakeResult:
    sandbox_error = None  # the sandbox itself worked (an `ExecResult` field)
    ok = True  # and so did the program

    def __init__(self, code: str) -> None:
        self.code = code

    def summary(self, max_chars: int = 2000) -> str:
        return f"ran {len(self.code)} chars"[:max_chars]


class _FakeSandbox:
    """Records the code it is given; stands in for agentrl.sandbox (tested there)."""

    def __init__(self) -> None:
        self.codes: list[str] = []

    def run(self, code: str, *, timeout: float) -> _FakeResult:
        self.codes.append(code)
        return _FakeResult(code)


def test_tool_mode_runs_python_then_grades() -> None:
    sandbox = _FakeSandbox()
    env = make("math-linear", tools=True, max_tool_calls=2, sandbox=sandbox)
    assert env.max_turns == 3 and env.tools[0]["function"]["name"] == "python"  # type: ignore[attr-defined]
    assert "<tool_call>" in env.system_prompt
    env.reset(seed=0)
    call = '<tool_call>{"name": "python", "arguments": {"code": "print(2)"}}</tool_call>'
    obs, reward, terminated, truncated, _ = env.step(call)
    assert obs == [{"role": "tool", "content": "ran 8 chars"}] and sandbox.codes == ["print(2)"]
    assert (reward, terminated, truncated) == (0.0, False, False)
    obs, *_ = env.step(call)
    assert obs[-1]["role"] == "user"  # out of tool calls
    answer = env.problem.answer  # type: ignore[attr-defined]
    assert env.step(f"\\boxed{{{answer}}}")[1:4] == (1.0, True, False)
    assert check_env(lambda: make("math-linear", tools=True, sandbox=_FakeSandbox())).ok


def _python_call(code: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'python', 'arguments': {'code': code}})}</tool_call>"


@pytest.mark.docker
def test_math_tool_in_docker_computes_then_answers(require_docker: None) -> None:
    """Scripted policy: a malformed call, a bad-argument call, a crashing run, then real
    Python that computes the answer; the tool output is what the policy boxes."""
    env = make("math-tool")
    assert env.tools[0]["function"]["name"] == "python"  # type: ignore[attr-defined]
    for seed in (0, 1):
        question, _ = env.reset(seed=seed)
        expression = question.removeprefix("Compute:").removesuffix("?").strip()

        obs, reward, terminated, truncated, info = env.step("<tool_call>{not json</tool_call>")
        assert isinstance(obs, list) and obs[0]["role"] == "tool", obs
        assert obs[0]["content"].startswith("Error"), obs
        assert (reward, terminated, truncated, info["success"]) == (0.0, False, False, False)

        obs, *_ = env.step(
            '<tool_call>{"name": "python", "arguments": {"code": 5}}</tool_call>'
            '<tool_call>{"name": "shell", "arguments": {"cmd": "id"}}</tool_call>'
        )
        assert [m["role"] for m in obs] == ["tool", "tool"]
        assert all(m["content"].startswith("Error") for m in obs), obs

        obs, reward, terminated, _, _ = env.step(_python_call("raise ValueError('boom')"))
        assert "ValueError: boom" in obs[0]["content"] and (reward, terminated) == (0.0, False)

        obs, reward, terminated, truncated, _ = env.step(
            f"Let me compute it.\n{_python_call(f'print({expression})')}"
        )
        assert obs[0]["role"] == "tool" and obs[0]["content"].startswith("stdout:\n"), obs
        printed = obs[0]["content"].removeprefix("stdout:\n").strip()
        assert printed == env.problem.answer  # type: ignore[attr-defined]
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert obs[-1] == {"role": "user", "content": "No more tool calls: give your answer."}

        obs, reward, terminated, truncated, info = env.step(
            f"So the answer is \\boxed{{{printed}}}."
        )
        assert (obs, reward, terminated, truncated) == ("Correct.", 1.0, True, False)
        assert info["success"] and info["attempt"] == 1
