"""`agentrl rollout`: run episodes of an env against a model, write trajectories, summarize."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from agentrl.cli._common import env_errors_stop, require_services


def build_engine(
    model: str,
    engine: str,
    *,
    ray: bool = False,
    num_replicas: int = 1,
    dtype: str = "auto",
    ray_address: str | None = None,
) -> Any:
    """An in-process HF or vLLM engine (or `num_replicas` Ray replicas of one) for `model`."""
    if engine not in ("hf", "vllm"):
        raise typer.BadParameter(
            f"unknown engine {engine!r}; use hf or vllm", param_hint="--engine"
        )
    from agentrl.rollout.config import EngineConfig
    from agentrl.rollout.ray_engine import engine_from_config

    cfg = EngineConfig(
        name=engine,  # type: ignore[arg-type]
        ray=ray,
        num_replicas=num_replicas,
        ray_address=ray_address,
    )
    # replicas share this machine's cores with the driver and the env workers
    return engine_from_config(model, cfg, dtype=dtype, num_cpus_per_replica=0.5)


def rollout_cmd(
    env: Annotated[str, typer.Option("--env", help="Registered env name or module:Class.")],
    model: Annotated[
        str, typer.Option("--model", help="Alias (tiny, smollm2-135m), path or HF id.")
    ],
    out: Annotated[Path, typer.Option("--out", help="Run directory; trajectories go under it.")],
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="Inference engine: hf or vllm (default: vllm when it is installed and the "
            "model has 10 M weights or more, else hf).",
        ),
    ] = None,
    ray: Annotated[bool, typer.Option("--ray", help="Host the engine as Ray replicas.")] = False,
    num_replicas: Annotated[
        int, typer.Option("--num-replicas", help="Engine replicas with --ray.", min=1)
    ] = 2,
    ray_address: Annotated[
        str | None,
        typer.Option("--ray-address", help="Ray cluster to join (default: start Ray here)."),
    ] = None,
    env_executor: Annotated[
        str, typer.Option("--env-executor", help="Where env steps run: process, thread or ray.")
    ] = "process",
    env_step_timeout: Annotated[
        float,
        typer.Option(
            "--env-step-timeout", min=0.01, help="Seconds one env reset or step may take."
        ),
    ] = 60.0,
    episodes: Annotated[int, typer.Option("--episodes", help="Seeds to roll out.", min=1)] = 8,
    group_size: Annotated[int, typer.Option("--group-size", help="Episodes per seed.", min=1)] = 1,
    seed: Annotated[int, typer.Option("--seed", help="First env seed.")] = 0,
    max_turns: Annotated[
        int | None, typer.Option("--max-turns", help="Turn limit (default: the env's).")
    ] = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Per turn.")] = 128,
    max_context_tokens: Annotated[
        int, typer.Option("--max-context-tokens", help="Sequence budget.")
    ] = 4096,
    temperature: Annotated[
        float, typer.Option("--temperature", help="Sampling temperature.")
    ] = 1.0,
    fmt: Annotated[str, typer.Option("--format", help="jsonl or parquet.")] = "jsonl",
    step: Annotated[int, typer.Option("--step", help="Step number of the file written.")] = 0,
    progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
) -> None:
    """Roll out episodes of ENV with MODEL, write trajectories under OUT, print a summary."""
    import functools

    from rich.console import Console
    from rich.table import Table

    from agentrl.envs import make, spec
    from agentrl.rollout.config import RolloutConfig, SamplingConfig
    from agentrl.rollout.engines import default_engine
    from agentrl.rollout.loop import rollout
    from agentrl.rollout.models import load_tokenizer, resolve_model
    from agentrl.runtime.threads import set_torch_threads
    from agentrl.train.env_errors import env_error_line
    from agentrl.trajectory.io import write_step

    if env_executor not in ("thread", "process", "ray"):
        raise typer.BadParameter("use thread, process or ray", param_hint="--env-executor")
    if fmt not in ("jsonl", "parquet"):
        raise typer.BadParameter("use jsonl or parquet", param_hint="--format")
    try:
        spec(env)
    except Exception as e:
        raise typer.BadParameter(str(e), param_hint="--env") from None
    require_services(env)
    cfg = RolloutConfig(
        group_size=group_size,
        max_turns=max_turns,
        max_context_tokens=max_context_tokens,
        env_executor=env_executor,  # type: ignore[arg-type]
        env_step_timeout_s=env_step_timeout,
        sampling=SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens),
    )
    console = Console()
    tokenizer = load_tokenizer(model)
    if engine is None:
        engine, why = default_engine(resolve_model(model))
        console.print(f"engine: {engine} ({why}; --engine to change)")
    set_torch_threads(key="OMP_NUM_THREADS")  # the HF engine's, from the usable CPUs
    policy = build_engine(
        model, engine, ray=ray, num_replicas=num_replicas, ray_address=ray_address
    )
    try:
        with env_errors_stop(env):
            result = rollout(
                policy,
                functools.partial(make, env),
                tokenizer,
                list(range(seed, seed + episodes)),
                cfg=cfg,
                env_name=env,
                progress=progress,
            )
    finally:
        policy.close()
        if env_executor == "ray":
            from agentrl.rollout.loop import close_env_actors

            close_env_actors()
    meta = {"model": model, "env": env, "engine": engine, "metrics": result.metrics}
    path = write_step(out, step, result.trajectories, meta, fmt=fmt)  # type: ignore[arg-type]
    table = Table(title=f"rollout: {env} with {model} ({engine})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in result.metrics.items():
        table.add_row(key.removeprefix("rollout/"), f"{value:.4g}")
    console.print(table)
    console.print(f"wrote {len(result.trajectories)} trajectories to {path}")
    errors = env_error_line(result.trajectories, env, {})
    if errors is not None:
        console.print(f"warning: {errors}", style="yellow", highlight=False, soft_wrap=True)
