"""What `agentrl train` says before and while it works: the run's plan on the first screen,
and each phase's remaining time once its first steps have been timed."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("agentrl.train")


def env_turn_limit(name: str, kwargs: dict[str, Any]) -> int | None:
    """The env's own turn limit: its `max_turns` keyword, else its registered one (None when
    the env cannot be looked up without building it)."""
    if "max_turns" in kwargs:
        return int(kwargs["max_turns"])
    from agentrl.cli.envs import registered_max_turns

    try:
        return registered_max_turns(name)
    except Exception:  # a module:Class env that is not registered: the loop reads it later
        return None


def turn_limit(cfg: Any) -> tuple[int | None, str]:
    """The effective turns per episode of `train`, `eval`, `rollout` and `play` (the rollout
    truncates at `rollout.max_turns`, else at the env's own `max_turns`) and where it comes
    from.

    >>> from agentrl.config import TrainConfig
    >>> turn_limit(TrainConfig.model_validate({"env": {"name": "sokoban"}}))
    (5, "the env's own max_turns")
    >>> turn_limit(TrainConfig.model_validate({"rollout": {"max_turns": 3}}))
    (3, 'rollout.max_turns (sokoban allows 5)')
    """
    env_turns = env_turn_limit(cfg.env.name, dict(cfg.env.kwargs))
    if cfg.rollout.max_turns is None:
        return env_turns, "the env's own max_turns"
    allows = f" ({cfg.env.name} allows {env_turns})" if env_turns is not None else ""
    return cfg.rollout.max_turns, f"rollout.max_turns{allows}"


def plan_lines(cfg: Any, run_dir: Path, *, resume: bool) -> list[str]:
    """The first screen of a run: its phases and their sizes, where it writes, how to stop
    and resume. Each phase's time follows once its first steps are timed (`PhaseClock`)."""
    ws = cfg.warm_start
    turns, origin = turn_limit(cfg)
    phases: list[str] = []
    if ws.expert is not None:
        per = "turn" if cfg.rollout.history_turns is not None else "episode"
        phases.append(
            f"expert episodes: {ws.num_episodes:,} from the {ws.expert} expert on {cfg.env.name}"
        )
        phases.append(
            f"warm start (SFT): {ws.num_epochs} epoch(s) over them, {ws.batch_size} samples "
            f"(one per {per}) a step, peak lr {ws.optim.lr:g} -> {run_dir / 'warm_start'}"
        )
    episodes = cfg.trainer.num_groups * cfg.rollout.group_size
    lora = f" with LoRA (r {cfg.trainer.lora.r})" if cfg.trainer.lora.enabled else ""
    phases.append(
        f"RL: {cfg.trainer.num_steps} steps of {cfg.algo.name}{lora}, lr {cfg.optim.lr:g}, "
        f"{episodes:,} episodes a step ({cfg.trainer.num_groups} groups of "
        f"{cfg.rollout.group_size}) on the {cfg.engine.name} engine, from "
        + ("the warm start" if ws.expert is not None else cfg.model.name)
    )
    lines = [f"plan ({len(phases)} phase{'s' if len(phases) > 1 else ''}):"]
    lines += [f"  {i}. {p}" for i, p in enumerate(phases, 1)]
    turns_text = turns if turns is not None else "the env's own"
    lines.append(f"turns per episode: {turns_text} ({origin})")
    lines.append("time: each phase's remaining time is logged once its first steps are timed")
    if resume:
        lines.append(f"resuming {run_dir}: finished phases are not run again")
    lines.append(f"stop: Ctrl-C or SIGTERM; continue with: agentrl train --resume {run_dir}")
    return lines


class PhaseClock:
    """Logs one estimate of a phase's remaining time, after `min_steps` steps and at least
    `min_s` seconds of it (the first step, which loads and compiles, is left out)."""

    def __init__(
        self,
        phase: str,
        *,
        min_steps: int = 3,
        min_s: float = 20.0,
        emit: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.phase, self.min_steps, self.min_s = phase, min_steps, min_s
        self.emit = emit or log.info
        self.clock = clock
        self._start: tuple[int, float] | None = None
        self.done = False

    def step(self, done: int, total: int) -> str | None:
        """Record that `done` of `total` steps are done; returns the estimate when it is made.

        >>> t = iter([0.0, 10.0, 20.0])
        >>> c = PhaseClock("RL", min_steps=3, min_s=5, emit=lambda s: None, clock=lambda: next(t))
        >>> c.step(1, 100), c.step(2, 100), c.step(3, 100)[:32]
        (None, None, 'RL: about 16 min left (10.0 s a ')
        """
        if self.done:
            return None
        now = self.clock()
        if self._start is None:
            self._start = (done, now)
            return None
        first, t0 = self._start
        if done - first < self.min_steps - 1 or now - t0 < self.min_s:
            return None
        self.done = True
        per_step = (now - t0) / (done - first)
        left = per_step * (total - done)
        ends = time.strftime("%H:%M", time.localtime(time.time() + left))
        text = (
            f"{self.phase}: about {_duration(left)} left ({per_step:.1f} s a step over "
            f"{done - first} steps; ends about {ends})"
        )
        self.emit(text)
        return text


def _duration(seconds: float) -> str:
    """
    >>> _duration(45), _duration(600), _duration(4000)
    ('1 min', '10 min', '1 h 07 min')
    """
    minutes = max(1, round(seconds / 60))
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"
