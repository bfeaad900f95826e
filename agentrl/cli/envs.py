"""CLI for environments: `agentrl envs list`, `agentrl envs check NAME`, `agentrl play NAME`."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer

envs_app = typer.Typer(help="List and check the registered environments.", no_args_is_help=True)


def parse_env_kwargs(pairs: list[str] | None) -> dict[str, Any]:
    """Turn `["key=value", ...]` into env kwargs; values parse as YAML (`8`, `true`, `[6, 8]`)."""
    import yaml

    kwargs: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{pair!r} is not key=value", param_hint="--set")
        try:
            kwargs[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError:
            kwargs[key.strip()] = text
    return kwargs


_SET_HELP = "Env constructor argument as key=value (repeatable), e.g. --set num_boxes=2."


def registered_max_turns(name: str) -> int | None:
    """The turn limit of NAME as registered (its defaults, else its class attribute)."""
    from agentrl.envs.registry import _resolve, spec

    env_spec = spec(name)
    target = env_spec.entry_point
    target = _resolve(target) if isinstance(target, str) else target
    return env_spec.defaults.get("max_turns", getattr(target, "max_turns", None))


def train_settings(name: str) -> tuple[dict[str, Any], int, str]:
    """How `agentrl train --env NAME` plays NAME by default (CPU defaults, and the env's own
    `agentrl/train/defaults/cpu-NAME.yaml` when there is one): its env keyword arguments,
    its turns per episode, and the settings that differ from the registered env
    (e.g. `history_turns 0, max_turns=10`)."""
    from agentrl.cli.train import resolve_train_config

    cfg = resolve_train_config(
        config_file=None, overrides=[], preset=None, flags={"env.name": name}
    )
    kwargs = cfg.env.kwargs
    env_turns = kwargs.get("max_turns", registered_max_turns(name))
    turns = min(t for t in (cfg.rollout.max_turns, env_turns) if t is not None)
    parts = (
        [] if cfg.rollout.history_turns is None else [f"history_turns {cfg.rollout.history_turns}"]
    )
    parts += [f"{k}={v}" for k, v in kwargs.items()]
    return dict(kwargs), turns, ", ".join(parts)


@envs_app.command("list")
def list_envs() -> None:
    """Show every registered env: name, one-line description, where it comes from, its turns,
    and whether `agentrl train --env NAME` runs a measured recipe (with its result)."""
    from rich.console import Console
    from rich.table import Table

    from agentrl.cli.train import env_recipe
    from agentrl.envs.registry import registry

    table = Table(title="registered envs", title_justify="left")
    table.add_column("name", style="bold", no_wrap=True)
    table.add_column("description", overflow="fold")
    table.add_column("source")
    table.add_column("turns")
    table.add_column("recipe")
    notes, recipes = [], []
    for name, env_spec in registry().items():
        try:
            description = env_spec.description
            _, train_turns, extras = train_settings(name)
            turns = str(registered_max_turns(name))
        except Exception as e:  # noqa: BLE001 - a broken plugin must not hide the others
            description, turns, train_turns, extras = f"[red]cannot import: {e}[/red]", "", 0, ""
        if turns and str(train_turns) != turns:
            turns += f" (train {train_turns})"
        if extras:
            notes.append(f"{name}: `agentrl train` also sets {extras}")
        needs = f" (needs {', '.join(env_spec.requires)})" if env_spec.requires else ""
        recipe = env_recipe(name)
        if recipe:
            recipes.append(f"{name}: {recipe}")
        table.add_row(
            name, description + needs, env_spec.source, turns, "measured" if recipe else ""
        )
    console = Console(width=max(100, Console().width))
    console.print(table)
    notes.append(
        "turns: the registered env's limit; (train N): the turns of `agentrl train --env NAME` "
        "by default (agentrl/train/defaults/). `agentrl eval` uses a model's own settings."
    )
    notes.append(
        "recipe: `agentrl train --env NAME` runs a recipe measured to learn (docs/results.md):"
    )
    notes += [f"  {line}" for line in recipes]
    console.print("\n".join(notes), highlight=False, markup=False)


@envs_app.command("check")
def check(
    name: str = typer.Argument(..., help="Registered env name or module.path:Class."),
    seed: int = typer.Option(0, help="First seed the checks use."),
    episodes: int = typer.Option(3, help="Episodes per check (determinism, random play)."),
    set_: list[str] = typer.Option(None, "--set", help=_SET_HELP),
    train_defaults: bool = typer.Option(
        False,
        "--train-defaults",
        help="Check NAME with the env arguments `agentrl train` uses (before --set).",
    ),
    timeout: float = typer.Option(
        10.0, "--timeout", min=0.01, help="Seconds each reset, step or close may take."
    ),
) -> None:
    """Run the TokenEnv contract checks on NAME; exit code 1 if any fails.

    An unknown NAME exits 2, with the nearest registered names. Without --train-defaults the env has its registered defaults; the last line says how
    `agentrl train` plays it by default."""
    from rich.console import Console

    from agentrl.cli._common import fail
    from agentrl.envs.check import check_env
    from agentrl.envs.registry import UnknownEnvError, spec

    try:
        spec(name)
    except UnknownEnvError as e:  # the nearest names and every known one, not a failed check
        fail(str(e))
    trained = None
    try:
        trained = train_settings(name)
    except Exception:  # noqa: BLE001 - a name that cannot be built: check_env reports it
        pass
    kwargs = {**(trained[0] if trained and train_defaults else {}), **parse_env_kwargs(set_)}
    with _hard_limit(timeout * _MAX_HUNG_CALLS + 60.0, "agentrl envs check"):
        report = check_env(name, seed=seed, num_episodes=episodes, call_timeout_s=timeout, **kwargs)
    console = Console(width=max(100, Console().width))
    console.print(report)
    if trained:
        used = ", ".join(f"{k}={v}" for k, v in kwargs.items()) or "none"
        extras = f", {trained[2]}" if trained[2] else ""
        console.print(
            f"checked with env arguments: {used} (registered defaults otherwise, "
            f"{registered_max_turns(name)} turns); `agentrl train --env {name}` plays it with "
            f"{trained[1]} turns{extras}",
            highlight=False,
        )
    if not report.ok:
        console.print(f"[red]{len(report.failures)} check(s) failed[/red]")
        raise typer.Exit(1)
    console.print("[green]all checks passed[/green]")


_MAX_HUNG_CALLS = 8
"""Hung calls `envs check` may meet (one a check): its whole run is bounded by as many limits."""


@contextmanager
def _hard_limit(seconds: float, what: str) -> Iterator[None]:
    """End the process (exit 1, with a line saying why) if the body runs past `seconds`: the
    fallback when a call hangs where SIGALRM cannot interrupt it (inside C code)."""
    done = threading.Event()

    def guard() -> None:
        if not done.wait(seconds):
            sys.stderr.write(
                f"error: {what} gave no result within {seconds:g} s: an env call hangs where "
                "it cannot be interrupted (inside C code)\n"
            )
            sys.stderr.flush()
            os._exit(1)

    threading.Thread(target=guard, daemon=True, name="agentrl-hard-limit").start()
    try:
        yield
    finally:
        done.set()


EXIT_NOT_FINISHED = 3
"""`agentrl play`'s exit code when the input stops before the episode ends (2 is bad usage)."""


def play(
    name: str = typer.Argument(..., help="Registered env name or module.path:Class."),
    seed: int = typer.Option(0, help="Seed for reset(): the same seed gives the same episode."),
    set_: list[str] = typer.Option(None, "--set", help=_SET_HELP),
    raw: bool = typer.Option(
        False, help="Send each line exactly as typed (no wrapping of bare answers)."
    ),
    timeout: float = typer.Option(
        60.0, "--timeout", min=0.01, help="Seconds each reset or step may take."
    ),
) -> None:
    """Play NAME in the terminal, typing actions as the model would.

    Type an action exactly as a model would answer, e.g. `<answer>Up || Left</answer>`.
    For convenience a line without any `<` is wrapped as `<answer>LINE</answer>` (so `Up`
    works); pass --raw to send lines untouched. An empty line or end of input quits.
    Prints the system prompt, each observation, reward and info, and the final success.
    Exit code 0 when the episode ends, 3 when the input ends or a line is empty first.
    """
    from agentrl.cli._common import fail
    from agentrl.envs.check import EnvCallHung, bound_calls, env_traceback
    from agentrl.envs.registry import UnknownEnvError, make

    try:
        env = make(name, **parse_env_kwargs(set_))
    except UnknownEnvError as e:
        raise typer.BadParameter(str(e), param_hint="NAME") from e
    except (KeyError, ImportError, TypeError, ValueError) as e:
        hint = "NAME / --set" if set_ else "NAME"  # only what was typed
        raise typer.BadParameter(str(e), param_hint=hint) from e
    bound_calls(env, timeout)
    try:
        _play(env, seed, raw)
    except typer.Exit:
        raise
    except EnvCallHung as e:
        fail(f"{e}; the env hangs there (`agentrl envs check {name}` shows where)", code=1)
    except Exception as e:  # noqa: BLE001 - the env's own error: its frames and one line
        typer.echo(env_traceback(e), err=True)
        fail(f"the env raised {type(e).__name__}: {e}", code=1)


def _play(env: Any, seed: int, raw: bool) -> None:
    typer.echo(f"== system prompt\n{env.system_prompt}\n")
    obs, info = env.reset(seed=seed)
    typer.echo(f"== observation (seed {seed}) info={info}\n{_show(obs)}")
    total, turn = 0.0, 0
    while True:
        typer.echo(f"\n[turn {turn + 1}] your action> ", nl=False)
        line = sys.stdin.readline()
        if not line or not line.strip():
            typer.echo(f"\nquit: episode not finished (exit code {EXIT_NOT_FINISHED}).")
            raise typer.Exit(EXIT_NOT_FINISHED)
        action = line.rstrip("\n")
        if not raw and "<" not in action:
            action = f"<answer>{action.strip()}</answer>"
        obs, reward, terminated, truncated, info = env.step(action)
        turn += 1
        total += reward
        typer.echo(f"reward {reward:+.2f} (total {total:+.2f})  info={info}\n{_show(obs)}")
        if terminated or truncated:
            success = bool(info.get("success", False))
            how = "terminated" if terminated else "truncated"
            typer.echo(
                f"\n== episode {how} after {turn} turns: success={success}, return={total:.2f}"
            )
            return


def _show(obs: Any) -> str:
    if isinstance(obs, str):
        return obs
    return "\n".join(f"[{m['role']}] {m['content']}" for m in obs)
