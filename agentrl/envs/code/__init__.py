"""The `code` env: Python problems with hidden unit tests, graded in a sandbox."""

from agentrl.envs.code.env import CodeEnv, extract_code
from agentrl.envs.code.problems import Problem, load_problems

__all__ = ["CodeEnv", "Problem", "extract_code", "load_problems"]
