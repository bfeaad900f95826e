"""Tool envs: call parsing, schemas, the calculator, HTTPTool against a loopback server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentrl.envs import make
from agentrl.envs.check import check_env
from agentrl.envs.tool import (
    ToolArgumentError,
    ToolEnv,
    ToolError,
    evaluate,
    http_tool,
    tool,
)


def call(name: str, arguments: object) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_decorator_builds_schema_and_validates() -> None:
    @tool
    def lookup(city: str, days: int = 1) -> str:
        """Weather forecast for a city."""
        return f"{city}:{days}"

    fn = lookup.schema()["function"]
    assert fn["name"] == "lookup" and fn["description"] == "Weather forecast for a city."
    assert fn["parameters"]["properties"] == {
        "city": {"type": "string"},
        "days": {"type": "integer"},
    }
    assert fn["parameters"]["required"] == ["city"]
    assert lookup(city="Oslo", days=2) == "Oslo:2"
    with pytest.raises(ToolArgumentError, match="days must be of type integer"):
        lookup(city="Oslo", days="2")
    with pytest.raises(ToolArgumentError, match="unknown field 'x'"):
        lookup(city="Oslo", x=1)


def test_calculator_is_safe() -> None:
    assert evaluate("2 ** 10 + sqrt(16)") == 1028.0
    for bad in ("__import__('os').system('id')", "().__class__", "9 ** 9 ** 9", "1 / 0", "x" * 600):
        with pytest.raises(ValueError):
            evaluate(bad)


def test_malformed_and_huge_tool_calls_become_error_observations() -> None:
    env = make("tool-calc")
    env.reset(seed=0)
    actions = [
        "<tool_call>{not json</tool_call>",
        "<tool_call>[1, 2]</tool_call>",
        call("calculate", "1+1"),
        call("calculate", {"expression": 5}),
        call("calculate", {"expression": "1" * 200_000}),
        call("nope", {}),
        "<tool_call>" + "[" * 100_000 + "</tool_call>",
        call("calculate", {"expression": "import os"}),
    ]
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        assert isinstance(obs, list) and obs[0]["role"] == "tool", obs
        assert obs[0]["content"].startswith("Error"), obs
        env.reset(seed=0)


def test_calculator_episode() -> None:
    env = make("tool-calc")
    prompt, _ = env.reset(seed=3)
    assert env.tools[0]["function"]["name"] == "calculate"
    expression = prompt.split("What is ")[1].split("?")[0]
    obs, *_ = env.step(call("calculate", {"expression": expression}))
    value = obs[0]["content"]
    assert value == str(env.expected)
    _, reward, terminated, _, info = env.step(f"<answer>{value}</answer>")
    assert reward == 1.0 and terminated and info["success"]


@pytest.mark.parametrize("name", ["tool-calc"])
def test_check_env(name: str) -> None:
    assert check_env(name).ok


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/hang":
            time.sleep(5)
        if self.path == "/fail":
            self.send_response(500)
            self.end_headers()
            return
        payload = b"x" * (50 << 20) if self.path == "/huge" else json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        try:
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


SCHEMA = {
    "type": "object",
    "properties": {"q": {"type": "string", "maxLength": 100}},
    "required": ["q"],
    "additionalProperties": False,
}


def make_tool(url: str, **kwargs: object):
    return http_tool("search", "Search.", url, SCHEMA, allowed_hosts=["127.0.0.1"], **kwargs)


def test_http_tool_ok_and_validated(server: str) -> None:
    search = make_tool(server + "/echo")
    assert json.loads(search(q="hi")) == {"q": "hi"}
    with pytest.raises(ToolArgumentError):
        search(q="x" * 101)


def test_http_tool_host_allowlist() -> None:
    with pytest.raises(ValueError, match="not in allowed_hosts"):
        http_tool("t", "d", "http://example.com/x", SCHEMA, allowed_hosts=["127.0.0.1"])


def test_http_tool_hang_500_and_50mb(server: str) -> None:
    start = time.monotonic()
    with pytest.raises(ToolError, match="timed out"):
        make_tool(server + "/hang", timeout=0.5, retries=1)(q="a")
    assert time.monotonic() - start < 0.5 * 2 + 2
    with pytest.raises(ToolError, match="HTTP 500"):
        make_tool(server + "/fail", retries=2)(q="a")
    start = time.monotonic()
    text = make_tool(server + "/huge", max_response_bytes=1 << 16)(q="a")
    assert len(text) < (1 << 16) + 100 and "truncated" in text
    assert time.monotonic() - start < 5


def test_http_tool_in_env_gives_error_observation(server: str) -> None:
    class SearchEnv(ToolEnv):
        def __init__(self) -> None:
            super().__init__([make_tool(server + "/fail", retries=0)])

        def new_task(self) -> tuple[str, str]:
            return "Find it.", "it"

        def score(self, answer: str | None) -> tuple[float, bool]:
            return float(answer == "it"), answer == "it"

    env = SearchEnv()
    env.reset(seed=0)
    obs, *_ = env.step(call("search", {"q": "a"}))
    assert obs[0]["content"].startswith("Error") and "HTTP 500" in obs[0]["content"]


@pytest.mark.docker
def test_python_tool_env_in_docker(require_docker: None) -> None:
    assert check_env("tool-python").ok
    env = make("tool-python")
    env.reset(seed=2)
    obs, *_ = env.step(call("python", {"code": "print(sum(range(10)))"}))
    assert obs[0]["content"] == "stdout:\n45"
    obs, *_, info = env.step(call("python", {"code": "while True: pass"}))
    assert "Timed out" in obs[0]["content"]
    assert (info["tool_calls"], info["tool_errors"]) == (1, 1)


@pytest.mark.docker
def test_python_tool_counts_the_calls_that_failed(require_docker: None) -> None:
    """`tool_errors`: a program that exits non-zero, or a malformed call; not one that ran."""
    env = make("tool-python", tasks=["product"])
    _, reset_info = env.reset(seed=2)
    assert reset_info["task"] == "product"
    fails = call("python", {"code": "1 / 0"})
    runs = call("python", {"code": "print(2)"})
    obs, _, _, _, info = env.step(fails + runs + "<tool_call>{no json</tool_call>")
    assert "ZeroDivisionError" in obs[0]["content"] and obs[1]["content"] == "stdout:\n2"
    assert (info["tool_calls"], info["tool_errors"]) == (3, 2)
    _, _, done, _, info = env.step("<answer>1</answer>")
    assert done and (info["tool_calls"], info["tool_errors"]) == (0, 0)


@pytest.mark.docker
@pytest.mark.parametrize("family", ["count", "product", "range-sum"])
def test_python_tool_solver_computes_with_the_tool_then_answers(
    require_docker: None, family: str
) -> None:
    """`--expert solver` demonstrations: a python call whose output is the answer."""
    from agentrl.sft.expert import get_expert

    solver = get_expert("solver")
    for seed in (0, 1, 2):
        env = make("tool-python", tasks=[family])
        env.reset(seed=seed)
        obs, reward, done, _, _ = env.step(solver(env))
        assert obs == [{"role": "tool", "content": f"stdout:\n{env.expected}"}] and not done
        obs, reward, done, _, info = env.step(solver(env))
        assert (reward, done, info["success"]) == (1.0, True, True)


def test_python_tool_families_are_drawn_by_seed_and_the_control_has_no_tool() -> None:
    from agentrl.envs.tool.env import PythonToolEnv

    env = PythonToolEnv(tasks=["count", "product", "range-sum"], sandbox=object())
    drawn = {env.reset(seed=seed)[0].split()[0] for seed in range(30)}
    assert drawn == {"How", "What"} and env.tools  # all three families ("What is" twice)
    again = PythonToolEnv(tasks=["count", "product", "range-sum"], sandbox=object())
    assert again.reset(seed=7)[0] == env.reset(seed=7)[0]
    with pytest.raises(ValueError, match="choose one or more of count, product, range-sum"):
        PythonToolEnv(tasks=["sort"])

    control = PythonToolEnv(tasks=["product"], tool=False)
    control.reset(seed=0)
    assert control.tools == [] and control.max_turns == 1
    assert "without tools" in control.system_prompt
    _, reward, done, _, info = control.step(f"<answer>{control.expected}</answer>")
    assert (reward, done, info["success"]) == (1.0, True, True)
    control.reset(seed=0)
    _, reward, done, _, info = control.step(call("python", {"code": "print(1)"}))
    assert (reward, done, info["success"]) == (0.0, True, False)  # no tool to call
