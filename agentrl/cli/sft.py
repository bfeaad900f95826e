"""`agentrl sft`: supervised fine-tuning on expert trajectories (torch imported lazily)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Annotated, Any

import typer


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def sft(
    env: Annotated[
        str | None,
        typer.Option("--env", help="Env name or module.path:Class (default sokoban)."),
    ] = None,
    expert: Annotated[
        str | None,
        typer.Option("--expert", help="Registered expert that plays the env (default solver)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model", help="Model alias (tiny, smollm2-135m), HF id or folder (default tiny)."
        ),
    ] = None,
    episodes: Annotated[
        int | None,
        typer.Option("--episodes", help="Expert episodes, one per training seed (default 512)."),
    ] = None,
    epochs: Annotated[
        int | None, typer.Option("--epochs", help="Passes over the expert data (default 3).")
    ] = None,
    lr: Annotated[
        float | None,
        typer.Option("--lr", help="Peak learning rate (default 1e-3; use ~1e-5 for a real LLM)."),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option("--batch-size", help="Samples per optimizer step (default 16)."),
    ] = None,
    actions_per_turn: Annotated[
        int | None,
        typer.Option("--actions-per-turn", help="Actions per expert answer (default: env max)."),
    ] = None,
    eval_episodes: Annotated[
        int | None,
        typer.Option(
            "--eval-episodes", help="Validation episodes after training (default 0: none)."
        ),
    ] = None,
    config: Annotated[
        Path | None, typer.Option("-c", "--config", help="YAML file of SFTConfig fields.")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option("--set", help="Dotted SFTConfig override key=value (repeatable)."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Output model folder (default runs/sft-<env>-<model>-<time>)."),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume", help="Continue the killed run in this output folder from its checkpoint."
        ),
    ] = None,
) -> None:
    """Fine-tune a model on an expert's trajectories (token-exact, as RL trains on them).

    Precedence: flags and `--set` over the `-c` file over the defaults.
    The output folder is a Hugging Face model: continue with RL via
    `agentrl train --model OUT` or score it with `agentrl eval --model OUT`. The expert's
    episodes stay in OUT/expert_trajectories.parquet (`agentrl view` shows them).
    """
    from agentrl.config import ConfigError, load_config
    from agentrl.sft.config import SFTConfig
    from agentrl.sft.expert import NoExpertError
    from agentrl.sft.train import RESULT_FILE

    flags = {  # config key: (flag, value)
        "env.name": ("--env", env),
        "expert": ("--expert", expert),
        "model": ("--model", model),
        "num_episodes": ("--episodes", episodes),
        "num_epochs": ("--epochs", epochs),
        "optim.lr": ("--lr", lr),
        "batch_size": ("--batch-size", batch_size),
        "max_actions_per_turn": ("--actions-per-turn", actions_per_turn),
        "eval_episodes": ("--eval-episodes", eval_episodes),
    }
    given = {f"{k}={v}": f"{flag} {v}" for k, (flag, v) in flags.items() if v is not None}
    items = list(given) + list(overrides or [])
    if resume is not None:  # the run's own config; flags and --set still apply on top
        if config is not None or (out is not None and out.resolve() != resume.resolve()):
            _fail("--resume takes the run's own sft_config.yaml; leave out -c and --out")
        config, out = resume / "sft_config.yaml", resume
        if not config.is_file():
            _fail(f"--resume {resume}: no sft_config.yaml there (is it an `agentrl sft` folder?)")
        if (resume / RESULT_FILE).is_file():
            _fail(f"--resume {resume}: that run has finished ({RESULT_FILE} is there)")
    try:
        cfg = load_config(config, items, model=SFTConfig, typed=given)
    except ConfigError as e:
        _fail(str(e))
    if out is None:
        name = Path(cfg.model).name or cfg.model
        out = Path("runs") / f"sft-{cfg.env.name}-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if resume is None and out.exists() and any(out.iterdir()):
        _fail(f"--out {out} exists and is not empty (continue a killed run with --resume {out})")

    from contextlib import nullcontext

    from agentrl._console import console, setup_logging
    from agentrl.sft._progress import sft_log_progress, sft_progress
    from agentrl.sft.train import run_sft

    setup_logging()
    log = logging.getLogger("agentrl.sft")
    log.info("output folder %s", out)
    # bars on a terminal; a file gets a log line every 30 s instead
    if console().is_terminal:
        bars = sft_progress(cfg.num_episodes)
    else:
        bars = nullcontext(sft_log_progress(log))
    with bars as (on_episode, on_step):
        try:
            result = run_sft(cfg, out, on_step=on_step, on_episode=on_episode)
        except (NoExpertError, ValueError) as e:
            _fail(str(e))
    typer.echo(
        f"{result.num_trajectories} expert trajectories ({result.expert_success_rate:.1%} "
        f"solved), {result.num_optimizer_steps} steps: NLL {result.initial_nll:.3f} -> "
        f"{result.final_nll:.3f}, token accuracy {result.final_token_accuracy:.1%} "
        f"({result.wall_s:.0f} s)"
    )
    if result.eval:
        typer.echo(
            f"validation success {result.eval['success_rate']:.3f} over "
            f"{int(result.eval['num_episodes'])} episodes (temperature {cfg.eval_temperature:g})"
        )
    what = "LoRA adapter" if cfg.lora.enabled else "model"
    nxt = f"agentrl train --model {out} --env {cfg.env.name}{_lora_flags(cfg.lora)}"
    typer.echo(f"{what}: {out}  (next: {nxt})")


def _lora_flags(lora: Any) -> str:
    """The `--set` flags with which RL trains an SFT adapter on (its own shape); none for a
    full model."""
    if not lora.enabled:
        return ""
    flags = f" --set trainer.lora.enabled=true --set trainer.lora.r={lora.r}"
    flags += f" --set trainer.lora.alpha={lora.alpha}"
    if lora.target_modules != type(lora)().target_modules:
        flags += f" --set trainer.lora.target_modules=[{','.join(lora.target_modules)}]"
    return flags
