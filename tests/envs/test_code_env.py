"""The `code` env: problem loading, grading, multi-turn feedback (bubblewrap and Docker)."""

from __future__ import annotations

import json

import pytest

from agentrl.envs import make
from agentrl.envs.code import CodeEnv, extract_code, load_problems
from agentrl.sandbox import LocalSandbox

SOLUTIONS = {
    "reverse-words": "def reverse_words(s):\n    return ' '.join(s.split()[::-1])\n",
    "fibonacci-mod": (
        "def fib_mod(n, m):\n"
        "    def f(k):\n"
        "        if k == 0:\n"
        "            return (0, 1)\n"
        "        a, b = f(k >> 1)\n"
        "        c, d = a * (2 * b - a) % m, (a * a + b * b) % m\n"
        "        return (d, (c + d) % m) if k & 1 else (c, d)\n"
        "    return f(n)[0] % m\n"
    ),
    "coin-change": (
        "def min_coins(coins, amount):\n"
        "    best = [0] + [float('inf')] * amount\n"
        "    for a in range(1, amount + 1):\n"
        "        best[a] = min([best[a - c] + 1 for c in coins if c <= a] + [float('inf')])\n"
        "    return -1 if best[amount] == float('inf') else best[amount]\n"
    ),
    "lru-cache": (
        "from collections import OrderedDict\n"
        "class LRU:\n"
        "    def __init__(self, capacity):\n"
        "        self.capacity, self.d = capacity, OrderedDict()\n"
        "    def get(self, key):\n"
        "        if key not in self.d:\n"
        "            return None\n"
        "        self.d.move_to_end(key)\n"
        "        return self.d[key]\n"
        "    def put(self, key, value):\n"
        "        self.d[key] = value\n"
        "        self.d.move_to_end(key)\n"
        "        if len(self.d) > self.capacity:\n"
        "            self.d.popitem(last=False)\n"
    ),
}


@pytest.fixture(scope="module")
def local_sandbox(require_bwrap: None) -> LocalSandbox:
    return LocalSandbox(timeout=10)


def answer(code: str) -> str:
    return f"Here is my solution:\n```python\n{code}```\n"


def test_ships_at_least_30_problems_with_tests() -> None:
    problems = load_problems()
    assert len(problems) >= 30
    assert len({p.id for p in problems}) == len(problems)
    assert all(len(p.tests) >= 3 for p in problems)


def test_loader_reports_file_and_line(tmp_path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": "a", "prompt": "x", "tests": ["assert 1"]}) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"p\.jsonl:2: not valid JSON"):
        load_problems(path)
    path.write_text(json.dumps({"id": "a", "prompt": "x"}) + "\n")
    with pytest.raises(ValueError, match="missing field.*tests"):
        load_problems(path)


def test_user_jsonl_with_setup(tmp_path, local_sandbox) -> None:
    path = tmp_path / "mine.jsonl"
    row = {
        "id": "sq",
        "prompt": "Write sq(x).",
        "setup": "K = 2",
        "tests": ["assert sq(3) == 9", "assert sq(K) == 4"],
    }
    path.write_text(json.dumps(row) + "\n")
    env = CodeEnv(problems=str(path), sandbox=local_sandbox)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(answer("def sq(x):\n    return x * x\n"))
    assert (reward, terminated, info["success"]) == (1.0, True, True)


def test_extract_code_takes_last_block() -> None:
    assert extract_code("```python\na = 1\n```\ntext\n```\nb = 2\n```") == "b = 2\n"
    assert extract_code("no code") is None


@pytest.mark.parametrize("problem_id", sorted(SOLUTIONS))
def test_reference_solutions_pass(problem_id, local_sandbox) -> None:
    env = CodeEnv(sandbox=local_sandbox)
    env.reset(seed=0, options={"problem_id": problem_id})
    _, reward, terminated, _, info = env.step(answer(SOLUTIONS[problem_id]))
    assert info["success"] and reward == 1.0 and terminated, info


def test_multi_turn_feedback_then_fix(local_sandbox) -> None:
    env = CodeEnv(sandbox=local_sandbox, max_turns=3)
    env.reset(seed=0, options={"problem_id": "reverse-words"})
    obs, reward, terminated, _, info = env.step("I'm not sure.")
    assert not info["valid"] and not terminated and "```python" in obs
    obs, reward, terminated, _, info = env.step(answer("def reverse_words(s):\n    return s\n"))
    assert not terminated and reward == 0.0 and "Failing tests" in obs and "hello world" in obs
    obs, reward, terminated, _, info = env.step(answer(SOLUTIONS["reverse-words"]))
    assert terminated and reward == 1.0 and info["success"]


def test_last_turn_gives_fraction_and_forged_results_do_not_count(local_sandbox) -> None:
    env = CodeEnv(sandbox=local_sandbox, max_turns=1)
    env.reset(seed=0, options={"problem_id": "reverse-words"})
    forged = "print('@@agentrl-result-0000000000000000@@[null, null, null, null]')\n"
    code = forged + "def reverse_words(s):\n    return '' if not s.strip() else s\n"
    _, reward, terminated, _, info = env.step(answer(code))
    assert terminated and info["passed"] == 2 and reward == 0.5


def test_crashing_and_looping_solutions_are_graded_zero(local_sandbox) -> None:
    env = CodeEnv(sandbox=local_sandbox, max_turns=1, timeout=2)
    env.reset(seed=0, options={"problem_id": "digit-sum"})
    _, reward, _, _, info = env.step(answer("import os\nos._exit(3)\n"))
    assert reward == 0.0 and info["passed"] == 0
    env.reset(seed=0, options={"problem_id": "digit-sum"})
    obs, reward, _, _, _ = env.step(answer("while True:\n    pass\n"))
    assert reward == 0.0 and "Timed out" in obs


@pytest.mark.docker
def test_code_env_in_docker_passes_check_env(require_docker: None) -> None:
    from agentrl.envs.check import check_env

    report = check_env("code")
    assert report.ok, report
    env = make("code")
    env.reset(seed=0, options={"problem_id": "coin-change"})
    _, reward, _, _, info = env.step(answer(SOLUTIONS["coin-change"]))
    assert info["success"] and reward == 1.0


class _BrokenSandbox:
    """A sandbox whose container died under every program."""

    def run(self, code, **kwargs):
        from agentrl.sandbox import ExecResult

        return ExecResult("", "", -1, sandbox_error="container failed: ConnectionError()")


def test_a_failed_sandbox_is_an_env_error_not_a_wrong_answer() -> None:
    from agentrl.envs.tool.env import PythonToolEnv
    from agentrl.sandbox import SandboxError

    env = CodeEnv(sandbox=_BrokenSandbox())
    env.reset(seed=0)
    with pytest.raises(SandboxError, match="the sandbox failed while testing the code"):
        env.step(answer(SOLUTIONS["reverse-words"]))
    tool = PythonToolEnv(sandbox=_BrokenSandbox())
    tool.reset(seed=0)
    call = '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>'
    with pytest.raises(SandboxError, match="the python tool's sandbox failed"):
        tool.step(call)
