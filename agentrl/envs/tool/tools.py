"""Declaring tools: the `@tool` decorator or a JSON schema, and the Hermes/Qwen2.5 call format.

>>> @tool
... def add(a: int, b: int) -> str:
...     '''Add two integers.'''
...     return str(a + b)
>>> add.schema()["function"]["parameters"]["required"]
['a', 'b']
>>> parse_tool_calls('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>')
[ToolCall(name='add', arguments={'a': 1, 'b': 2}, error=None)]
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_type_hints

MAX_CALL_CHARS = 100_000
_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_JSON_TYPES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}


@dataclass
class Tool:
    """A callable the model may invoke: name, description, JSON-schema parameters, function."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style schema that chat templates take through `tools=`."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def __call__(self, **arguments: Any) -> str:
        """Validate `arguments` against the schema, call the function, return text."""
        problems = validate(arguments, self.parameters)
        if problems:
            raise ToolArgumentError("; ".join(problems))
        result = self.fn(**arguments)
        return result if isinstance(result, str) else json.dumps(result)


class ToolArgumentError(ValueError):
    """The arguments of a tool call do not match the tool's schema."""


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    schema: dict[str, Any] | None = None,
) -> Any:
    """Make a `Tool` from a function; the schema comes from its type hints unless given.

    Use as `@tool` or `@tool(name=..., schema={...})`.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        doc = inspect.getdoc(f) or ""
        return Tool(
            name=name or f.__name__,
            description=description or doc.split("\n\n")[0].strip(),
            parameters=schema or _schema_from_signature(f),
            fn=f,
        )

    return wrap(fn) if fn is not None else wrap


def _schema_from_signature(f: Callable[..., Any]) -> dict[str, Any]:
    hints = get_type_hints(f)
    props: dict[str, Any] = {}
    required = []
    for pname, param in inspect.signature(f).parameters.items():
        hint = hints.get(pname, str)
        origin = getattr(hint, "__origin__", hint)
        props[pname] = {"type": _JSON_TYPES.get(origin, "string")}
        if param.default is inspect.Parameter.empty:
            required.append(pname)
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


def validate(value: Any, schema: dict[str, Any], path: str = "arguments") -> list[str]:
    """Problems of `value` against a JSON schema subset (type, properties, required,
    additionalProperties, enum, minimum/maximum, maxLength, items); empty when valid."""
    problems: list[str] = []
    kind = schema.get("type")
    checks = {
        "string": str,
        "integer": int,
        "number": (int, float),
        "boolean": bool,
        "array": list,
        "object": dict,
        "null": type(None),
    }
    if kind in checks:
        ok = isinstance(value, checks[kind])
        if kind in ("integer", "number") and isinstance(value, bool):
            ok = False
        if not ok:
            return [f"{path} must be of type {kind}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path} must be one of {schema['enum']}")
    if isinstance(value, str) and len(value) > schema.get("maxLength", float("inf")):
        problems.append(f"{path} is longer than {schema['maxLength']} characters")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < schema.get("minimum", float("-inf")) or value > schema.get(
            "maximum", float("inf")
        ):
            problems.append(f"{path} is out of range")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            problems += validate(item, schema["items"], f"{path}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                problems.append(f"{path} is missing required field {key!r}")
        for key, item in value.items():
            if key in props:
                problems += validate(item, props[key], f"{path}.{key}")
            elif schema.get("additionalProperties", True) is False:
                problems.append(f"{path} has unknown field {key!r}")
    return problems


@dataclass
class ToolCall:
    """One parsed `<tool_call>`: a name and arguments, or an error saying what was malformed."""

    name: str
    arguments: dict[str, Any]
    error: str | None = None


def parse_tool_calls(text: str) -> list[ToolCall]:
    """Every `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in `text`, in order.

    A malformed call becomes a `ToolCall` with `error` set; this never raises.
    """
    calls = []
    for body in _CALL_RE.findall(text):
        if len(body) > MAX_CALL_CHARS:
            calls.append(ToolCall("", {}, f"tool call longer than {MAX_CALL_CHARS} characters"))
            continue
        try:
            data = json.loads(body)
        except (json.JSONDecodeError, RecursionError) as e:
            calls.append(ToolCall("", {}, f"tool call is not valid JSON: {e}"))
            continue
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            calls.append(ToolCall("", {}, 'tool call must be {"name": str, "arguments": {...}}'))
            continue
        arguments = data.get("arguments", {})
        if isinstance(arguments, str):  # some models send the arguments JSON-encoded
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                pass
        if not isinstance(arguments, dict):
            calls.append(ToolCall(data["name"], {}, "`arguments` must be a JSON object"))
            continue
        calls.append(ToolCall(data["name"], arguments))
    return calls
