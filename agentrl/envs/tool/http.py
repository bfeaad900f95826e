"""`HTTPTool`: a tool whose implementation is an HTTP API, called through httpx."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

from agentrl.envs.tool.tools import Tool


class ToolError(RuntimeError):
    """A tool failed in a way the model should hear about (an error observation)."""


def http_tool(
    name: str,
    description: str,
    url: str,
    parameters: dict[str, Any],
    *,
    allowed_hosts: list[str],
    method: str = "POST",
    timeout: float = 5.0,
    retries: int = 2,
    max_response_bytes: int = 1 << 20,
) -> Tool:
    """A tool that sends its (schema-validated) arguments as JSON to `url` and returns the body.

    `url`'s host must be in `allowed_hosts`. Connection errors, timeouts and 5xx answers are
    retried `retries` times with a short backoff; a body over `max_response_bytes` is cut
    (and says so). Failures raise `ToolError`, which tool envs turn into an error observation.
    """
    host = urlsplit(url).hostname
    if host not in allowed_hosts:
        raise ValueError(f"host {host!r} of {url!r} is not in allowed_hosts {allowed_hosts}")

    def call(**arguments: Any) -> str:
        import httpx

        last_error = "no attempt"
        for attempt in range(retries + 1):
            if attempt:
                time.sleep(min(0.2 * 2**attempt, 2.0))
            try:
                with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as c:
                    kwargs = {"params": arguments} if method == "GET" else {"json": arguments}
                    with c.stream(method, url, **kwargs) as response:
                        if response.status_code >= 500:
                            last_error = f"HTTP {response.status_code}"
                            continue
                        body = bytearray()
                        for chunk in response.iter_bytes():
                            body += chunk
                            if len(body) > max_response_bytes:
                                break
                        text = bytes(body[:max_response_bytes]).decode("utf-8", "replace")
                        if len(body) > max_response_bytes:
                            text += f"\n(response truncated at {max_response_bytes} bytes)"
                        if response.status_code >= 400:
                            raise ToolError(f"HTTP {response.status_code}: {text[:500]}")
                        return text
            except httpx.TimeoutException:
                last_error = f"timed out after {timeout} s"
            except httpx.TransportError as e:
                last_error = f"connection failed: {type(e).__name__}"
        raise ToolError(f"{name} failed after {retries + 1} attempts: {last_error}")

    return Tool(name=name, description=description, parameters=parameters, fn=call)


HTTPTool = http_tool
"""Alias: `HTTPTool(name, description, url, parameters, allowed_hosts=[...])`."""

__all__ = ["HTTPTool", "ToolError", "http_tool"]
