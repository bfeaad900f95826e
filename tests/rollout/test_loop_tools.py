"""Tool-calling and code envs through the rollout loop, token-exact.

`PolicyEngine` is a fake engine that reads the prompt it is given (decoded only to decide
what to say) and answers with real `<tool_call>` blocks and fenced code, encoded with the
tokenizer and ended on the stop id, the way a model would sample them.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentrl.envs import make
from agentrl.envs.code import CodeEnv, load_problems
from agentrl.rollout.config import RolloutConfig, SamplingConfig
from agentrl.rollout.engine import Completion, GenerationRequest
from agentrl.rollout.loop import rollout
from agentrl.trajectory.bridge import ChatBridge, tools_block
from agentrl.trajectory.types import Status, Trajectory


def _load_bridge_tools_tests() -> Any:
    path = Path(__file__).parents[1] / "trajectory" / "test_bridge_tools.py"
    spec = importlib.util.spec_from_file_location("_bridge_tools_fixtures", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tokenizer = _load_bridge_tools_tests().tokenizer  # local Qwen2.5 tool template and others


@dataclass
class PolicyEngine:
    """Answers each request with `policy(prompt_text, turn)`, encoded and ended on a stop id
    (or cut at `max_new_tokens`, finish reason `length`)."""

    tokenizer: Any
    policy: Callable[[str, int], str]
    log: list[tuple[GenerationRequest, Completion]] = field(default_factory=list)

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """One completion per request (the turn is the number of earlier requests)."""
        out = []
        for req in requests:
            turn = sum(r.session_id == req.session_id for r, _ in self.log)
            text = self.policy(self.tokenizer.decode(req.prompt_ids), turn)
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            finish = "length" if len(ids) >= req.params.max_new_tokens else "stop"
            if finish == "length":
                ids = ids[: req.params.max_new_tokens]
            else:
                ids = ids + [req.params.stop_token_ids[0]]
            completion = Completion(ids, [-0.5] * len(ids), finish, 0)
            self.log.append((req, completion))
            out.append(completion)
        return out

    def update_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Nothing to load."""

    def close(self) -> None:
        """Nothing to release."""


def tool_call(name: str, **arguments: Any) -> str:
    import json

    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


_RESULT_RE = re.compile(
    r"<tool_response>\n(.*?)\n</tool_response>|<\|im_start\|>tool\n(.*?)<\|im_end\|>", re.DOTALL
)


def calculator_policy(prompt: str, turn: int) -> str:
    """Turn 0: a malformed call; 1: the right call; 2: answer with the last tool result."""
    if turn == 0:
        return 'I will use the calculator.\n<tool_call>{"name": "calculate", oops}</tool_call>'
    if turn == 1:
        expression = re.findall(r"What is (.*?)\?", prompt)[-1]
        return "Again, properly.\n" + tool_call("calculate", expression=expression)
    last = [a or b for a, b in _RESULT_RE.findall(prompt)][-1]
    return f"<answer>{last}</answer>"


def check_token_exact(traj: Trajectory, engine: PolicyEngine, episode: int) -> None:
    """Requests are prefixes of the sample, completions verbatim, and the whole sample is the
    template's own rendering of the conversation (tools included) + the last sampled ids."""
    tok, bridge = engine.tokenizer, ChatBridge(engine.tokenizer)
    calls = [(r, c) for r, c in engine.log if r.session_id == f"{traj.group_id}-{episode}"]
    (sample,) = traj.samples
    assert len(calls) == traj.num_turns
    for request, completion in calls:
        n = len(request.prompt_ids)
        assert sample.token_ids[:n] == request.prompt_ids
        assert sample.token_ids[n : n + len(completion.token_ids)] == completion.token_ids
        assert sample.sampler_logp[n : n + len(completion.token_ids)] == completion.logp
    assert sum(sample.loss_mask) == sum(len(c.token_ids) for _, c in calls)
    tools = make(traj.env_name).tools if traj.env_name.startswith("tool") else []
    messages = bridge.first_messages(traj.system_prompt, traj.first_observation, tools)
    for turn in traj.turns[:-1]:
        messages.append({"role": "assistant", "content": turn.action_text})
        obs = turn.observation
        messages.extend([{"role": "user", "content": obs}] if isinstance(obs, str) else obs)
    rendered = tok.apply_chat_template(
        messages,
        tools=tools if bridge.renders_tools else None,
        tokenize=False,
        add_generation_prompt=True,
    )
    last_ids = calls[-1][1].token_ids
    assert sample.token_ids == tok.encode(rendered, add_special_tokens=False) + last_ids


@pytest.mark.parametrize(
    ("family", "executor"),
    [("qwen2.5-tools", "thread"), ("tiny-chatml", "thread"), ("qwen2.5-tools", "process")],
)
def test_tool_calc_episodes_with_tool_calls(family: str, executor: str) -> None:
    """Envs in threads or in worker processes: the tool schemas reach the prompt either way."""
    tok = tokenizer(family)
    engine = PolicyEngine(tok, calculator_policy)
    result = rollout(
        engine,
        functools.partial(make, "tool-calc"),
        tok,
        seeds=[0, 1, 2],
        group_size=1,
        cfg=RolloutConfig(max_context_tokens=8192, env_executor=executor, num_env_workers=2),
        env_name="tool-calc",
    )
    assert result.metrics["rollout/success_rate"] == 1.0
    assert result.metrics["rollout/mean_reward"] == 1.0
    for episode, traj in enumerate(result.trajectories):
        assert traj.status == Status.OK and traj.num_turns == 3, traj.error
        first, second, last = traj.turns
        # a malformed call and a good call: both answered with `tool` role messages
        assert isinstance(first.observation, list) and first.observation[0]["role"] == "tool"
        assert first.observation[0]["content"].startswith("Error: tool call is not valid JSON")
        env = make("tool-calc")
        env.reset(seed=traj.seed)
        assert second.observation == [{"role": "tool", "content": str(env.expected)}]
        assert last.action_text == f"<answer>{env.expected}</answer>"
        assert (last.reward, last.terminated, last.info["success"]) == (1.0, True, True)
        sample = traj.samples[0]
        first_prompt = tok.decode(sample.token_ids[: sample.loss_mask.index(1)])
        assert first_prompt.count('"name": "calculate"') == 1  # the schema, rendered once
        prompt = tok.decode(sample.token_ids)
        if family == "tiny-chatml":
            assert tools_block(env.tools) in first_prompt
        else:
            assert "<tool_response>\n" + str(env.expected) + "\n</tool_response>" in prompt
        check_token_exact(traj, engine, episode)


PROBLEMS = {p.prompt: p for p in load_problems()}


def code_policy(prompt: str, turn: int) -> str:
    """Turn 0: a wrong solution; turn 1: the problem's reference solution."""
    problem = next(p for text, p in PROBLEMS.items() if text in prompt)
    if turn == 0:
        return "First try:\n```python\ndef nothing():\n    return None\n```"
    return f"Fixed:\n```python\n{problem.solution}```\n"


@pytest.mark.docker
def test_code_env_episodes_with_feedback_then_fix(require_docker: None) -> None:
    tok = tokenizer("qwen2.5-tools")
    engine = PolicyEngine(tok, code_policy)
    result = rollout(
        engine,
        lambda: CodeEnv(max_turns=3),
        tok,
        seeds=[0, 1, 2, 3],
        group_size=1,
        cfg=RolloutConfig(max_context_tokens=8192, sampling=SamplingConfig(max_new_tokens=1024)),
        env_name="code",
    )
    assert result.metrics["rollout/success_rate"] == 1.0
    for episode, traj in enumerate(result.trajectories):
        assert traj.status == Status.OK and traj.num_turns == 2, traj.error
        first, last = traj.turns
        assert first.info["valid"] and first.info["passed"] == 0 and first.reward == 0.0
        assert isinstance(first.observation, str) and "Failing tests" in first.observation
        assert (last.reward, last.info["success"]) == (1.0, True)
        check_token_exact(traj, engine, episode)


def test_rollout_cli_tool_calc_with_the_tiny_model(tmp_path) -> None:
    from typer.testing import CliRunner

    from agentrl.cli import app
    from agentrl.rollout.models import load_tokenizer
    from agentrl.trajectory.io import read_trajectories

    args = [
        "rollout", "--env", "tool-calc", "--model", "tiny", "--episodes", "2",
        "--max-new-tokens", "16", "--out", str(tmp_path), "--no-progress",
    ]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    data = read_trajectories(tmp_path / "trajectories" / "step_000000.jsonl")
    tok = load_tokenizer("tiny")
    assert not ChatBridge(tok).renders_tools  # the tiny ChatML template ignores tools=
    for traj in data.trajectories:
        assert traj.status in ("ok", "truncated") and traj.num_turns >= 1
        prompt = tok.decode(traj.samples[0].token_ids)
        assert tools_block(make("tool-calc").tools) in prompt


def sleepy_python_policy(prompt: str, turn: int) -> str:
    """Turn 0: a python call that takes 3 s; then answer with what it printed."""
    if turn == 0:
        return tool_call("python", code="import time; time.sleep(3); print(6 * 7)")
    return f"<answer>{[a or b for a, b in _RESULT_RE.findall(prompt)][-1]}</answer>"


@pytest.mark.docker
def test_a_container_killed_mid_call_ends_only_its_episode_as_env_error(
    require_docker: None,
) -> None:
    """`docker kill` of a container while its program runs: that episode is `env_error` (not
    trainable: out of the loss), the others finish, and the pool serves the next rollout."""
    import threading

    from agentrl.envs.tool.env import PythonToolEnv
    from agentrl.sandbox import DockerSandbox

    sandbox = DockerSandbox(pool_size=4, memory_mb=128, work_mb=16, tmp_mb=16)
    tok = tokenizer("qwen2.5-tools")

    def run(seeds: list[int]) -> Any:
        return rollout(
            PolicyEngine(tok, sleepy_python_policy),
            lambda: PythonToolEnv(max_turns=3, sandbox=sandbox),
            tok,
            seeds=seeds,
            group_size=1,
            cfg=RolloutConfig(max_context_tokens=8192, num_env_workers=4),
            env_name="tool-python",
        )

    victim = sandbox.container_ids()[0]
    killer = threading.Timer(1.5, lambda: sandbox.client.api.kill(victim))
    try:
        killer.start()
        result = run([0, 1, 2, 3])
        killer.join()
        failed = [t for t in result.trajectories if t.status == Status.ENV_ERROR]
        assert len(failed) == 1, [(t.status, t.error) for t in result.trajectories]
        assert "sandbox failed" in failed[0].error and not failed[0].status.trainable
        assert failed[0].num_turns == 1 and failed[0].samples  # its turn is kept, untrained
        for traj in result.trajectories:
            if traj is not failed[0]:
                assert traj.status == Status.OK, traj.error
                assert traj.turns[0].observation == [{"role": "tool", "content": "stdout:\n42"}]
        assert result.metrics["rollout/env_error_rate"] == 0.25
        again = run([4, 5, 6, 7])  # the killed container was replaced
        assert all(t.status == Status.OK for t in again.trajectories)
        assert victim not in sandbox.container_ids()
    finally:
        killer.cancel()
        sandbox.close()
