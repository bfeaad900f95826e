"""`agentrl train`, `agentrl export`, `agentrl plot` (and `agentrl eval`, from `cli/eval.py`).

Heavy libraries (torch, transformers) are imported inside the commands so `agentrl --help`
stays fast.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from agentrl._console import command_name
from agentrl._signals import Stopped
from agentrl.cli._common import env_errors_stop, require_services
from agentrl.cli._common import fail as _fail
from agentrl.cli.eval import eval_cmd

DEFAULTS = Path(__file__).resolve().parents[1] / "train" / "defaults"
"""The CPU config layers under every `agentrl train` (`cpu.yaml`, `cpu-<env>.yaml`)."""

DEFAULT_PRESET = "grpo"
"""The preset `agentrl train` uses without `--preset` (and without an env default)."""


FLAGS = {
    "env.name": "--env",
    "model.name": "--model",
    "engine.name": "--engine",
    "trainer.backend": "--backend",
    "engine.ray": "--ray",
    "warm_start.expert": "--no-warm-start",
    "trainer.num_steps": "--steps",
}
"""The flag of `agentrl train` that sets each config key (error headers name what was typed)."""


def _as_typed(key: str, value: Any) -> str:
    """How the user typed the flag that set `key` to `value`: `--env sokoban`, `--ray`."""
    flag = FLAGS.get(key)
    if flag is None:
        return f"--set {key}={value}"
    return flag if flag in ("--ray", "--no-warm-start") else f"{flag} {value}"


def env_defaults(env: str) -> tuple[dict[str, Any], str | None]:
    """The CPU defaults of one env (`defaults/cpu-<env>.yaml`, if there is one) and the preset
    it names (its top-level `preset:` key), else `({}, None)`. The tree's `presets:` section,
    if any, maps a preset name to keys for runs under that preset only."""
    import yaml

    path = DEFAULTS / f"cpu-{env}.yaml"
    if not path.is_file():
        return {}, None
    tree = yaml.safe_load(path.read_text()) or {}
    tree.pop("recipe", None)
    tree.pop("rl_pace", None)
    engine = tree.get("engine") or {}
    if engine.get("name") == "vllm" and importlib.util.find_spec("vllm") is None:
        tree["engine"] = {**engine, "name": "hf"}  # the recipe's engine when it is installed
    return tree, tree.pop("preset", None)


def _env_defaults_line(env: str, key: str) -> Any:
    """One top-level line of the env's CPU defaults that is not a config key (`recipe`,
    `rl_pace`), or None."""
    import yaml

    path = DEFAULTS / f"cpu-{env}.yaml"
    if not path.is_file():
        return None
    return (yaml.safe_load(path.read_text()) or {}).get(key)


def env_recipe(env: str) -> str | None:
    """The measured result of the env's CPU defaults (their `recipe:` line), if it has one."""
    return _env_defaults_line(env, "recipe")


def env_rl_pace(env: str) -> float | None:
    """How many warm-start SFT steps one RL step of the env's CPU defaults takes (their
    `rl_pace:` line, measured with the recipe), if they record it."""
    pace = _env_defaults_line(env, "rl_pace")
    return None if pace is None else float(pace)


def resolve_train_config(
    *,
    config_file: Path | None,
    overrides: list[str],
    preset: str | None,
    flags: dict[str, Any],
    base_file: Path | None = None,
) -> Any:
    """The run config: CPU defaults < the env's CPU defaults < preset < the env's keys for that
    preset < `-c FILE` < command-line flags < `--set`.

    The env's defaults (`defaults/cpu-<env>.yaml`, e.g. Sokoban's warm start) apply to the env
    the other layers name; its `preset:` is used when `--preset` is not given, and its
    `presets: {NAME: {...}}` section holds keys that only runs under preset NAME take (say
    the rooms a step that let a critic fit).
    `base_file` (a resumed run's config.yaml) replaces all defaults and the preset.
    """
    import yaml
    from pydantic import BaseModel, ConfigDict, Field

    from agentrl.algos.presets import list_presets, load_preset
    from agentrl.config import EnvConfig, _deep_merge, load_config

    class _EnvOnly(BaseModel):
        """The `env` section of an unvalidated config tree (the rest is ignored)."""

        model_config = ConfigDict(extra="ignore")
        env: dict[str, Any] = Field(default_factory=dict)

    flag_overrides = [f"{k}={v}" for k, v in flags.items() if v is not None]
    typed = {f"{k}={v}": _as_typed(k, v) for k, v in flags.items() if v is not None}
    if base_file is not None:
        base = yaml.safe_load(Path(base_file).read_text()) or {}
        return load_config(config_file, flag_overrides + list(overrides), base=base, typed=typed)
    cpu = yaml.safe_load((DEFAULTS / "cpu.yaml").read_text())
    # The env is known once the layers are merged; its defaults and preset then go under the
    # others. The first merge is not validated: it may hold an override (say
    # `algo.name=gigpo` under a preset with turn rewards) that only the env's preset
    # makes valid.
    layers = _deep_merge(cpu, load_preset(preset or DEFAULT_PRESET))
    first = load_config(
        config_file, flag_overrides + list(overrides), base=layers, model=_EnvOnly, typed=typed
    )
    env_name = first.env.get("name") or EnvConfig().name
    env_tree, env_preset = env_defaults(env_name)
    env_tree = dict(env_tree)
    by_preset = env_tree.pop("presets", None) or {}
    unknown = sorted(set(by_preset) - set(list_presets()))
    if unknown:
        raise ValueError(
            f"the {env_name} defaults name unknown presets under `presets:`: {unknown}"
        )
    chosen = preset or env_preset or DEFAULT_PRESET
    base = _deep_merge(_deep_merge(cpu, env_tree), load_preset(chosen))
    base = _deep_merge(base, by_preset.get(chosen) or {})
    return load_config(config_file, flag_overrides + list(overrides), base=base, typed=typed)


def _default_run_dir(cfg: Any) -> Path:
    model = Path(cfg.model.name).name or cfg.model.name
    env = cfg.env.name.replace(":", "-").replace("/", "-").replace(".", "-")
    return Path("runs") / f"{env}-{model}-{time.strftime('%Y%m%d-%H%M%S')}"


def _env_origin(
    env: str | None, overrides: list[str], config: Path | None, resume: Path | None
) -> str:
    """Where the run's env name came from, as the user wrote it (`--env sokobn`)."""
    for item in reversed(overrides):
        if item.partition("=")[0].strip() == "env.name":
            return f"--set {item}"
    if env is not None:
        return f"--env {env}"
    if config is not None:
        return f"env.name in {config}"
    if resume is not None:
        return f"env.name in {resume / 'config.yaml'}"
    return "env.name"


def _require_known_env(name: str, origin: str) -> None:
    """Fail before anything is written when `name` is no registered env (the nearest names
    and every known one are listed) or its `module.path:Class` cannot be imported."""
    from agentrl.envs.registry import UnknownEnvError, _resolve, spec

    try:
        entry_point = spec(name).entry_point
        if isinstance(entry_point, str):
            _resolve(entry_point)
    except (UnknownEnvError, ImportError, ValueError) as e:
        _fail(f"{origin}: {e}")


def _join_ranks(cfg: Any) -> int | None:
    """Under torchrun (`WORLD_SIZE` > 1): join the process group and return this rank; else
    None. Multi-rank training needs a sharding backend; `local` is one process."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    if cfg.trainer.backend == "local":
        _fail("torchrun with --backend local: use --backend fsdp2 or deepspeed for several ranks")
    from agentrl.runtime._dist import init_process_group, pick_device

    rank, _ = init_process_group(pick_device(cfg.trainer.device))
    return rank


def train(
    env: Annotated[str | None, typer.Option("--env", help="Env name or module.path:Class.")] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Model alias (tiny, smollm2-135m), HF id, model folder or run checkpoint.",
        ),
    ] = None,
    engine: Annotated[
        str | None, typer.Option("--engine", help="Inference engine: hf or vllm.")
    ] = None,
    backend: Annotated[
        str | None, typer.Option("--backend", help="Training backend: local, fsdp2 or deepspeed.")
    ] = None,
    ray: Annotated[bool, typer.Option("--ray", help="Run the engines as Ray actors.")] = False,
    no_warm_start: Annotated[
        bool,
        typer.Option("--no-warm-start", help="Skip the env defaults' expert warm start (RL only)."),
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option("-c", "--config", help="YAML config file (sections as in --print-config)."),
    ] = None,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="Dotted override key=value (repeatable).")
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option(
            "--preset",
            help=(
                "Algorithm preset: grpo (default), starpo-s, starpo, ppo, rloo, reinforce++, "
                "gigpo, expert-iteration. "
                "An env's defaults may add keys for one preset (sokoban: ppo)."
            ),
        ),
    ] = None,
    steps: Annotated[
        int | None, typer.Option("--steps", help="Training steps (trainer.num_steps).")
    ] = None,
    run_dir: Annotated[
        Path | None,
        typer.Option("--run-dir", help="Run directory (default runs/<env>-<model>-<time>)."),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume", help="Continue the run in this directory from its last checkpoint."
        ),
    ] = None,
    print_config: Annotated[
        bool, typer.Option("--print-config", help="Print the resolved config as YAML and exit.")
    ] = False,
) -> None:
    """Train a policy with RL on a multi-turn env.

    CPU defaults: SmolLM2-135M with GRPO; for `sokoban`, the `tiny` model with a warm start on
    the solver's episodes, then expert iteration (the expert-iteration preset;
    agentrl/train/defaults/cpu-sokoban.yaml).
    """
    from agentrl.algos.presets import UnknownPresetError
    from agentrl.config import ConfigError, dump_config

    flags = {
        "env.name": env,
        "model.name": model,
        "engine.name": engine,
        "trainer.backend": backend,
        "engine.ray": "true" if ray else None,
        "warm_start.expert": "null" if no_warm_start else None,
        "trainer.num_steps": steps,
    }
    base_file = None
    if resume is not None:
        base_file = resume / "config.yaml"
        if not base_file.is_file():
            _fail(f"--resume {resume}: no config.yaml there (is it a run directory?)")
        if run_dir is not None and run_dir.resolve() != resume.resolve():
            _fail("--resume and --run-dir name different directories; give one of them")
        run_dir = resume
    try:
        cfg = resolve_train_config(
            config_file=config,
            overrides=overrides or [],
            preset=preset,
            flags=flags,
            base_file=base_file,
        )
    except (ConfigError, UnknownPresetError) as e:
        _fail(str(e))
    if print_config:
        typer.echo(dump_config(cfg), nl=False)
        return
    _require_known_env(cfg.env.name, _env_origin(env, overrides or [], config, resume))
    require_services(cfg.env.name, cfg.env.kwargs)
    _require_known_model(cfg.model.name)
    rank = _join_ranks(cfg)
    run_dir = run_dir or _default_run_dir(cfg)
    if rank is not None:  # torchrun: every rank uses rank 0's run directory
        from agentrl.runtime._ranks import broadcast_object

        run_dir = broadcast_object(run_dir)
    if resume is None and (run_dir / "checkpoints").is_dir():
        _fail(f"{run_dir} already holds a run; use --resume {run_dir} or another --run-dir")
    if not rank:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(dump_config(cfg))
    from agentrl.cli.run import run_training
    from agentrl.rollout.models import ModelNotFoundError
    from agentrl.runtime._dist import exit_rank, leave_process_group

    ok = False
    resume_cmd = f"{command_name()} train --resume {run_dir}"
    try:
        with env_errors_stop(cfg.env.name, cfg.env.kwargs, resume=resume_cmd):
            run_training(cfg, run_dir, resume=resume is not None)
        ok = True
    except ConfigError as e:  # e.g. an env keyword the env does not take
        _fail(str(e))
    except ModelNotFoundError as e:  # --model names no model folder, alias or reachable id
        _fail(str(e))
    except KeyboardInterrupt:
        typer.echo(f"\ninterrupted; resume with: {resume_cmd}", err=True)
        raise typer.Exit(130) from None
    except Stopped as e:  # Ctrl-C or SIGTERM (agentrl._signals): the run saved its last step
        typer.echo(f"\n{e.what}; resume with: {resume_cmd}", err=True)
        e.reported = True  # type: ignore[attr-defined]
        raise
    finally:
        leave_process_group(ok=ok)
    if rank is not None:  # a torchrun rank that finished: no interpreter teardown (see there)
        exit_rank(0)


def _require_known_model(name: str) -> None:
    """Stop before anything is written when `name` names no model (with the nearest aliases;
    saying so when the hub cannot be reached)."""
    from agentrl.rollout.models import ModelNotFoundError, check_model_name

    try:
        check_model_name(name)
    except ModelNotFoundError as e:
        _fail(f"--model: {e}")


def export(
    run: Annotated[
        Path,
        typer.Argument(help="Run directory, checkpoint folder, model or LoRA adapter folder."),
    ],
    out: Annotated[Path, typer.Option("--out", help="Destination folder (created).")],
) -> None:
    """Write the latest policy of a run as a plain Hugging Face model folder.

    A LoRA adapter folder (`.../policy/adapter`) is written merged into its base model. The
    folder also gets the settings the policy was trained with (`agentrl_settings.yaml`,
    which `agentrl eval` reads)."""
    import shutil

    from agentrl.cli.model_folders import describe_model_folder, read_model_settings
    from agentrl.config import ConfigError
    from agentrl.runtime.lora import is_adapter_dir, merge_adapter_dir
    from agentrl.runtime.model_settings import write_model_settings
    from agentrl.train.checkpoint import model_dir

    adapter = is_adapter_dir(run)
    try:
        source = run if adapter else model_dir(run)
        settings = read_model_settings(source)
    except FileNotFoundError:
        _fail(describe_model_folder(run))
    except ConfigError as e:
        _fail(str(e))
    if out.exists() and any(out.iterdir()):
        _fail(f"--out {out} exists and is not empty")
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if adapter:
        try:
            merge_adapter_dir(source, tmp)
        except (FileNotFoundError, ValueError, RuntimeError) as e:  # e.g. its base model
            shutil.rmtree(tmp, ignore_errors=True)
            _fail(str(e))
    else:
        shutil.copytree(source, tmp)
    if settings is not None:
        write_model_settings(tmp, settings)
    if out.exists():
        out.rmdir()
    tmp.rename(out)
    note = f" with its settings from {settings.source}" if settings is not None else ""
    merged = " (LoRA adapter merged into its base)" if adapter else ""
    typer.echo(f"exported {source} -> {out}{merged}{note}")


def plot(
    runs: Annotated[
        list[Path], typer.Argument(metavar="RUN_DIR", help="Run directories (one line each).")
    ],
    out: Annotated[
        Path | None, typer.Option("--out", help="PNG file (default <first run>/curves.png).")
    ] = None,
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            "-m",
            help="A metrics.jsonl key to draw (repeat for more; warm_start/KEY for the warm "
            "start's; default: the usual curves the runs logged, less those that never "
            "change, reward and success excepted).",
        ),
    ] = None,
) -> None:
    """Draw learning curves (reward, success, entropy, grad norm...) of runs into a PNG.

    A run's warm start is drawn too (`RUN_DIR/warm_start/metrics.jsonl`), so a run stopped
    during its warm start plots."""
    from agentrl.train.plot import plot_runs

    out = out or runs[0] / "curves.png"
    try:
        drawn = plot_runs(runs, out, keys=metric or None)
    except (FileNotFoundError, ValueError) as e:
        _fail(str(e))
    typer.echo(f"wrote {out} ({', '.join(drawn)})")


def register(app: typer.Typer) -> None:
    """Add the commands to the `agentrl` app."""
    app.command("train")(train)
    app.command("eval")(eval_cmd)
    app.command("export")(export)
    app.command("plot")(plot)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(typer.run(train))
