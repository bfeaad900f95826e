"""Tool-calling envs: declare tools with `@tool` or a JSON schema; Hermes/Qwen2.5 format."""

from agentrl.envs.tool.calculator import calculate, evaluate
from agentrl.envs.tool.env import CalculatorEnv, PythonToolEnv, ToolEnv
from agentrl.envs.tool.http import HTTPTool, ToolError, http_tool
from agentrl.envs.tool.tools import (
    Tool,
    ToolArgumentError,
    ToolCall,
    parse_tool_calls,
    tool,
    validate,
)

__all__ = [
    "CalculatorEnv",
    "HTTPTool",
    "PythonToolEnv",
    "Tool",
    "ToolArgumentError",
    "ToolCall",
    "ToolEnv",
    "ToolError",
    "calculate",
    "evaluate",
    "http_tool",
    "parse_tool_calls",
    "tool",
    "validate",
]
