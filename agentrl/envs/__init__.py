"""Text environments for LLM agents: the `TokenEnv` contract, registry and checker."""

from agentrl.envs import builtin as _builtin  # noqa: F401 - registers the built-ins
from agentrl.envs.base import EnvNotResetError, Message, Observation, TokenEnv
from agentrl.envs.check import CheckReport, CheckResult, check_env
from agentrl.envs.parsing import parse_actions, parse_answer, parse_answer_int, parse_boxed
from agentrl.envs.registry import EnvSpec, UnknownEnvError, make, register, registry, spec

__all__ = [
    "CheckReport",
    "CheckResult",
    "check_env",
    "EnvNotResetError",
    "EnvSpec",
    "Message",
    "Observation",
    "TokenEnv",
    "UnknownEnvError",
    "make",
    "parse_actions",
    "parse_answer",
    "parse_answer_int",
    "parse_boxed",
    "register",
    "registry",
    "spec",
]
