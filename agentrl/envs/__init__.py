"""Text environments for LLM agents: the `TokenEnv` contract, registry and checker.

Importing this package registers the built-ins and the `agentrl.envs` entry points, in
agentrl's registry and in Gymnasium's (`gymnasium.make("agentrl/sokoban")`).
"""

from agentrl.envs import builtin as _builtin  # noqa: F401 - registers the built-ins
from agentrl.envs.base import EnvNotResetError, Message, Observation, TokenEnv
from agentrl.envs.check import CheckReport, CheckResult, check_env
from agentrl.envs.parsing import parse_actions, parse_answer, parse_answer_int, parse_boxed
from agentrl.envs.registry import (
    EnvSpec,
    UnknownEnvError,
    load_entry_points,
    make,
    register,
    registry,
    spec,
)
from agentrl.envs.spaces import AnyText, TextOrMessages

load_entry_points()  # after the built-ins: an entry point never replaces a built-in name

__all__ = [
    "AnyText",
    "CheckReport",
    "CheckResult",
    "check_env",
    "EnvNotResetError",
    "EnvSpec",
    "Message",
    "Observation",
    "TextOrMessages",
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
