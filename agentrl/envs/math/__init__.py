"""Verifiable math environments: `MathEnv`, problem data and generators, grading, safe expressions.

Registered as `math` (file or generator), `math-arithmetic`, `math-linear`, `math-multiturn`,
`countdown` and `math-tool` (sandboxed Python tool, needs Docker). See docs/math.md.
"""

from agentrl.envs.math.data import DataError, Problem, load_problems, split_problems
from agentrl.envs.math.env import MathEnv, MathEnvConfig
from agentrl.envs.math.expr import ExprError, check_numbers_used, evaluate, parse_expression
from agentrl.envs.math.grading import Grader, GradingConfig, Verdict, extract_answer

__all__ = [
    "DataError",
    "ExprError",
    "Grader",
    "GradingConfig",
    "MathEnv",
    "MathEnvConfig",
    "Problem",
    "Verdict",
    "check_numbers_used",
    "evaluate",
    "extract_answer",
    "load_problems",
    "parse_expression",
    "split_problems",
]
