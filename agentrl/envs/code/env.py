"""The `code` env: write a Python function that passes hidden unit tests, in a sandbox."""

from __future__ import annotations

import json
import re
import secrets
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.envs.base import Observation, TokenEnv
from agentrl.envs.code.problems import Problem, load_problems
from agentrl.sandbox import Sandbox, SandboxConfig, SandboxError, make_sandbox

_BLOCK_RE = re.compile(r"```(?:python|py|Python)?[ \t]*\n(.*?)```", re.DOTALL)

_HERE = Path(__file__).parent
_HARNESS = (_HERE / "_harness.py").read_text(encoding="utf-8")
"""The trusted test runner: the sandbox program (see its docstring for the design)."""
_SOLUTION_HOST = (_HERE / "_solution_host.py").read_text(encoding="utf-8")
"""The process that loads the solution and answers the harness's calls."""

_SHARED: dict[str, Sandbox] = {}
_SHARED_LOCK = threading.Lock()


def shared_sandbox(config: SandboxConfig) -> Sandbox:
    """One sandbox per distinct config for the whole process (envs in a pool share it)."""
    key = config.model_dump_json()
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = make_sandbox(config)
        return _SHARED[key]


def run_tests(
    problem: Problem,
    code: str,
    sandbox: Sandbox,
    *,
    timeout: float = 10.0,
    max_chars: int = 2000,
    test_timeout: float | None = None,
    max_result_bytes: int = 4 << 20,
) -> tuple[list[str | None], str]:
    """Run `problem`'s tests on `code` in `sandbox` (one sandbox run for all tests).

    The tests run in a trusted harness process; the solution runs in a separate process that
    only answers the calls the tests make, with plain data (`_harness.py` explains why no
    solution can forge a verdict). Each test may take `test_timeout` seconds (default: all
    the time left); the whole run takes at most `timeout`. A result over `max_result_bytes`
    fails its test.

    Returns the per-test error (None = passed) and, when the run did not finish (the sandbox
    killed it), a summary of what happened (else ""). Tests that finished before the run broke
    keep their result; the test that was running gets the summary, later ones are marked not
    run. When the sandbox itself fails (its container died), `SandboxError` is raised: the
    rollout ends that episode `env_error`, out of the loss.
    """
    nonce = "@@agentrl-result-" + secrets.token_hex(16) + "@@"
    reserve = min(0.5, timeout / 4)  # for the harness to start and to report the last test
    spec = {
        "nonce": nonce,
        "tests": problem.tests,
        "setup": problem.setup,
        "solution": code,
        "host": _SOLUTION_HOST,
        "budget": timeout - reserve,
        "test_timeout": test_timeout if test_timeout is not None else timeout,
        "max_reply_bytes": max_result_bytes,
    }
    result = sandbox.run(_HARNESS, stdin=json.dumps(spec), timeout=timeout)
    if result.sandbox_error is not None:  # no verdict on the code: an env_error, not a fail
        raise SandboxError(f"the sandbox failed while testing the code: {result.sandbox_error}")
    missing = object()
    errors: list[Any] = [missing] * len(problem.tests)
    for line in result.stdout.splitlines():
        if not line.startswith(nonce):
            continue
        try:  # a line cut by the output cap is not a result
            index, error = json.loads(line[len(nonce) :])
        except (ValueError, TypeError):
            continue
        if isinstance(index, int) and 0 <= index < len(errors):
            errors[index] = error
    if missing not in errors:
        return errors, ""
    why = result.summary(max_chars)
    first = errors.index(missing)
    errors[first] = f"the test run did not finish: {why}"
    for i in range(first + 1, len(errors)):
        if errors[i] is missing:
            errors[i] = "not run: an earlier test did not finish"
    return errors, why


@dataclass(frozen=True)
class SolutionCheck:
    """How one solution fared on one problem's tests."""

    problem_id: str
    passed: int
    total: int
    errors: list[str | None]
    """Per-test error text (None = passed), in the problem's test order."""

    @property
    def ok(self) -> bool:
        """Every test passed."""
        return self.passed == self.total


def check_solutions(
    problems: Sequence[Problem],
    sandbox: Sandbox,
    *,
    solutions: Mapping[str, str] | None = None,
    timeout: float = 10.0,
    max_workers: int = 4,
) -> list[SolutionCheck]:
    """Grade a solution for each problem, concurrently (`max_workers` runs at once).

    `solutions` maps problem id to code; by default each problem's reference `solution`
    (a problem without one is an error). Use it to prove a problem file's tests are right.
    """
    chosen = {}
    for p in problems:
        code = solutions.get(p.id) if solutions is not None else p.solution
        if solutions is None and not code:
            raise ValueError(f"problem {p.id!r} has no reference solution")
        if code is not None:
            chosen[p.id] = (p, code)

    def grade(item: tuple[Problem, str]) -> SolutionCheck:
        problem, code = item
        errors, _ = run_tests(problem, code, sandbox, timeout=timeout)
        passed = sum(e is None for e in errors)
        return SolutionCheck(problem.id, passed, len(errors), errors)

    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        return list(pool.map(grade, chosen.values()))


def extract_code(text: str) -> str | None:
    """The last fenced code block (```python ... ```) in `text`, or None."""
    blocks = _BLOCK_RE.findall(text)
    return blocks[-1] if blocks else None


class CodeEnv(TokenEnv):
    """Programming problems with hidden unit tests, run in a sandbox; revise on failure."""

    system_prompt = (
        "You are an expert Python programmer. Solve the task by writing the requested function "
        "or class. Reply with your complete solution in a single ```python code block. If tests "
        "fail, you will see the failures and may answer again with a corrected solution."
    )
    max_turns = 3
    bounds_its_own_calls = True  # solutions run in the sandbox, which bounds them

    def __init__(
        self,
        problems: str | None = None,
        max_turns: int = 3,
        timeout: float = 10.0,
        sandbox: Sandbox | None = None,
        sandbox_config: dict[str, Any] | None = None,
        max_feedback_chars: int = 2000,
        test_timeout: float | None = 5.0,
    ):
        """`timeout` bounds one grading run (all tests); `test_timeout` one test (None: no
        limit of its own), so a hanging test still leaves time to grade the others."""
        super().__init__()
        self.problems: list[Problem] = load_problems(problems)
        self.max_turns = max_turns
        self.timeout = timeout
        self.test_timeout = test_timeout
        self.max_feedback_chars = max_feedback_chars
        self._sandbox = sandbox
        self._sandbox_config = SandboxConfig(**(sandbox_config or {}))
        self.problem: Problem | None = None
        self.turn = 0

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox that runs the tests (shared per config, created on first use)."""
        if self._sandbox is None:
            self._sandbox = shared_sandbox(self._sandbox_config)
        return self._sandbox

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Pick a problem (`options={"problem_id": ...}` picks one by id)."""
        super().reset(seed=seed)
        wanted = (options or {}).get("problem_id")
        if wanted is not None:
            matches = [p for p in self.problems if p.id == wanted]
            if not matches:
                raise ValueError(f"no problem with id {wanted!r}")
            self.problem = matches[0]
        else:
            self.problem = self.problems[int(self.np_random.integers(len(self.problems)))]
        self.turn = 0
        return self.problem.prompt, {"problem_id": self.problem.id}

    def run_tests(self, code: str) -> tuple[list[str | None], str]:
        """Run the problem's tests on `code`: per-test error (None = passed), and run summary."""
        assert self.problem is not None
        return run_tests(
            self.problem,
            code,
            self.sandbox,
            timeout=self.timeout,
            max_chars=self.max_feedback_chars,
            test_timeout=self.test_timeout,
        )

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Grade the code block in `action`; reward = fraction of tests passed (at the end)."""
        self.require_reset()
        assert self.problem is not None
        self.turn += 1
        last = self.turn >= self.max_turns
        code = extract_code(action)
        total = len(self.problem.tests)
        if code is None:
            info = {"valid": False, "passed": 0, "total": total, "success": False}
            feedback = "No code block found. Put your full solution in one ```python code block."
            return feedback, 0.0, last, False, info
        errors, _ = self.run_tests(code)
        passed = sum(e is None for e in errors)
        success = passed == total
        info = {"valid": True, "passed": passed, "total": total, "success": success}
        reward = passed / total if (success or last) else 0.0
        if success:
            return f"All {total} tests passed.", reward, True, False, info
        lines = [f"{passed}/{total} tests passed. Failing tests:"]
        for test, error in zip(self.problem.tests, errors, strict=True):
            if error is not None:
                lines.append(f"- `{test.strip()}`\n  -> {error}")
        feedback = "\n".join(lines)
        if len(feedback) > self.max_feedback_chars:
            feedback = feedback[: self.max_feedback_chars] + "\n..."
        return feedback, reward, last, False, info
