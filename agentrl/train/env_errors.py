"""Env errors on the console: one line for each step that had any, and a stop when most
episodes fail several steps in a row (an env that is broken, not one that fails now and then).

    watch = EnvErrorWatch("sokoban", {}, max_steps=3)
    watch.observe(step, trajs)   # logs `step 4: 6 of 16 episodes env_error ...`; may raise
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Sequence
from typing import Any

from agentrl._console import command_name
from agentrl.trajectory.types import Status, Trajectory

log = logging.getLogger("agentrl.train")


class TooManyEnvErrors(Exception):
    """Most episodes ended `env_error` for `trainer.max_env_error_steps` steps in a row."""


def play_command(env: str, kwargs: dict[str, Any], seed: int) -> str:
    """The `agentrl play` command that replays the episode of `seed`.

    >>> play_command("sokoban", {"num_boxes": 2}, 7)
    'agentrl play sokoban --seed 7 --set num_boxes=2'
    """
    sets = [f"--set {shlex.quote(f'{k}={v}')}" for k, v in kwargs.items()]
    return " ".join([f"{command_name()} play", shlex.quote(env), f"--seed {seed}", *sets])


def env_error_line(trajs: Sequence[Trajectory], env: str, kwargs: dict[str, Any]) -> str | None:
    """`N of M episodes env_error; first: REASON; reproduce: agentrl play ...`, or None when
    no episode ended `env_error`."""
    failed = [t for t in trajs if t.status == Status.ENV_ERROR]
    if not failed:
        return None
    first = failed[0]
    return (
        f"{len(failed)} of {len(trajs)} episodes env_error; first: {first.error}; "
        f"reproduce: {play_command(env, kwargs, first.seed)}"
    )


class EnvErrorWatch:
    """Logs each step's env errors and counts the steps in a row where most episodes failed."""

    def __init__(self, env: str, kwargs: dict[str, Any], *, max_steps: int | None) -> None:
        self.env, self.kwargs, self.max_steps = env, dict(kwargs), max_steps
        self.num_bad_steps = 0
        """Steps in a row (up to the last one) in which most episodes ended `env_error`."""

    def observe(self, step: int, trajs: Sequence[Trajectory], *, quiet: bool = False) -> None:
        """Log step `step`'s env errors (unless `quiet`: a follower rank); raise
        `TooManyEnvErrors` when the limit is reached."""
        line = env_error_line(trajs, self.env, self.kwargs)
        if line is not None and not quiet:
            log.warning("step %d: %s", step, line)
        num_failed = sum(t.status == Status.ENV_ERROR for t in trajs)
        self.num_bad_steps = self.num_bad_steps + 1 if trajs and num_failed > len(trajs) / 2 else 0
        if self.max_steps is not None and self.num_bad_steps >= self.max_steps:
            raise TooManyEnvErrors(
                f"most episodes ended env_error in {self.num_bad_steps} steps in a row "
                f"(trainer.max_env_error_steps={self.max_steps}), so the run stopped; "
                f"last: {line}"
            )
