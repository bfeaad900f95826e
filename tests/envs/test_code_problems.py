"""Every shipped code problem: its reference solution passes, and wrong code does not.

All gradings go through the real Docker sandbox, concurrently through one warm pool.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import pytest

from agentrl.envs.code import CodeEnv, check_solutions, load_problems
from agentrl.sandbox import SandboxConfig

pytestmark = pytest.mark.docker

POOL_SIZE = 3
PROBLEMS = load_problems()

WRONG = {
    # splits on single spaces, so runs of whitespace leave empty words
    "reverse-words": "def reverse_words(s):\n    return ' '.join(s.split(' ')[::-1])\n",
    # checks 3 before 15: multiples of 15 say 'Fizz'
    "fizzbuzz": (
        "def fizzbuzz(n):\n"
        "    return ['Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else\n"
        "            'FizzBuzz' if i % 15 == 0 else str(i) for i in range(1, n + 1)]\n"
    ),
    # accepts leading zeros
    "valid-ipv4": (
        "def is_ipv4(s):\n"
        "    parts = s.split('.')\n"
        "    return len(parts) == 4 and all(p.isdigit() and int(p) <= 255 for p in parts)\n"
    ),
    # Python's floor division rounds toward minus infinity, not toward zero
    "evaluate-rpn": (
        "def eval_rpn(tokens):\n"
        "    st = []\n"
        "    for t in tokens:\n"
        "        if t in '+-*/' and len(t) == 1:\n"
        "            b, a = st.pop(), st.pop()\n"
        "            st.append({'+': a + b, '-': a - b, '*': a * b, '/': a // b}[t])\n"
        "        else:\n"
        "            st.append(int(t))\n"
        "    return st[-1]\n"
    ),
    # naive recursion: right on small inputs, times out on fib(10**18)
    "fibonacci-mod": (
        "def fib_mod(n, m):\n"
        "    a, b = 0, 1\n"
        "    for _ in range(n):\n"
        "        a, b = b, (a + b) % m\n"
        "    return a\n"
    ),
}
"""Plausible but wrong solutions: each passes some tests and fails others."""


def stub(problem_prompt: str) -> str:
    """Code that defines the asked-for function (or class) but computes nothing."""
    name = re.search(r"`(\w+)\(", problem_prompt)
    assert name, problem_prompt
    if name.group(1)[0].isupper():
        return (
            f"class {name.group(1)}:\n"
            "    def __init__(self, *args, **kwargs):\n        pass\n"
            "    def __getattr__(self, attr):\n        return lambda *a, **k: None\n"
        )
    return f"def {name.group(1)}(*args, **kwargs):\n    return None\n"


@pytest.fixture(scope="module")
def sandbox(require_docker: None) -> Iterator[object]:
    from agentrl.sandbox.docker import DockerSandbox

    box = DockerSandbox(SandboxConfig(pool_size=POOL_SIZE))
    try:
        yield box
    finally:
        box.close()


def test_ships_33_problems_each_with_a_reference_solution() -> None:
    assert len(PROBLEMS) >= 33
    missing = [p.id for p in PROBLEMS if not p.solution.strip()]
    assert not missing, f"problems without a reference solution: {missing}"


def test_every_reference_solution_passes_all_tests(sandbox) -> None:
    start = time.monotonic()
    checks = check_solutions(PROBLEMS, sandbox, max_workers=POOL_SIZE)
    elapsed = time.monotonic() - start
    assert [c.problem_id for c in checks] == [p.id for p in PROBLEMS]
    failed = {c.problem_id: c.errors for c in checks if not c.ok}
    assert not failed, failed
    assert sum(c.total for c in checks) >= 3 * len(PROBLEMS)
    print(
        f"{len(checks)} reference solutions, {sum(c.total for c in checks)} tests: {elapsed:.2f} s"
    )


def test_a_stub_fails_every_problem(sandbox) -> None:
    """No problem's tests pass for code that returns None (the tests can fail)."""
    stubs = {p.id: stub(p.prompt) for p in PROBLEMS}
    checks = check_solutions(PROBLEMS, sandbox, solutions=stubs, max_workers=POOL_SIZE)
    assert len(checks) == len(PROBLEMS)
    passing = [c.problem_id for c in checks if c.ok]
    assert not passing, f"a do-nothing solution passes: {passing}"


def test_wrong_solutions_score_below_one(sandbox) -> None:
    checks = check_solutions(PROBLEMS, sandbox, solutions=WRONG, max_workers=POOL_SIZE, timeout=2)
    assert sorted(c.problem_id for c in checks) == sorted(WRONG)
    for check in checks:
        assert 0 < check.passed < check.total, (check.problem_id, check.errors)
    # the naive fib passes the small cases; fib(10**18) times out, and the tests that
    # finished before still count
    (fib,) = [c for c in checks if c.problem_id == "fibonacci-mod"]
    assert fib.errors[:4] == [None] * 4 and fib.passed == 4
    assert fib.errors[4].startswith("Timed out"), fib.errors[4]
    # through the env, on the last turn the reward is the fraction of tests passed
    env = CodeEnv(sandbox=sandbox, max_turns=1, timeout=3)
    env.reset(seed=0, options={"problem_id": "valid-ipv4"})
    _, reward, terminated, _, info = env.step(f"```python\n{WRONG['valid-ipv4']}```")
    assert terminated and not info["success"]
    assert reward == info["passed"] / info["total"] < 1.0


def test_solution_field_is_loaded_and_checked(tmp_path) -> None:
    path = tmp_path / "p.jsonl"
    row = {"id": "a", "prompt": "Write `f()`.", "tests": ["assert f() == 1"], "solution": 3}
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=r"p\.jsonl:1: `solution` must be a string"):
        load_problems(path)
    row["solution"] = "def f():\n    return 1\n"
    path.write_text(json.dumps(row) + "\n")
    (problem,) = load_problems(path)
    assert problem.solution == row["solution"] and "solution" not in problem.extra
    row.pop("solution")
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match="has no reference solution"):
        check_solutions(load_problems(path), sandbox=None)  # type: ignore[arg-type]
