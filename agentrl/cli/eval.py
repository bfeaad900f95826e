"""`agentrl eval`: success rate (± standard error) of a model on fixed validation seeds.

A model folder agentrl wrote carries the settings it was trained with (`agentrl_settings.yaml`,
see `agentrl.runtime.model_settings`); eval plays the env with them, flags override them, and
the first line of output says which settings were used and where they came from.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from agentrl.cli._common import RunError, env_errors_stop, missing_service
from agentrl.cli._common import fail as _fail
from agentrl.runtime.model_settings import ModelSettings

DEFAULT_ENV = "sokoban"
"""The env of `agentrl eval` when neither `--env` nor the model's settings name one."""


def eval_settings(
    saved: ModelSettings | None, *, env: str | None, flags: dict[str, Any]
) -> tuple[ModelSettings, str]:
    """The settings an evaluation uses: `saved` (the model's own, if any) with the `flags`
    that are not None put over them; and a note on where they came from.

    `flags` holds `env_kwargs` (merged into the saved ones) and any `ModelSettings` field.
    With `env` naming another env than the model was trained on, the saved settings are
    not used at all.
    """
    if saved is not None and env is not None and env != saved.env.name:
        origin = f"defaults ({saved.source} is for env {saved.env.name}, not {env})"
        saved = None
    elif saved is not None:
        origin = f"the model's settings: {saved.source}"
    else:
        origin = "defaults (the model has no saved settings)"
    base = saved or ModelSettings(env={"name": env or DEFAULT_ENV})
    update: dict[str, Any] = {k: v for k, v in flags.items() if v is not None}
    kwargs = update.pop("env_kwargs", None) or {}
    settings = base.model_copy(
        update={**update, "env": base.env.model_copy(update={"kwargs": base.env.kwargs | kwargs})}
    )
    named = [f"--{k.removeprefix('eval_').replace('_', '-')}" for k in update] + [
        f"--set {k}" for k in kwargs
    ]
    if named:
        origin += f"; flags: {', '.join(named)}"
    return settings, origin


def settings_line(
    s: ModelSettings, *, env_max_turns: int, temperatures: list[float], engine_note: str = ""
) -> str:
    """The first line of `agentrl eval`'s output: every setting that shapes the episodes
    (`engine_note` says why the engine was chosen, when no one named it)."""
    kwargs = ", ".join(f"{k}={v}" for k, v in s.env.kwargs.items())
    temps = " and ".join(f"{t:g}" for t in temperatures)
    history = "all" if s.history_turns is None else s.history_turns
    return (
        f"settings: env {s.env.name}({kwargs}), max_turns {s.max_turns or env_max_turns}, "
        f"history_turns {history}, max_context_tokens {s.max_context_tokens}, "
        f"max_new_tokens {s.max_new_tokens}, temperature {temps}, {s.eval_episodes} episodes from "
        f"seed {s.eval_seed_offset}, engine {s.engine or 'hf'}{engine_note}"
    )


def _weights_folder(model: str) -> Path:
    """The folder whose weights `model` samples with (an adapter folder's base), for
    `default_engine`; `model` itself when it does not resolve (loading it fails later,
    with its own message)."""
    from agentrl.rollout.models import resolve_model
    from agentrl.runtime.lora import adapter_base, is_adapter_dir

    try:
        return resolve_model(adapter_base(model) if is_adapter_dir(model) else model)
    except (FileNotFoundError, ValueError):
        return Path(model)


def result_lines(
    result: dict[str, float], *, env: str, temperature: float, seed_offset: int
) -> str:
    """The success rate ± standard error of one evaluation and, when there are, its tool use,
    its breakdown by task family and by optimal solution length."""
    from agentrl.rollout.evaluate import SHORT_SOLUTION_MAX

    n = int(result["num_episodes"])
    text = (
        f"{env}: success rate {result['success_rate']:.3f} ± {result['success_se']:.3f} over "
        f"{n} episodes (seeds {seed_offset}..{seed_offset + n - 1}, temperature {temperature:g}); "
        f"mean reward {result['reward_mean']:.3f}, mean turns {result['num_turns']:.2f}; "
        f"{int(result.get('num_errors', 0))} errors"
    )
    if "first_error_seed" in result:  # env or engine errors: how to replay the first
        seed = int(result["first_error_seed"])
        text += f" (first at seed {seed}: agentrl play {env} --seed {seed})"
    if "tool_call_rate" in result:
        text += f"\n  tool use: a tool call in {result['tool_call_rate']:.1%} of episodes"
        if "tool_ok_rate" in result and result["tool_call_rate"] > 0:
            text += f"; {result['tool_ok_rate']:.1%} of the calls ran without error"
    tasks = [
        k.removeprefix("num_episodes_task_") for k in result if k.startswith("num_episodes_task_")
    ]
    if tasks:
        text += "\n  by task: " + "; ".join(
            f"{name} {result[f'success_task_{name}']:.3f} ± {result[f'success_task_{name}_se']:.3f} "
            f"({int(result[f'num_episodes_task_{name}'])} episodes)"
            for name in tasks
        )
    if "num_episodes_short" not in result:
        return text
    parts = []
    for name, label in (
        ("short", f"<= {SHORT_SOLUTION_MAX}"),
        ("long", f">= {SHORT_SOLUTION_MAX + 1}"),
    ):
        count = int(result[f"num_episodes_{name}"])
        if count:
            rate, se = result[f"success_{name}"], result[f"success_{name}_se"]
            parts.append(f"{label} moves {rate:.3f} ± {se:.3f} ({count} episodes)")
        else:
            parts.append(f"{label} moves: no episodes")
    return text + "\n  by optimal solution length: " + "; ".join(parts)


def eval_cmd(
    model: Annotated[
        str,
        typer.Option(
            "--model", help="Run dir, checkpoint, model or LoRA adapter folder, alias or HF id."
        ),
    ],
    env: Annotated[
        str | None,
        typer.Option("--env", help="Env name or module.path:Class (default: the model's env)."),
    ] = None,
    episodes: Annotated[
        int | None,
        typer.Option(
            "--episodes",
            help="Validation episodes (fixed seeds; default: the run's eval.num_episodes, "
            "else 32).",
        ),
    ] = None,
    temperature: Annotated[
        list[float] | None,
        typer.Option(
            "--temperature",
            help="Sampling temperature (default: the run's eval temperature, else 0.5); "
            "repeat it to evaluate at several, e.g. --temperature 0.5 --temperature 0.",
        ),
    ] = None,
    max_new_tokens: Annotated[
        int | None, typer.Option("--max-new-tokens", help="Ids sampled per turn.")
    ] = None,
    seed_offset: Annotated[
        int | None,
        typer.Option("--seed-offset", help="First validation seed (disjoint from training seeds)."),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="Inference engine: hf or vllm (default: the run's engine.name, else vllm "
            "when it is installed and the model has 10 M weights or more, else hf).",
        ),
    ] = None,
    history_turns: Annotated[
        int | None,
        typer.Option(
            "--history-turns", help="Earlier turns in each prompt (rollout.history_turns)."
        ),
    ] = None,
    max_turns: Annotated[
        int | None, typer.Option("--max-turns", help="Turns per episode (rollout.max_turns).")
    ] = None,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="Env keyword argument key=value (repeatable).")
    ] = None,
) -> None:
    """Report the success rate ± standard error of a model on N fixed validation seeds.

    The settings default to those the model was trained with (env and its keyword arguments,
    max_turns, history_turns, context and answer limits, eval temperature and seeds), saved in
    its folder; flags override them. The first line says which were used and from where.
    """
    from agentrl.config import _parse_value

    env_kwargs: dict[str, Any] = {}
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep:
            _fail(f"--set {item!r}: expected key=value")
        env_kwargs[key] = _parse_value(value)
    flags = {
        "env_kwargs": env_kwargs,
        "max_turns": max_turns,
        "history_turns": history_turns,
        "max_new_tokens": max_new_tokens,
        "eval_seed_offset": seed_offset,
        "eval_episodes": episodes,
        "engine": engine,
    }
    try:
        setup = eval_setup(model, env=env, flags=flags, temperatures=temperature)
        typer.echo(f"{setup.line} (from {setup.origin})")
        with env_errors_stop(setup.settings.env.name, setup.settings.env.kwargs):
            for temp, result, _ in run_evaluations(setup):
                line = result_lines(
                    result,
                    env=setup.settings.env.name,
                    temperature=temp,
                    seed_offset=setup.settings.eval_seed_offset,
                )
                typer.echo(line)
    except RunError as e:
        _fail(str(e), code=e.code)


@dataclass
class EvalSetup:
    """What one `agentrl eval` evaluates: the model, its settings and the temperatures."""

    model: str
    """The model to load: a model or LoRA adapter folder, an alias or a Hugging Face id."""
    settings: ModelSettings
    """The settings the episodes are played with (`eval_settings`)."""
    origin: str
    """Where the settings came from (`eval_settings`)."""
    temperatures: list[float]
    """One evaluation per sampling temperature."""
    line: str
    """The settings line `agentrl eval` prints first (`settings_line`)."""


def eval_setup(
    model: str,
    *,
    env: str | None,
    flags: dict[str, Any],
    temperatures: list[float] | None = None,
) -> EvalSetup:
    """The evaluation of `model` (a run or checkpoint folder is read for its model folder
    and saved settings) with `flags` over its settings (`eval_settings`), at `temperatures`
    (default: the settings' eval temperature). Raises `RunError` when the folder holds no
    model or its settings, or the env cannot be built, with them."""
    from agentrl.cli.model_folders import describe_model_folder, read_model_settings
    from agentrl.config import ConfigError
    from agentrl.envs import make
    from agentrl.runtime.lora import is_adapter_dir
    from agentrl.train.checkpoint import model_dir

    saved = None
    if Path(model).exists():
        try:  # a LoRA adapter folder is loaded merged into its base (`loadable_model`)
            folder = Path(model) if is_adapter_dir(model) else model_dir(Path(model))
        except FileNotFoundError:
            raise RunError(describe_model_folder(Path(model))) from None
        model = str(folder)
        try:
            saved = read_model_settings(folder)
        except ConfigError as e:
            raise RunError(str(e)) from None
    settings, origin = eval_settings(saved, env=env, flags=flags)
    engine_note = ""
    if settings.engine is None:  # neither --engine nor the model's settings name one
        from agentrl.rollout.engines import default_engine

        name, why = default_engine(_weights_folder(model))
        settings = settings.model_copy(update={"engine": name})
        engine_note = f" ({why}; --engine to change)"
    try:
        probe = make(settings.env.name, **settings.env.kwargs)
    except (KeyError, ImportError, TypeError, ValueError) as e:
        raise RunError(f"env {settings.env.name} with {settings.env.kwargs}: {e}") from None
    temperatures = list(temperatures or [settings.eval_temperature])
    line = settings_line(
        settings, env_max_turns=probe.max_turns, temperatures=temperatures, engine_note=engine_note
    )
    probe.close()
    return EvalSetup(model, settings, origin, temperatures, line)


def run_evaluations(setup: EvalSetup) -> Iterator[tuple[float, dict[str, float], list[Any]]]:
    """Load the model once and evaluate it at each temperature of `setup`: yields the
    temperature, the metrics of `agentrl.rollout.evaluate.evaluate` and the episodes (one
    `Trajectory` per validation seed). Raises `RunError` when a service the env needs is
    missing or the model cannot be loaded."""
    import contextlib
    import functools

    from agentrl.config import TrainConfig
    from agentrl.envs import make
    from agentrl.rollout.config import EngineConfig, RolloutConfig, SamplingConfig
    from agentrl.rollout.engines import SeededEngine, build_engine
    from agentrl.rollout.evaluate import evaluation_metrics, validation_episodes
    from agentrl.rollout.models import load_tokenizer
    from agentrl.runtime.lora import loadable_model
    from agentrl.runtime.threads import set_torch_threads

    settings = setup.settings
    env_factory = functools.partial(make, settings.env.name, **settings.env.kwargs)
    cfg = TrainConfig(engine=EngineConfig(name=settings.engine or "hf"))
    cfg.model.name = setup.model
    rollout_cfg = RolloutConfig(
        max_turns=settings.max_turns,
        history_turns=settings.history_turns,
        max_context_tokens=settings.max_context_tokens,
    )
    why = missing_service(settings.env.name, settings.env.kwargs)
    if why is not None:
        raise RunError(why, code=1)
    with contextlib.ExitStack() as stack:
        try:
            model_path = stack.enter_context(loadable_model(setup.model))
        except (FileNotFoundError, ValueError, RuntimeError) as e:  # e.g. an adapter's base
            raise RunError(str(e)) from None
        tokenizer = load_tokenizer(str(model_path))
        set_torch_threads(key="OMP_NUM_THREADS")  # the HF engine's, from the usable CPUs
        runner = SeededEngine(build_engine(cfg, model_path))
        stack.callback(runner.close)
        for temp in setup.temperatures:
            sampling = SamplingConfig(temperature=temp, max_new_tokens=settings.max_new_tokens)
            trajs = validation_episodes(
                runner,
                env_factory,
                tokenizer,
                num_episodes=settings.eval_episodes,
                seed_offset=settings.eval_seed_offset,
                rollout_cfg=rollout_cfg,
                sampling=sampling.to_params(seed=0),
                env_name=settings.env.name,
            )
            yield temp, evaluation_metrics(trajs), trajs
