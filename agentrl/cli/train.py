"""`agentrl train`, `agentrl export`, `agentrl plot` (and `agentrl eval`, from `cli/eval.py`).

Heavy libraries (torch, transformers) are imported inside the commands so `agentrl --help`
stays fast.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from agentrl._console import command_name
from agentrl._signals import Stopped
from agentrl.cli._common import RunError, env_errors_stop, missing_service
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


LLM_RECIPE_SUFFIX = "-llm"
"""`defaults/cpu-<env>-llm.yaml`: the env's recipe for a pretrained LLM, where it has one
beside the `tiny` recipe of `cpu-<env>.yaml` (Sokoban)."""

_TINY_VOCAB = 4096
"""A model whose vocabulary has at most this many ids is `tiny` or built like it (a
character-level tokenizer); a pretrained LLM's has tens of thousands."""


def is_pretrained(model: str | None) -> bool:
    """Whether `model` is a pretrained LLM rather than `tiny` (or a model, adapter, checkpoint
    or run folder of a model built like it: a vocabulary of at most 4,096 ids). None is the
    config's default model.

    >>> is_pretrained("tiny"), is_pretrained("smollm2-135m"), is_pretrained("Qwen/Qwen2.5-0.5B")
    (False, True, True)
    """
    import json

    if model is None:
        from agentrl.runtime.config import ModelConfig

        model = ModelConfig().name
    if model == "tiny":
        return False
    folder = Path(model)
    checkpoints = sorted(folder.glob("checkpoints/*/policy"))
    for policy in [folder, folder / "policy", *checkpoints[-1:]]:
        for sub in (policy, policy / "model", policy / "adapter"):
            try:
                if (sub / "adapter_config.json").is_file():
                    base = json.loads((sub / "adapter_config.json").read_text())
                    return is_pretrained(base.get("base_model_name_or_path"))
                if (sub / "config.json").is_file():
                    vocab = json.loads((sub / "config.json").read_text()).get("vocab_size")
                    return not (isinstance(vocab, int) and vocab <= _TINY_VOCAB)
            except (OSError, ValueError):
                return True
    return True


def recipe_path(env: str, model: str | None = None) -> Path | None:
    """The env's CPU defaults file for `model`: `cpu-<env>-llm.yaml` when the env has one and
    `model` (the one the user named; None: none named) is a pretrained LLM that is not the
    model `cpu-<env>.yaml` names; else `cpu-<env>.yaml`; None when the env has neither.

    >>> recipe_path("sokoban").name, recipe_path("sokoban", "smollm2-135m").name
    ('cpu-sokoban.yaml', 'cpu-sokoban-llm.yaml')
    >>> recipe_path("math-arithmetic", "smollm2-135m").name, recipe_path("guess-number")
    ('cpu-math-arithmetic.yaml', None)
    """
    import yaml

    base = DEFAULTS / f"cpu-{env}.yaml"
    llm = DEFAULTS / f"cpu-{env}{LLM_RECIPE_SUFFIX}.yaml"
    if not base.is_file():
        return None
    if model is not None and llm.is_file() and is_pretrained(model):
        named = ((yaml.safe_load(base.read_text()) or {}).get("model") or {}).get("name")
        return base if named == model else llm
    return base


def env_defaults(env: str, model: str | None = None) -> tuple[dict[str, Any], str | None]:
    """The CPU defaults of one env for `model` (`recipe_path`), if it has some, and the preset
    they name (their top-level `preset:` key), else `({}, None)`. The tree's `presets:`
    section, if any, maps a preset name to keys for runs under that preset only."""
    import yaml

    path = recipe_path(env, model)
    if path is None:
        return {}, None
    tree = yaml.safe_load(path.read_text()) or {}
    for line in _RECIPE_LINES:
        tree.pop(line, None)
    engine = tree.get("engine") or {}
    if engine.get("name") == "vllm" and importlib.util.find_spec("vllm") is None:
        tree["engine"] = {**engine, "name": "hf"}  # the recipe's engine when it is installed
    return tree, tree.pop("preset", None)


_RECIPE_LINES = ("recipe", "rl_pace")
"""Top-level lines of a defaults file that are not config keys."""


def _env_defaults_line(env: str, key: str, model: str | None = None) -> Any:
    """One top-level line of the env's CPU defaults for `model` that is not a config key
    (`_RECIPE_LINES`), or None."""
    import yaml

    path = recipe_path(env, model)
    if path is None:
        return None
    return (yaml.safe_load(path.read_text()) or {}).get(key)


def env_recipe(env: str, model: str | None = None) -> str | None:
    """The measured result of the env's CPU defaults (their `recipe:` line), if it has one."""
    return _env_defaults_line(env, "recipe", model)


def env_recipe_model(env: str, model: str | None = None) -> str | None:
    """The model the env's recipe for `model` was measured with (the model it names)."""
    named = _env_defaults_line(env, "model", model)
    return named.get("name") if isinstance(named, dict) else None


def env_rl_pace(env: str, model: str | None = None) -> float | None:
    """How many warm-start SFT steps one RL step of the env's CPU defaults takes (their
    `rl_pace:` line, measured with the recipe), if they record it."""
    pace = _env_defaults_line(env, "rl_pace", model)
    return None if pace is None else float(pace)


def _preset_for(preset: str | None, env_preset: str | None, user_algo: str | None) -> str | None:
    """The preset of a run: `--preset`; else, when the user's file or flags name no
    algorithm, the env's preset (else `grpo`); else the env's preset if it runs that
    algorithm, the preset of the algorithm's name if there is one, or none (the algorithm's
    config defaults)."""
    from agentrl.algos.presets import list_presets, load_preset

    if preset is not None:
        return preset
    if user_algo is None:
        return env_preset or DEFAULT_PRESET
    if env_preset is not None and load_preset(env_preset)["algo"].get("name") == user_algo:
        return env_preset
    return user_algo if user_algo in list_presets() else None


def _drop_unread_algo_keys(tree: dict[str, Any], name: str | None) -> dict[str, Any]:
    """`tree` without the `algo.*` keys that algorithm `name` (the run's) does not read: a
    lower layer's keys for another algorithm (say the Sokoban recipe's `search_beam`) do
    nothing in this run and must not block it."""
    from agentrl.algos.config import AlgoConfig, algo_keys

    algo = tree.get("algo")
    if not isinstance(algo, dict):
        return tree
    reads = algo_keys(name or AlgoConfig.model_fields["name"].default)
    return {**tree, "algo": {k: v for k, v in algo.items() if k in reads}}


def _section(tree: dict[str, Any], section: str) -> dict[str, Any]:
    value = tree.get(section)
    return value if isinstance(value, dict) else {}


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
    the other layers name; its `presets: {NAME: {...}}` section holds keys that only runs
    under preset NAME take (say the rooms a step that let a critic fit).

    The preset is `--preset`. Without it, a file or flag that names the algorithm
    (`algo.name`) picks the env's preset if that runs the same algorithm, else the preset of
    the algorithm's name (`--set algo.name=ppo` is `--preset ppo`, the env's keys for it
    included), else none; the env's preset, or `grpo`, when nothing names one. So the keys the
    env's preset sets besides `algo:` (Sokoban's rooms a step and lr for expert iteration) do
    not follow a switch to another algorithm.

    The lower layers' `algo.*` keys that the run's algorithm does not read are dropped (the
    Sokoban recipe's `search_beam` in a `grpo` run); such a key set in the file, a flag or
    `--set` is refused (`AlgoConfig`), naming the keys the algorithm reads.

    `base_file` (a resumed run's config.yaml) replaces all defaults and the preset.
    """
    import yaml

    from agentrl.algos.presets import list_presets, load_preset
    from agentrl.config import EnvConfig, _deep_merge, load_config
    from agentrl.runtime.config import config_tree

    flag_overrides = [f"{k}={v}" for k, v in flags.items() if v is not None]
    typed = {f"{k}={v}": _as_typed(k, v) for k, v in flags.items() if v is not None}
    user_overrides = flag_overrides + list(overrides)
    user, _ = config_tree(config_file, user_overrides, typed=typed)
    user_algo = _section(user, "algo").get("name")
    if base_file is not None:
        base = yaml.safe_load(Path(base_file).read_text()) or {}
        base = _drop_unread_algo_keys(base, user_algo or _section(base, "algo").get("name"))
        return load_config(config_file, user_overrides, base=base, typed=typed)
    cpu = yaml.safe_load((DEFAULTS / "cpu.yaml").read_text())
    env_name = _section(user, "env").get("name") or EnvConfig().name
    env_tree, env_preset = env_defaults(env_name, _section(user, "model").get("name"))
    env_tree = dict(env_tree)
    by_preset = env_tree.pop("presets", None) or {}
    unknown = sorted(set(by_preset) - set(list_presets()))
    if unknown:
        raise ValueError(
            f"the {env_name} defaults name unknown presets under `presets:`: {unknown}"
        )
    chosen = _preset_for(preset, env_preset, user_algo)
    base = _deep_merge(cpu, env_tree)
    if chosen is not None:
        base = _deep_merge(base, load_preset(chosen))
        base = _deep_merge(base, by_preset.get(chosen) or {})
    base = _drop_unread_algo_keys(base, user_algo or _section(base, "algo").get("name"))
    return load_config(config_file, user_overrides, base=base, typed=typed)


def override_items(overrides: Mapping[str, Any] | None) -> list[str]:
    """`--set` items for a dict of dotted keys and values (the Python API's `overrides`): a
    value goes as JSON, which `--set` reads as YAML, unless it is a string that reads as
    itself.

    >>> override_items({"trainer.num_steps": 2, "env.kwargs": {"size": 6}, "model.name": "tiny"})
    ['trainer.num_steps=2', 'env.kwargs={"size": 6}', 'model.name=tiny']
    >>> override_items({"model.name": "true"})
    ['model.name="true"']
    """
    from agentrl.config import _parse_value

    items = []
    for key, value in (overrides or {}).items():
        if isinstance(value, Path):
            value = str(value)
        if isinstance(value, str) and _parse_value(value) == value:
            items.append(f"{key}={value}")
        else:
            items.append(f"{key}={json.dumps(value)}")
    return items


@dataclass
class TrainResult:
    """What a finished run left: its folder and the metrics of its last step."""

    run_dir: Path
    """The run folder (config.yaml, metrics.jsonl, checkpoints/); `agentrl.evaluate` takes it."""
    metrics: dict[str, float] = field(default_factory=dict)
    """The last step's metrics (the last line of metrics.jsonl): `reward/mean`,
    `success_rate`, and `val/success_rate` on an eval step."""


def last_metrics(run_dir: Path) -> dict[str, float]:
    """The last line of the run's metrics.jsonl, or {} when it has none."""
    from agentrl.runtime.metrics import METRICS_FILE

    path = Path(run_dir) / METRICS_FILE
    lines = path.read_text().splitlines() if path.is_file() else []
    return json.loads(lines[-1]) if lines else {}


def train_run(
    cfg: Any, run_dir: Path | None = None, *, resume: bool = False, env_origin: str = "env.name"
) -> TrainResult:
    """Run `cfg` into `run_dir` (default `runs/<env>-<model>-<time>`), or continue the run
    there (`resume`): what `agentrl train` and `agentrl.train` run once the config is resolved.

    Before anything is written it checks that the env is known (`env_origin` says where its
    name came from, in the error), that the services it needs answer, and that a new run's
    folder holds no run; it raises `RunError` when not. Under torchrun every rank joins the
    process group and uses rank 0's folder.
    """
    from agentrl.config import dump_config

    _require_known_env(cfg.env.name, env_origin)
    why = missing_service(cfg.env.name, cfg.env.kwargs)
    if why is not None:
        raise RunError(why, code=1)
    _require_known_model(cfg.model.name)
    rank = _join_ranks(cfg)
    run_dir = Path(run_dir or _default_run_dir(cfg))
    if rank is not None:  # torchrun: every rank uses rank 0's run directory
        from agentrl.runtime._ranks import broadcast_object

        run_dir = broadcast_object(run_dir)
    if not resume and (run_dir / "checkpoints").is_dir():
        raise RunError(
            f"{run_dir} already holds a run; use --resume {run_dir} or another --run-dir"
        )
    if not rank:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(dump_config(cfg))
    from agentrl.cli.run import run_training
    from agentrl.runtime._dist import leave_process_group

    ok = False
    try:
        run_training(cfg, run_dir, resume=resume)
        ok = True
    finally:
        leave_process_group(ok=ok)
    return TrainResult(run_dir, last_metrics(run_dir))


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
    """Raise `RunError` when `name` is no registered env (the nearest names and every known
    one are listed) or its `module.path:Class` cannot be imported."""
    from agentrl.envs.registry import UnknownEnvError, _resolve, spec

    try:
        entry_point = spec(name).entry_point
        if isinstance(entry_point, str):
            _resolve(entry_point)
    except (UnknownEnvError, ImportError, ValueError) as e:
        raise RunError(f"{origin}: {e}") from None


def _join_ranks(cfg: Any) -> int | None:
    """Under torchrun (`WORLD_SIZE` > 1): join the process group and return this rank; else
    None. Multi-rank training needs a sharding backend; `local` is one process."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    if cfg.trainer.backend == "local":
        raise RunError(
            "torchrun with --backend local: use --backend fsdp2 or deepspeed for several ranks"
        )
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
        str | None,
        typer.Option("--engine", help="Inference engine: hf, vllm or a registered one."),
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
    agentrl/train/defaults/cpu-sokoban.yaml), and with a pretrained `--model` a LoRA warm
    start, then StarPO-S (agentrl/train/defaults/cpu-sokoban-llm.yaml).
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
    from agentrl.rollout.models import ModelNotFoundError
    from agentrl.runtime._dist import exit_rank

    run_dir = run_dir or _default_run_dir(cfg)
    resume_cmd = f"{command_name()} train --resume {run_dir}"
    try:
        with env_errors_stop(cfg.env.name, cfg.env.kwargs, resume=resume_cmd):
            train_run(
                cfg,
                run_dir,
                resume=resume is not None,
                env_origin=_env_origin(env, overrides or [], config, resume),
            )
    except RunError as e:
        _fail(str(e), code=e.code)
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
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # a finished torchrun rank: no interpreter
        exit_rank(0)  # teardown (see there)


def _require_known_model(name: str) -> None:
    """Raise `RunError` before anything is written when `name` names no model (with the
    nearest aliases; saying so when the hub cannot be reached)."""
    from agentrl.rollout.models import ModelNotFoundError, check_model_name

    try:
        check_model_name(name)
    except ModelNotFoundError as e:
        raise RunError(f"--model: {e}") from None


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
