"""What one `reset` or `step` return must look like, checked on every call of a run.

`check_env` runs these checks strictly over a few scripted episodes. The rollout runs them
on every call with `strict=False`: only what the run cannot go on with (a wrong arity, an
observation that is not text or chat messages, a reward that is not a finite number, flags
that are not bools, an info that is not a dict); an int reward or a missing
`info["success"]` passes there, as the rollout converts or does without them.

>>> step_problem(("ok", 0.0, True, {})).returned
"a tuple of 4 values: ('ok', 0.0, True, {})"
>>> reset_problem(("Find the box.", {})) is None
True
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

import numpy as np


class Problem(NamedTuple):
    """What a call returned that breaks the contract, and how to fix the env."""

    returned: str
    """What the call returned, e.g. `a tuple of 4 values: ('ok', 0.0, True, {})`."""
    fix: str


class EnvContractError(Exception):
    """An env's `reset` or `step` returned what the `TokenEnv` contract does not allow.

    The rollout raises it on the first such return and the run stops: nothing could be
    trained on it, and the fix is in the env. An exception the env raises itself (a
    sandbox failure, say) is not this: it ends one episode as `env_error`.
    """

    def __init__(self, env: str, call: str, problem: Problem) -> None:
        super().__init__(f"{env}: {call} returned {problem.returned}; fix: {problem.fix}")
        self.env = env
        """The env class, as `module.Class`."""
        self.call = call
        """The call, e.g. `step (turn 1 of the episode with seed 3)`."""
        self.returned = problem.returned
        self.fix = problem.fix


def env_label(env: Any) -> str:
    """`module.Class` of an env instance."""
    cls = type(env)
    return f"{cls.__module__}.{cls.__qualname__}"


_OBSERVATION_FIX = "return a str, or a list of {'role': 'user' | 'tool', 'content': str} dicts"
_STEP_FIX = "return 5 values: (observation, reward, terminated, truncated, info)"
_RESET_FIX = "return 2 values: (observation, info_dict)"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def _shape(out: Any) -> str:
    """`a tuple of 4 values: (...)`, or `an int: 7`."""
    name = type(out).__name__
    if isinstance(out, tuple | list):
        return f"a {name} of {len(out)} values: {_shown(out)}"
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{article} {name}: {_shown(out)}"


def observation_problem(obs: Any) -> Problem | None:
    """A problem with an observation (a str, or a non-empty list of user/tool messages)."""
    if isinstance(obs, str):
        return None
    if not isinstance(obs, list) or not obs:
        return Problem(f"an observation that is {_shape(obs)}", _OBSERVATION_FIX)
    for m in obs:
        if (
            not isinstance(m, dict)
            or set(m) - {"role", "content", "name", "tool_call_id"}
            or m.get("role") not in ("user", "tool")
            or not isinstance(m.get("content"), str)
        ):
            return Problem(f"an observation with the message {_shown(m)}", _OBSERVATION_FIX)
    return None


def reset_problem(out: Any, *, strict: bool = True) -> Problem | None:
    """A problem with what `reset` returned: `(observation, info_dict)` (`strict=False`
    also takes a list)."""
    if not isinstance(out, tuple if strict else tuple | list) or len(out) != 2:
        return Problem(_shape(out), _RESET_FIX)
    if not isinstance(out[1], dict):
        return Problem(f"an info that is {_shape(out[1])}", _RESET_FIX)
    return observation_problem(out[0])


def step_problem(out: Any, *, strict: bool = True) -> Problem | None:
    """A problem with what `step` returned: `(observation, reward, terminated, truncated,
    info)`. `strict=False` (the rollout) also takes a list, any finite real reward and numpy
    bools, and leaves out `info["success"]` at the end of an episode."""
    if not isinstance(out, tuple if strict else tuple | list) or len(out) != 5:
        return Problem(_shape(out), _STEP_FIX)
    obs, reward, terminated, truncated, info = out
    problem = observation_problem(obs)
    if problem is not None:
        return problem
    number = float if strict else numbers.Real
    if isinstance(reward, bool) or not isinstance(reward, number) or not math.isfinite(reward):
        return Problem(
            f"the reward {_shown(reward)} ({type(reward).__name__})",
            "return a finite Python float, e.g. float(reward)",
        )
    flag = bool if strict else (bool, np.bool_)
    if not isinstance(terminated, flag) or not isinstance(truncated, flag):
        return Problem(
            f"terminated={_shown(terminated)}, truncated={_shown(truncated)}",
            "return Python bools, e.g. bool(terminated), not ints or strings",
        )
    if not isinstance(info, dict):
        return Problem(f"an info that is {_shape(info)}", "return a dict as the 5th value")
    if strict and (terminated or truncated) and not isinstance(info.get("success"), bool):
        return Problem(
            f"an episode end with info['success']={_shown(info.get('success'))}",
            "put info['success'] = bool(...) on the last step of every episode",
        )
    return None


def checked_reset(out: Any, *, env: str, call: str) -> tuple[Any, dict[str, Any]]:
    """`out` of `reset`, or an `EnvContractError` naming `env` (`env_label`) and `call`;
    what a run can use passes (`strict=False`)."""
    problem = reset_problem(out, strict=False)
    if problem is not None:
        raise EnvContractError(env, call, problem)
    return out


def checked_step(out: Any, *, env: str, call: str) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    """`out` of `step`, or an `EnvContractError`; what a run can use passes (`strict=False`)."""
    problem = step_problem(out, strict=False)
    if problem is not None:
        raise EnvContractError(env, call, problem)
    return out
