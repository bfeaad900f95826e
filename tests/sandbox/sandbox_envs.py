"""An env for lifetime tests: every reset and step runs a program in the Docker sandbox."""

from __future__ import annotations

from typing import Any

from agentrl.envs.base import TokenEnv
from agentrl.envs.code.env import shared_sandbox
from agentrl.sandbox import ExecResult, SandboxConfig, SandboxError

SMALL = SandboxConfig(pool_size=1, memory_mb=128, work_mb=16, tmp_mb=16)


def _run(code: str, **kwargs: Any) -> ExecResult:
    """Run `code` in the shared sandbox; a failure of the sandbox itself raises (the episode
    ends `env_error`)."""
    result = shared_sandbox(SMALL).run(code, **kwargs)
    if result.sandbox_error is not None:
        raise SandboxError(result.sandbox_error)
    return result


class SandboxTurns(TokenEnv):
    """Two turns; the sandbox counts the letters of each answer (reward: more is better)."""

    system_prompt = "Answer with many letters."
    max_turns = 2
    bounds_its_own_calls = True  # its work runs in the sandbox, as tool-python's does

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.turn = 0
        hello = _run("print('hello')").stdout.strip()
        return f"The sandbox says {hello}.", {}

    def step(self, action: str):
        self.require_reset()
        self.turn += 1
        result = _run("import sys; print(sum(c.isalpha() for c in sys.stdin.read()))", stdin=action)
        letters = int(result.stdout or 0)
        done = self.turn >= self.max_turns
        reward = min(letters, 20) / 20
        return "Again.", reward, done, False, {"success": reward > 0.5} if done else {}
