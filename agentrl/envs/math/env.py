r"""`MathEnv`: verifiable math problems, single-turn or with retries.

Problems come from a file (`data_path`) or a generator (`generator=arithmetic|linear|countdown`).
The model answers in `\boxed{...}` or `<answer>...</answer>` (`answer_format`); the answer is
graded by `Grader` (exact numbers, then math-verify under a time limit) or, for Countdown, by
the safe expression evaluator. Reward: `correct_reward` (times `retry_discount` per earlier
wrong attempt) plus `format_reward` when the answer was in the requested format.

>>> env = MathEnv(generator="linear", difficulty=2)
>>> obs, info = env.reset(seed=3)
>>> obs
'Solve for x: 10x - 8 = -108'
>>> env.step("x = -10, so \\boxed{-10}")[1:4]
(1.0, True, False)
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentrl.envs.base import Message, Observation, TokenEnv
from agentrl.envs.math.data import Problem, load_problems, split_problems
from agentrl.envs.math.expr import ExprError, ExprLimits, check_numbers_used, parse_expression
from agentrl.envs.math.generators import GENERATORS
from agentrl.envs.math.grading import AnswerFormat, Grader, GradingConfig, Verdict, extract_answer
from agentrl.envs.spaces import TextOrMessages
from agentrl.envs.tool.tools import parse_tool_calls

__all__ = ["MathEnv", "MathEnvConfig"]

_FORMAT_HINTS = {
    "boxed": "Put your final answer in \\boxed{...}.",
    "answer_tag": "Put your final answer in <answer>...</answer>.",
    "either": "Put your final answer in \\boxed{...} or <answer>...</answer>.",
}
_COUNTDOWN_LIMITS = ExprLimits(max_chars=300, allow_unary_minus=False, allow_decimals=False)


class MathEnvConfig(BaseModel):
    """Everything `MathEnv` takes; `make("math", **kwargs)` validates kwargs against it."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    generator: Literal["arithmetic", "linear", "countdown"] | None = None
    """Procedural problems instead of a file; with neither set, `arithmetic` is used."""
    difficulty: int = Field(1, ge=1)
    """Generator level, 1 (easiest) to 5 (higher values are clamped)."""
    data_path: str | None = None
    """A `.jsonl`, `.parquet` or `.csv` file, or a saved Hugging Face dataset directory."""
    question_field: str = "question"
    """Field holding the question text."""
    answer_field: str = "answer"
    """Field holding the reference answer (a `\\boxed{}` or `####` solution is reduced)."""
    hf_split: str | None = None
    """Split of a saved `DatasetDict` (needed when it has several)."""
    split: Literal["train", "validation", "all"] = "train"
    """Which part of the file's problems this env draws from."""
    validation_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    """Share of the file's problems held out for `validation`."""
    split_seed: int = 0
    """Seed of the train/validation split (same seed, same split)."""
    answer_format: AnswerFormat = "boxed"
    """Where the model puts its answer: `boxed`, `answer_tag` or `either`."""
    last_number_fallback: bool = False
    """Grade the last number in the text when the requested format is missing."""
    correct_reward: float = 1.0
    """Reward for a correct answer on the first attempt."""
    format_reward: float = 0.0
    """Added to every step whose answer was in the requested format."""
    multi_turn: bool = False
    """After a wrong answer, say so and let the model retry (up to `max_turns` attempts)."""
    max_turns: int = Field(3, ge=1)
    """Attempts per episode in multi-turn mode (single-turn mode always has 1)."""
    retry_discount: float = Field(0.8, ge=0.0, le=1.0)
    """A correct answer on attempt k earns `correct_reward * retry_discount**(k-1)`."""
    feedback: str = "Incorrect, try again."
    """What the model is told after a wrong answer in multi-turn mode."""
    countdown_use_all: bool = False
    """Countdown: every given number must be used (by default each at most once)."""
    grading: GradingConfig = Field(default_factory=GradingConfig)
    """How answers are compared with references (see `GradingConfig`)."""
    tools: bool = False
    """Tool-integrated mode: the model may call a sandboxed `python` tool before answering."""
    max_tool_calls: int = Field(4, ge=1)
    """Tool mode: turns with tool calls allowed per episode (added to `max_turns`)."""
    tool_timeout_s: float = Field(5.0, gt=0)
    """Tool mode: time limit of one Python run."""
    sandbox_config: dict[str, Any] = Field(default_factory=dict)
    """Tool mode: `SandboxConfig` fields for the shared sandbox (e.g. `{"backend": "local"}`)."""

    @model_validator(mode="after")
    def _one_source(self) -> MathEnvConfig:
        if self.generator is not None and self.data_path is not None:
            raise ValueError("set either generator or data_path, not both")
        if self.generator is None and self.data_path is None:
            self.generator = "arithmetic"
        return self


class MathEnv(TokenEnv):
    """Solve a math problem with a checkable answer (dataset or generator; optional retries)."""

    system_prompt: ClassVar[str] = (
        "Solve the math problem. Think step by step, then put your final answer in \\boxed{...}."
    )
    max_turns: ClassVar[int] = 1

    def __init__(self, sandbox: Any = None, **kwargs: Any) -> None:
        """Build from `MathEnvConfig` fields (see there); unknown keys are errors.

        `sandbox`: tool mode only, a ready `Sandbox` to run the tool in instead of the shared
        one built from `sandbox_config`.
        """
        super().__init__()
        try:
            self.config = MathEnvConfig(**kwargs)
        except ValidationError as e:
            raise ValueError(f"invalid math env arguments:\n{e}") from None
        cfg = self.config
        self.grader = Grader(cfg.grading)
        self.problems: list[Problem] | None = None
        if cfg.data_path is not None:
            loaded = load_problems(
                cfg.data_path,
                question_field=cfg.question_field,
                answer_field=cfg.answer_field,
                hf_split=cfg.hf_split,
            )
            self.problems = split_problems(
                loaded, cfg.split, validation_fraction=cfg.validation_fraction, seed=cfg.split_seed
            )
        self.max_turns = cfg.max_turns if cfg.multi_turn else 1  # type: ignore[misc]
        self._tool_env: Any = None
        if cfg.tools:
            from agentrl.envs.tool.env import PythonToolEnv

            self._tool_env = PythonToolEnv(
                timeout=cfg.tool_timeout_s, sandbox=sandbox, sandbox_config=cfg.sandbox_config
            )
            self.max_turns += cfg.max_tool_calls  # type: ignore[misc]
            self.observation_space = TextOrMessages()  # tool results come as messages
        hint = _FORMAT_HINTS[cfg.answer_format]
        if cfg.generator == "countdown":
            task = (
                "Reach the target number with the given numbers, each used at most once, "
                "using + - * / and parentheses. Think step by step, then give one expression "
                "(for example (3 + 5) * 2)."
            )
        else:
            task = "Solve the math problem. Think step by step."
        retries = " If your answer is wrong you may try again." if cfg.multi_turn else ""
        tools = (
            " You may run Python first: write "
            '<tool_call>{"name": "python", "arguments": {"code": "print(1 + 1)"}}</tool_call> '
            "and wait for the output; answer in a message without a tool call."
            if cfg.tools
            else ""
        )
        self.system_prompt = f"{task}{tools} {hint}{retries}"  # type: ignore[misc]
        self.problem: Problem | None = None

    @property
    def tools(self) -> list[dict[str, Any]]:
        """Tool schemas for the chat template (empty unless `tools=True`)."""
        return self._tool_env.tools if self._tool_env is not None else []

    def __len__(self) -> int:
        """Number of problems in a file-backed env (generators are unbounded: 0)."""
        return len(self.problems) if self.problems is not None else 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Pick a problem: from a file, problem `seed % len` (`options={"index": i}` picks one);
        from a generator, one drawn with `self.np_random`."""
        super().reset(seed=seed)
        if self.problems is not None:
            if options and "index" in options:
                index = int(options["index"]) % len(self.problems)
            elif seed is not None:
                index = seed % len(self.problems)
            else:
                index = int(self.np_random.integers(len(self.problems)))
            self.problem = self.problems[index]
        else:
            assert self.config.generator is not None
            self.problem = GENERATORS[self.config.generator](self.np_random, self.config.difficulty)
        self.attempts = 0
        self.tool_turns = 0
        self.done = False
        return self.problem.question, {"source": self.problem.source}

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Grade one answer; end on a correct answer or when the attempts run out."""
        self.require_reset()
        assert self.problem is not None
        cfg = self.config
        if self.done:
            return "The episode is over; call reset().", 0.0, True, False, {"success": False}
        if self._tool_env is not None and self.tool_turns < cfg.max_tool_calls:
            calls = parse_tool_calls(action)
            if calls:
                return self._run_tools(calls)
        self.attempts += 1
        answer, formatted = extract_answer(
            action, cfg.answer_format, last_number_fallback=cfg.last_number_fallback
        )
        verdict = self.grade(answer, self.problem)
        reward = cfg.format_reward if formatted else 0.0
        if verdict.correct:
            reward += cfg.correct_reward * cfg.retry_discount ** (self.attempts - 1)
        info: dict[str, Any] = {
            "success": verdict.correct,
            "grading": verdict.reason,
            "formatted": formatted,
            "attempt": self.attempts,
            "answer": None if answer is None else answer[:200],
        }
        out_of_attempts = self.attempts >= self.max_turns
        if verdict.correct:
            self.done = True
            return "Correct.", reward, True, False, info
        if not cfg.multi_turn:
            self.done = True
            return "Incorrect.", reward, True, False, info
        self.done = out_of_attempts
        text = (
            cfg.feedback
            if answer is not None
            else f"No answer found. {_FORMAT_HINTS[cfg.answer_format]}"
        )
        if verdict.reason.startswith("invalid expression"):
            text = f"{cfg.feedback} ({verdict.reason})"
        return text, reward, False, out_of_attempts, info

    def _run_tools(self, calls: list[Any]) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Run the tool calls of one turn; the outputs come back as `tool` messages."""
        from agentrl.envs.tool.env import MAX_CALLS_PER_TURN

        self.tool_turns += 1
        messages: list[Message] = []
        for call in calls[:MAX_CALLS_PER_TURN]:
            text = (
                f"Error: {call.error}"
                if call.error
                else self._tool_env.call_tool(call.name, call.arguments)
            )
            messages.append({"role": "tool", "content": text})
        if len(calls) > MAX_CALLS_PER_TURN:
            messages.append(
                {
                    "role": "tool",
                    "content": f"Error: at most {MAX_CALLS_PER_TURN} tool calls per turn.",
                }
            )
        if self.tool_turns >= self.config.max_tool_calls:
            messages.append({"role": "user", "content": "No more tool calls: give your answer."})
        info = {"success": False, "tool_calls": len(calls), "attempt": self.attempts}
        return messages, 0.0, False, False, info

    def grade(self, answer: str | None, problem: Problem) -> Verdict:
        """Grade `answer` for `problem`: Countdown by exact evaluation, else with the grader."""
        if problem.kind != "countdown":
            return self.grader.grade(answer, problem.answer)
        if answer is None:
            return Verdict(False, "no answer")
        try:
            expr = parse_expression(
                answer.replace("\\times", "*").replace("\\div", "/"), _COUNTDOWN_LIMITS
            )
            check_numbers_used(expr.numbers, problem.numbers, exactly=self.config.countdown_use_all)
        except ExprError as e:
            return Verdict(False, f"invalid expression: {e}")
        return Verdict(expr.value == problem.target, "countdown")

    def sample_action(self, rng: np.random.Generator) -> str:
        """A random answer in the requested format; right about half the time."""
        if self.problem is None:
            guess = str(int(rng.integers(0, 10)))
        elif rng.random() < 0.5:
            guess = self.problem.answer
        elif self.problem.kind == "countdown":
            picks = rng.permutation(list(self.problem.numbers))[:2]
            guess = " + ".join(str(int(n)) for n in picks)
        else:
            guess = str(int(rng.integers(-20, 21)))
        if self.config.answer_format == "answer_tag":
            return f"<answer>{guess}</answer>"
        return f"The answer is \\boxed{{{guess}}}."
