"""Tool-calling envs in the Qwen2.5/Hermes format, and two built-ins: `tool-calc`, `tool-python`.

The model calls tools with `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`; each
result comes back as a `tool` role message. `env.tools` holds the schemas to pass to the
tokenizer's chat template (`tools=`). The episode ends when the model answers without a tool
call: the final `<answer>...</answer>` is scored.

The rollout's chat-template bridge renders `env.tools`: through the template when it writes
`tools=` itself (Qwen2.5, Hermes), else as a Hermes-style tool block appended to the system
message (plain ChatML, e.g. the `tiny` model). So `system_prompt` describes the task and the
call format only; it does not need to list the tools.
"""

from __future__ import annotations

import json
from typing import Any

from agentrl.envs.base import Message, Observation, TokenEnv
from agentrl.envs.parsing import parse_answer
from agentrl.envs.spaces import TextOrMessages
from agentrl.envs.tool.calculator import calculate
from agentrl.envs.tool.http import ToolError
from agentrl.envs.tool.tools import Tool, ToolArgumentError, parse_tool_calls, tool
from agentrl.sandbox.base import SandboxError

MAX_TOOL_OUTPUT_CHARS = 4000
MAX_CALLS_PER_TURN = 4


class ToolEnv(TokenEnv):
    """Base class: subclasses set `toolset` in `__init__` and implement `new_task`/`score`."""

    system_prompt = (
        "Solve the task. You may call the provided tools: write "
        '<tool_call>{"name": "<tool>", "arguments": {...}}</tool_call> and wait for the result. '
        "When you know the answer, reply with <answer>...</answer> and no tool call."
    )
    max_turns = 6
    observation_space = TextOrMessages()
    """The task as text, then tool results as `tool` messages."""

    def __init__(self, toolset: list[Tool], max_turns: int = 6):
        super().__init__()
        self.toolset = {t.name: t for t in toolset}
        self.max_turns = max_turns
        self.turn = 0
        self.last_call_ok = False
        """Whether the latest `call_tool` ran without error."""

    @property
    def tools(self) -> list[dict[str, Any]]:
        """Tool schemas for the chat template (`tokenizer.apply_chat_template(..., tools=)`)."""
        return [t.schema() for t in self.toolset.values()]

    def new_task(self) -> tuple[str, Any]:
        """A task prompt and the hidden expected answer (use `self.np_random`)."""
        raise NotImplementedError

    def score(self, answer: str | None) -> tuple[float, bool]:
        """Reward and success for the final answer text (None: no `<answer>` given)."""
        raise NotImplementedError

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Draw a new task."""
        super().reset(seed=seed)
        self.turn = 0
        prompt, self.expected = self.new_task()
        return prompt, {"tools": [t for t in self.toolset]}

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one tool; every failure becomes error text for the model, never an exception.

        `last_call_ok` then says whether the call ran without error (`tool_errors` in the
        step info counts those that did not)."""
        self.last_call_ok = False
        if name not in self.toolset:
            return f"Error: unknown tool {name!r}. Available: {', '.join(self.toolset)}."
        try:
            output = self.toolset[name](**arguments)
        except ToolArgumentError as e:
            return f"Error: invalid arguments for {name}: {e}"
        except (ToolError, ValueError, ArithmeticError) as e:
            return f"Error: {e}"
        self.last_call_ok = True
        if len(output) > MAX_TOOL_OUTPUT_CHARS:
            output = output[:MAX_TOOL_OUTPUT_CHARS] + "\n(output truncated)"
        return output

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Run the tool calls in `action`, or score its final answer when it has none."""
        self.require_reset()
        self.turn += 1
        calls = parse_tool_calls(action)
        if calls:
            messages: list[Message] = []
            errors = 0
            for call in calls[:MAX_CALLS_PER_TURN]:
                if call.error:
                    text, ok = f"Error: {call.error}", False
                else:
                    text = self.call_tool(call.name, call.arguments)
                    ok = self.last_call_ok
                errors += not ok
                messages.append({"role": "tool", "content": text})
            if len(calls) > MAX_CALLS_PER_TURN:
                messages.append(
                    {
                        "role": "tool",
                        "content": f"Error: at most {MAX_CALLS_PER_TURN} tool calls per turn; the rest were ignored.",
                    }
                )
            last = self.turn >= self.max_turns
            info: dict[str, Any] = self._tool_counts(len(calls), errors)
            if last:
                info["success"] = False
            return messages, 0.0, last, False, info
        reward, success = self.score(parse_answer(action))
        info = {"success": success, **self._tool_counts(0, 0)}
        return "Episode finished.", reward, True, False, info

    def _tool_counts(self, calls: int, errors: int) -> dict[str, int]:
        """The step info's `tool_calls` and `tool_errors` (what `tool_use_stats` reads); none
        when the env offers no tool (tool-python's `tool=False`), whose episodes then report
        no tool use rather than 0%."""
        return {"tool_calls": calls, "tool_errors": errors} if self.toolset else {}


class CalculatorEnv(ToolEnv):
    """Arithmetic with large numbers; a `calculate` tool is available."""

    def __init__(self, max_turns: int = 6):
        super().__init__([calculate], max_turns=max_turns)

    def new_task(self) -> tuple[str, int]:
        a, b, c = (int(x) for x in self.np_random.integers(1000, 100000, size=3))
        d = int(self.np_random.integers(2, 99))
        value = a * b - c * d
        return (
            f"What is {a} * {b} - {c} * {d}? Answer with an integer in <answer>...</answer>.",
            value,
        )

    def score(self, answer: str | None) -> tuple[float, bool]:
        """1.0 for the exact integer, else 0."""
        try:
            ok = answer is not None and int(answer.replace(",", "").strip()) == self.expected
        except ValueError:
            ok = False
        return float(ok), ok


TASK_FAMILIES = ("count", "product", "range-sum")
"""The task families of `tool-python`, each with an integer answer a small model cannot
work out in its head but one line of Python prints."""


class PythonToolEnv(ToolEnv):
    """Tasks best solved by running Python; a sandboxed `python` tool is available.

    `tasks` names the families drawn (one per seed, uniformly): `count` (the integers up to
    n that are divisible by k or contain the digit k), `product` (of two 4-digit numbers),
    `range-sum` (the sum of the integers in a range that are divisible by k). `tool=False`
    is the no-tool control: the same tasks with no tool offered, answered in one turn.

    >>> env = PythonToolEnv(tasks=["product"], sandbox=object())
    >>> env.reset(seed=0)[0]
    'What is 8655 * 6732? Answer with an integer in <answer>...</answer>.'
    >>> env.expected
    58265460
    """

    bounds_its_own_calls = True  # the python tool runs in the sandbox, which bounds it

    def __init__(
        self,
        max_turns: int = 6,
        timeout: float = 5.0,
        sandbox: Any = None,
        sandbox_config: dict[str, Any] | None = None,
        tasks: list[str] | tuple[str, ...] = ("count",),
        tool: bool = True,
    ):
        unknown = sorted(set(tasks) - set(TASK_FAMILIES))
        if unknown or not tasks:
            raise ValueError(
                f"tasks={list(tasks)!r}: choose one or more of {', '.join(TASK_FAMILIES)}"
            )
        self.tasks = tuple(tasks)
        self._program_ok = True
        self._sandbox = sandbox
        self._sandbox_config = sandbox_config or {}
        self.timeout = timeout
        super().__init__([self._python_tool()] if tool else [], max_turns=max_turns)
        if not tool:
            self.system_prompt = (
                "Solve the task without tools. Reply with the answer in <answer>...</answer>."
            )
            self.max_turns = 1

    @property
    def sandbox(self) -> Any:
        """The sandbox the `python` tool runs in (shared per config, created on first use)."""
        if self._sandbox is None:
            from agentrl.envs.code.env import shared_sandbox
            from agentrl.sandbox import SandboxConfig

            self._sandbox = shared_sandbox(SandboxConfig(**self._sandbox_config))
        return self._sandbox

    def _python_tool(self) -> Tool:
        @tool(
            name="python",
            schema={
                "type": "object",
                "properties": {
                    "code": {
                        "type": "string",
                        "maxLength": 100_000,
                        "description": "Python 3 source; print what you want to see.",
                    }
                },
                "required": ["code"],
                "additionalProperties": False,
            },
        )
        def run_python(code: str) -> str:
            """Run Python code in a sandbox (no network, 5 s) and return its output."""
            result = self.sandbox.run(code, timeout=self.timeout)
            if result.sandbox_error is not None:  # not the model's doing: the episode ends
                # `env_error`, out of the loss
                raise SandboxError(f"the python tool's sandbox failed: {result.sandbox_error}")
            self._program_ok = result.ok
            return result.summary(MAX_TOOL_OUTPUT_CHARS)

        return run_python

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """`ToolEnv.call_tool`; a program that exits non-zero, times out or is killed counts
        as a failed call (its output still goes back to the model)."""
        self._program_ok = True
        text = super().call_tool(name, arguments)
        self.last_call_ok = self.last_call_ok and self._program_ok
        return text

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Draw a new task; the info's `task` names its family (evaluation reports each)."""
        prompt, info = super().reset(seed=seed, options=options)
        return prompt, {**info, "task": self.task[0]}

    def new_task(self) -> tuple[str, int]:
        family = self.tasks[0]
        if len(self.tasks) > 1:
            family = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        if family == "product":
            a, b = (int(x) for x in self.np_random.integers(1000, 10000, size=2))
            self.task = (family, a, b, 0)
            return f"What is {a} * {b}? Answer with an integer in <answer>...</answer>.", a * b
        if family == "range-sum":
            a = int(self.np_random.integers(1, 1000))
            b = a + int(self.np_random.integers(1000, 10000))
            k = int(self.np_random.integers(3, 10))
            self.task = (family, a, b, k)
            prompt = (
                f"What is the sum of the integers from {a} to {b} that are divisible by {k}? "
                "Answer with an integer in <answer>...</answer>."
            )
            return prompt, sum(i for i in range(a, b + 1) if i % k == 0)
        n = int(self.np_random.integers(1000, 50000))
        k = int(self.np_random.integers(3, 10))
        expected = sum(1 for i in range(1, n + 1) if i % k == 0 or str(k) in str(i))
        self.task = (family, 1, n, k)
        prompt = (
            f"How many integers from 1 to {n} are divisible by {k} or contain the digit "
            f"{k}? Answer with an integer in <answer>...</answer>."
        )
        return prompt, expected

    score = CalculatorEnv.score

    def expert_answer(self, max_actions: int | None = None) -> str:
        """The demonstration (`--expert solver`): one line of Python that prints the answer,
        then the answer it printed (without the tool: the answer at once).

        >>> env = PythonToolEnv(sandbox=object())
        >>> _ = env.reset(seed=0)
        >>> print(env.expert_answer())  # doctest: +ELLIPSIS
        <tool_call>
        {"name": "python", "arguments": {"code": "print(sum(1 for i in range(1, ... + 1) if i % ... == 0 or '...' in str(i)))"}}
        </tool_call>
        """
        if self.turn > 0 or not self.toolset:
            return f"<answer>{self.expected}</answer>"
        family, a, b, k = self.task
        if family == "product":
            code = f"print({a} * {b})"
        elif family == "range-sum":
            code = f"print(sum(i for i in range({a}, {b} + 1) if i % {k} == 0))"
        else:
            code = f"print(sum(1 for i in range(1, {b} + 1) if i % {k} == 0 or '{k}' in str(i)))"
        call = json.dumps({"name": "python", "arguments": {"code": code}})
        return f"<tool_call>\n{call}\n</tool_call>"
