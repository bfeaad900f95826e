"""What `agentrl train` says before and while it works: the run's plan and estimated time on
the first screen, and each phase's remaining time once its first steps have been timed."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl._console import command_name

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
    and resume. Its time follows (`time_lines`, once the torch threads are chosen)."""
    ws = cfg.warm_start
    turns, origin = turn_limit(cfg)
    phases: list[str] = []
    lora = f" with LoRA (r {cfg.trainer.lora.r})" if cfg.trainer.lora.enabled else ""
    if ws.expert is not None:
        per = "turn" if cfg.rollout.history_turns is not None else "episode"
        phases.append(
            f"expert episodes: {ws.num_episodes:,} from the {ws.expert} expert on {cfg.env.name}"
        )
        phases.append(
            f"warm start (SFT{lora}): {ws.num_epochs} epoch(s) over them, {ws.batch_size} samples "
            f"(one per {per}) a step, peak lr {ws.optim.lr:g} -> {run_dir / 'warm_start'}"
        )
    episodes = cfg.trainer.num_groups * cfg.rollout.group_size
    phases.append(
        f"RL: {cfg.trainer.num_steps} steps of {cfg.algo.name}{lora}, lr {cfg.optim.lr:g}, "
        f"{episodes:,} episodes a step ({cfg.trainer.num_groups} groups of "
        f"{cfg.rollout.group_size}) on the {cfg.engine.name} engine, from "
        + ("the warm start" if ws.expert is not None else cfg.model.name)
    )
    lines = [f"plan ({len(phases)} phase{'s' if len(phases) > 1 else ''}):"]
    lines += [f"  {i}. {p}" for i, p in enumerate(phases, 1)]
    lines += recipe_lines(cfg)
    turns_text = turns if turns is not None else "the env's own"
    lines.append(f"turns per episode: {turns_text} ({origin})")
    if resume:
        lines.append(f"resuming {run_dir}: finished phases are not run again")
    lines.append(
        f"stop: Ctrl-C or SIGTERM; continue with: {command_name()} train --resume {run_dir}"
    )
    return lines


def recipe_lines(cfg: Any) -> list[str]:
    """Which of the env's measured recipes the run stands on, its result, and the model it
    was measured with when the run's model is another.

    >>> from agentrl.cli.train import resolve_train_config
    >>> def cfg(model):
    ...     flags = {"env.name": "sokoban", "model.name": model}
    ...     return resolve_train_config(config_file=None, overrides=[], preset=None, flags=flags)
    >>> recipe_lines(cfg("tiny"))[0][:30]
    'recipe: agentrl/train/defaults'
    >>> recipe_lines(cfg("Qwen/Qwen2.5-0.5B-Instruct"))[1]
    'recipe measured with smollm2-135m, not Qwen/Qwen2.5-0.5B-Instruct: its sizes and lr may not suit this model'
    """
    from agentrl.cli.train import env_recipe, env_recipe_model, recipe_path

    path = recipe_path(cfg.env.name, cfg.model.name)
    result = env_recipe(cfg.env.name, cfg.model.name)
    if path is None or result is None:
        return []
    shown = f"agentrl/train/defaults/{path.name}"
    lines = [f"recipe: {shown} ({result})"]
    measured = env_recipe_model(cfg.env.name, cfg.model.name)
    if measured is not None and measured not in (cfg.model.name, _adapter_base(cfg.model.name)):
        lines.append(
            f"recipe measured with {measured}, not {cfg.model.name}: its sizes and lr may "
            "not suit this model"
        )
    return lines


def _adapter_base(model: str) -> str | None:
    """The base model a LoRA adapter folder names (None for anything else)."""
    import json

    config = Path(model) / "adapter_config.json"
    try:
        return json.loads(config.read_text()).get("base_model_name_or_path")
    except (OSError, ValueError):
        return None


def time_lines(cfg: Any, *, resume: bool, measure: Callable[[Any], Any] | None = None) -> list[str]:
    """The run's estimated time, for its first screen.

    A new run with a warm start times its first 64 expert episodes and an SFT step on this
    machine (a few seconds; `measure_sft_pace`) and scales them to its sizes. RL's time then
    comes from the env recipe's measured pace (an RL step in SFT steps, `rl_pace`) when the
    run trains RL as the recipe does. Otherwise RL's time, like a resumed run's, is logged
    once its first steps are timed (`PhaseClock`).
    """
    steps = cfg.trainer.num_steps
    rl_steps = f"RL ({steps} step{'s' if steps != 1 else ''}) is timed once it starts"
    if resume:
        return ["time: each phase is timed once it starts"]
    if cfg.warm_start.expert is None:
        return [f"time: {rl_steps}"]
    if measure is None:
        from agentrl.cli.warm_start import sft_config
        from agentrl.sft.train import measure_sft_pace

        def measure(c: Any) -> Any:
            return measure_sft_pace(sft_config(c))

    pace = measure(cfg)
    parts = [f"expert episodes {_duration(pace.expert_s)}", f"warm start {_duration(pace.sft_s)}"]
    how = f"measured in {pace.measured_s:.0f} s on this machine"
    ratio = rl_pace(cfg)
    if ratio is None:
        total = _duration(pace.expert_s + pace.sft_s)
        return [f"time: about {total} before RL ({', '.join(parts)}), {how}; {rl_steps}"]
    rl_s = steps * ratio * pace.s_per_step
    total = _duration(pace.expert_s + pace.sft_s + rl_s)
    parts.append(f"RL {_duration(rl_s)}")
    return [
        f"time: about {total} in all ({', '.join(parts)}), {how}; RL at the recipe's pace "
        f"(a step takes as long as {ratio:g} SFT steps)"
    ]


def rl_pace(cfg: Any) -> float | None:
    """How many warm-start SFT steps one RL step takes, as measured for the env's recipe (its
    defaults' `rl_pace`), when `cfg` warm-starts and trains RL as the recipe does; else None.

    >>> from agentrl.cli.train import resolve_train_config
    >>> def cfg(*sets):
    ...     return resolve_train_config(
    ...         config_file=None, overrides=list(sets), preset=None, flags={"env.name": "sokoban"}
    ...     )
    >>> rl_pace(cfg("trainer.num_steps=10")) is not None, rl_pace(cfg("trainer.num_groups=64"))
    (True, None)
    """
    from agentrl.cli.train import env_rl_pace, resolve_train_config

    ratio = env_rl_pace(cfg.env.name, cfg.model.name)
    if ratio is None:
        return None
    recipe = resolve_train_config(
        config_file=None,
        overrides=[],
        preset=None,
        flags={"env.name": cfg.env.name, "model.name": cfg.model.name},
    )
    return ratio if _rl_shape(cfg) == _rl_shape(recipe) else None


def _rl_shape(cfg: Any) -> list[Any]:
    """The settings an RL step's time depends on (the step count and threads left out)."""
    tree = cfg.model_dump(mode="json")
    skip = ("num_steps", "num_threads")
    trainer = {k: v for k, v in tree["trainer"].items() if k not in skip}
    keys = ("algo", "rollout", "model", "engine", "env")
    return [tree[k] for k in keys] + [trainer, tree["warm_start"]["batch_size"]]


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
    >>> _duration(0.2), _duration(45), _duration(600), _duration(4000)
    ('1 s', '45 s', '10 min', '1 h 07 min')
    """
    if seconds < 59.5:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"
