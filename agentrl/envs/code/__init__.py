"""The `code` env: Python problems with hidden unit tests, graded in a sandbox."""

from agentrl.envs.code.env import (
    CodeEnv,
    SolutionCheck,
    check_solutions,
    extract_code,
    run_tests,
)
from agentrl.envs.code.problems import Problem, load_problems

__all__ = [
    "CodeEnv",
    "Problem",
    "SolutionCheck",
    "check_solutions",
    "extract_code",
    "load_problems",
    "run_tests",
]
