"""`CountdownEnv`: combine the given numbers with + - * / to reach the target.

Every puzzle is solvable: the env builds a random expression over all the numbers (each
intermediate result a positive integer) and takes its value as the target. The answer is an
expression in `<answer>...</answer>` that uses each given number exactly once. Rewards follow
RAGEN / TinyZero: 1.0 for a correct expression, `format_score` (0.1) for a well-formed one
that uses exactly the given numbers but misses the target, 0.0 otherwise. Expressions are
evaluated exactly (fractions) by the math env's safe parser (`agentrl.envs.math.expr`),
never `eval`.

>>> env = CountdownEnv()
>>> obs, info = env.reset(seed=0)
>>> env.step(f"<answer>{info['solution']}</answer>")[1]
1.0
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from agentrl.envs.base import Observation, TokenEnv
from agentrl.envs.math.expr import ExprError, check_numbers_used, parse_expression
from agentrl.envs.parsing import parse_answer

_OPS = ("+", "-", "*", "/")


def generate_puzzle(
    rng: np.random.Generator,
    num_numbers: int = 4,
    max_number: int = 99,
    min_target: int = 1,
    max_target: int = 100,
    max_tries: int = 10_000,
) -> tuple[list[int], int, str]:
    """`(numbers, target, solution)`: a random solvable puzzle drawn from `rng`."""
    if num_numbers < 2 or max_number < 1 or min_target > max_target:
        raise ValueError("need num_numbers >= 2, max_number >= 1, min_target <= max_target")
    for _ in range(max_tries):
        numbers = [int(x) for x in rng.integers(1, max_number + 1, size=num_numbers)]
        # Combine in a random order: (value, text) pairs merged two at a time.
        items = [(n, str(n)) for n in numbers]
        ok = True
        while len(items) > 1:
            i, j = (int(k) for k in rng.choice(len(items), size=2, replace=False))
            (a, ta), (b, tb) = items[i], items[j]
            op = _OPS[int(rng.integers(4))]
            if op == "+":
                value = a + b
            elif op == "-":
                if a <= b:
                    (a, ta), (b, tb) = (b, tb), (a, ta)
                value = a - b
            elif op == "*":
                value = a * b
            else:
                if b == 0 or a % b:
                    (a, ta), (b, tb) = (b, tb), (a, ta)
                if b == 0 or a % b:
                    ok = False
                    break
                value = a // b
            if value <= 0:
                ok = False
                break
            items = [it for k, it in enumerate(items) if k not in (i, j)]
            items.append((value, f"({ta} {op} {tb})"))
        if ok and min_target <= items[0][0] <= max_target:
            text = items[0][1]
            return numbers, items[0][0], text[1:-1] if text.startswith("(") else text
    raise RuntimeError(f"no puzzle with a target in [{min_target}, {max_target}] found")


class CountdownEnv(TokenEnv):
    """Countdown, RAGEN rules: use every number exactly once to hit the target (0.1 format score)."""

    system_prompt: ClassVar[str] = (
        "You are solving the Countdown puzzle. Use each given number exactly once, with "
        "+, -, *, / and parentheses, to make an expression equal to the target. Answer with "
        "the expression only, e.g. <answer>(2 + 5) * 3</answer>."
    )
    max_turns: ClassVar[int] = 1

    def __init__(
        self,
        num_numbers: int = 4,
        max_number: int = 99,
        min_target: int = 1,
        max_target: int = 100,
        max_turns: int | None = None,
        format_score: float = 0.1,
        numbers: list[int] | None = None,
        target: int | None = None,
    ) -> None:
        """Configure the puzzles.

        Args:
            num_numbers: how many numbers are given.
            max_number: numbers are drawn from 1..max_number.
            min_target: smallest target.
            max_target: largest target.
            max_turns: attempts per episode (default 1, as in RAGEN); a wrong answer gets
                feedback and, with turns left, another try.
            format_score: reward for a well-formed expression that uses exactly the given
                numbers but misses the target.
            numbers: a fixed puzzle's numbers (with `target`) instead of random ones.
            target: the fixed puzzle's target.
        """
        super().__init__()
        if (numbers is None) != (target is None):
            raise ValueError("give both numbers and target for a fixed puzzle, or neither")
        generate_puzzle(np.random.default_rng(0), num_numbers, max_number, min_target, max_target)
        self.num_numbers, self.max_number = num_numbers, max_number
        self.min_target, self.max_target = min_target, max_target
        if max_turns is not None:
            if max_turns < 1:
                raise ValueError(f"max_turns must be >= 1, got {max_turns}")
            self.max_turns = max_turns  # type: ignore[misc]  # per-instance override
        self.format_score = float(format_score)
        self.fixed = (list(numbers), int(target)) if numbers is not None else None  # type: ignore[arg-type]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Draw a solvable puzzle from `self.np_random` (or use the fixed one)."""
        super().reset(seed=seed)
        if self.fixed is not None:
            self.numbers, self.target = list(self.fixed[0]), self.fixed[1]
            solution = ""
        else:
            self.numbers, self.target, solution = generate_puzzle(
                self.np_random, self.num_numbers, self.max_number, self.min_target, self.max_target
            )
        self._turns = 0
        self._done = False
        obs = f"Target: {self.target}. Numbers: {self.numbers}."
        return obs, {"solution": solution}

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Score the expression in `<answer>...</answer>`."""
        self.require_reset()
        if self._done:
            return "The episode is over; call reset().", 0.0, True, False, {"success": False}
        self._turns += 1
        answer = parse_answer(action)
        reward, correct, valid = 0.0, False, False
        if answer is None:
            feedback = "No <answer>...</answer> found."
        else:
            try:  # "2 + 5 - 3 = 4" reads as "2 + 5 - 3"; no unary minus, integers only
                expr = parse_expression(answer)
            except ExprError as e:
                feedback = f"Invalid expression: {e}."
            else:
                try:
                    check_numbers_used(expr.numbers, self.numbers, exactly=True)
                except ExprError as e:
                    feedback = f"Use each of {self.numbers} exactly once ({e})."
                else:
                    valid = True
                    if expr.value == self.target:
                        correct = True
                        reward = 1.0
                        feedback = "Correct!"
                    else:
                        reward = self.format_score
                        feedback = f"Your expression equals {_show(expr.value)}, not {self.target}."
        out_of_turns = self._turns >= self.max_turns
        self._done = correct or out_of_turns
        # One attempt: the answer ends the task (as the math env's one-turn episodes). With
        # several, running out of them truncates the episode.
        terminated = correct or (out_of_turns and self.max_turns == 1)
        truncated = self._done and not terminated
        info = {"success": correct, "valid": valid}
        if not self._done:
            feedback += f" Try again: target {self.target}, numbers {self.numbers}."
        return feedback, float(reward), terminated, truncated, info

    def sample_action(self, rng: np.random.Generator) -> str:
        """The numbers in a random order joined by random operators."""
        numbers = getattr(self, "numbers", [1, 2])
        order = rng.permutation(len(numbers))
        parts = [str(numbers[int(order[0])])]
        for k in order[1:]:
            parts += [_OPS[int(rng.integers(4))], str(numbers[int(k)])]
        return f"<answer>{' '.join(parts)}</answer>"


def _show(value: Any) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.4g}"
