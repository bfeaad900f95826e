"""agentrl: reinforcement learning for multi-turn LLM agents.

The Python API runs the command line's own code (docs/guide/python-api.md):

- `load_config(env=..., overrides={...})` resolves a config as `agentrl train` does;
- `train(config)` runs it and returns its folder and last metrics (`TrainResult`);
- `evaluate(run_or_model)` plays the validation seeds and returns the success rate, its
  standard error and each episode (`EvalResult`).

`env=` takes a registered name, `module.path:Class`, a `TokenEnv` subclass or a factory. The
heavy libraries load on the first call, not on `import agentrl`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrl.cli.train import TrainResult
    from agentrl.envs import TokenEnv
    from agentrl.train.config import TrainConfig

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "EpisodeResult",
    "EvalResult",
    "RunError",
    "TrainResult",
    "__version__",
    "evaluate",
    "load_config",
    "train",
]


def load_config(
    env: str | type[TokenEnv] | Callable[..., TokenEnv] | None = None,
    overrides: Mapping[str, Any] | None = None,
    preset: str | None = None,
    config_file: str | PathLike[str] | None = None,
    model: str | None = None,
) -> TrainConfig:
    """The config `agentrl train --env ENV --model MODEL --preset PRESET -c FILE --set K=V...`
    runs: the CPU defaults, the env's recipe, the preset, the file, then `overrides` (dotted
    keys as `--set` takes them: `{"trainer.num_steps": 2}`). Raises `ConfigError` naming a
    bad key or value.

    >>> cfg = load_config("sokoban", {"trainer.num_steps": 2})
    >>> cfg.env.name, cfg.algo.name, cfg.trainer.num_steps
    ('sokoban', 'expert-iteration', 2)
    """
    from agentrl.cli.train import override_items, resolve_train_config
    from agentrl.envs.registry import env_name

    flags = {"env.name": None if env is None else env_name(env), "model.name": model}
    return resolve_train_config(
        config_file=None if config_file is None else Path(config_file),
        overrides=override_items(overrides),
        preset=preset,
        flags=flags,
    )


def _train(
    config: TrainConfig | None = None,
    env: str | type[TokenEnv] | Callable[..., TokenEnv] | None = None,
    run_dir: str | PathLike[str] | None = None,
    resume: bool = False,
) -> TrainResult:
    """`agentrl.train(config, env=None, run_dir=None, resume=False)`.

    Run `config` (default: `load_config(env)`), as `agentrl train` does: the warm start if
    it has one, then RL, checkpoints and metrics into `run_dir` (default
    `runs/<env>-<model>-<time>`). `env`, when given, replaces the config's env (its recipe is
    not applied: pass the env to `load_config` for that). `resume=True` continues the run in
    `run_dir` from its last checkpoint, with its own config.yaml unless `config` is given.

    `agentrl.train` is the package `agentrl.train`, made callable (see there), so that this
    name survives the import of the trainer's modules.

    Returns a `TrainResult`: the run folder and the last step's metrics. Raises `ConfigError`
    for a bad config and `RunError` when the run cannot start (an unknown env, a missing
    service, a folder that holds a run).
    """
    from agentrl.cli._common import RunError
    from agentrl.cli.train import resolve_train_config, train_run
    from agentrl.envs.registry import env_name

    if resume and run_dir is None:
        raise RunError("resume=True needs the run_dir of the run to continue")
    if config is None and resume:
        base_file = Path(run_dir) / "config.yaml"  # type: ignore[arg-type]
        if not base_file.is_file():
            raise RunError(f"resume: no config.yaml in {run_dir} (is it a run directory?)")
        config = resolve_train_config(
            config_file=None, overrides=[], preset=None, flags={}, base_file=base_file
        )
    if config is None:
        config = load_config(env)
    elif env is not None:
        config = config.model_copy(deep=True)
        config.env.name = env_name(env)
    return train_run(
        config, None if run_dir is None else Path(run_dir), resume=resume, env_origin="env"
    )


@dataclass
class EpisodeResult:
    """One validation episode of `evaluate`."""

    seed: int
    """Its validation seed."""
    success: bool
    """Whether the env reported `info["success"]` at its end."""
    reward: float
    """The episode's total reward."""
    num_turns: int
    """The turns it took."""
    status: str
    """How it ended: `ok`, `truncated`, `env_error`..."""


@dataclass
class EvalResult:
    """The success rate of a model on fixed validation seeds, and each episode."""

    success_rate: float
    """The fraction of episodes that succeeded."""
    success_se: float
    """Its binomial standard error, sqrt(p (1 - p) / n)."""
    episodes: list[EpisodeResult]
    """One per validation seed, in seed order."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Every number `agentrl eval` reports (mean reward and turns, tool use, by task...)."""
    settings: str = ""
    """The settings line `agentrl eval` prints first: env, turns, limits, seeds, engine."""


def evaluate(
    model_or_run: str | PathLike[str] | TrainResult,
    episodes: int | None = None,
    env: str | type[TokenEnv] | Callable[..., TokenEnv] | None = None,
    temperature: float | None = None,
    *,
    max_new_tokens: int | None = None,
    seed_offset: int | None = None,
    engine: str | None = None,
    history_turns: int | None = None,
    max_turns: int | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> EvalResult:
    """`agentrl eval --model MODEL_OR_RUN`: play `episodes` validation seeds (default: the
    run's `eval.num_episodes`, else 32) with the settings the model was trained with
    (its env, turns, limits, eval temperature and seeds), the arguments given over them.

    `model_or_run` is a run folder (its latest checkpoint), a `TrainResult`, a checkpoint,
    model or LoRA adapter folder, an alias (`tiny`, `smollm2-135m`) or a Hugging Face id.
    Raises `RunError` when it holds no model or the env cannot be built.
    """
    from agentrl.cli.eval import eval_setup, run_evaluations
    from agentrl.envs.registry import env_name

    if hasattr(model_or_run, "run_dir"):
        model_or_run = model_or_run.run_dir  # type: ignore[union-attr]
    flags = {
        "env_kwargs": dict(env_kwargs or {}),
        "max_turns": max_turns,
        "history_turns": history_turns,
        "max_new_tokens": max_new_tokens,
        "eval_seed_offset": seed_offset,
        "eval_episodes": episodes,
        "engine": engine,
    }
    setup = eval_setup(
        str(model_or_run),
        env=None if env is None else env_name(env),
        flags=flags,
        temperatures=None if temperature is None else [temperature],
    )
    [(_, metrics, trajs)] = list(run_evaluations(setup))
    return EvalResult(
        success_rate=metrics["success_rate"],
        success_se=metrics["success_se"],
        episodes=[
            EpisodeResult(t.seed, bool(t.success), t.total_reward, t.num_turns, str(t.status))
            for t in trajs
        ],
        metrics=metrics,
        settings=setup.line,
    )


class _CallablePackage(ModuleType):
    """The package `agentrl.train`, which, called, runs `agentrl._train`."""

    def __call__(self, *args: Any, **kwargs: Any) -> TrainResult:
        """`agentrl.train(config, env=None, run_dir=None, resume=False)`: see `_train`."""
        return _train(*args, **kwargs)


train = importlib.import_module("agentrl.train")  # its __init__ only: no torch
train.__class__ = _CallablePackage


def __getattr__(name: str) -> Any:
    """`TrainResult`, `RunError` and `ConfigError` load on first access."""
    if name == "TrainResult":
        from agentrl.cli.train import TrainResult

        return TrainResult
    if name == "RunError":
        from agentrl.cli._common import RunError

        return RunError
    if name == "ConfigError":
        from agentrl.runtime.config import ConfigError

        return ConfigError
    raise AttributeError(f"module 'agentrl' has no attribute {name!r}")
