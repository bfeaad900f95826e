"""The `agentrl` command line: every command, one module per command group; heavy libraries
(torch, transformers, vllm, ray, docker) are imported inside the commands."""

from __future__ import annotations

import sys

import typer

from agentrl._signals import Stopped
from agentrl._signals import install as install_signals
from agentrl._watchdog import watch
from agentrl.cli.envs import envs_app, play
from agentrl.cli.rollout import rollout_cmd
from agentrl.cli.sandbox import app as sandbox_app
from agentrl.cli.sft import sft
from agentrl.cli.train import register as register_train_commands
from agentrl.cli.view import view

app = typer.Typer(
    name="agentrl",
    help="Train LLM agents with reinforcement learning on multi-turn tasks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

app.add_typer(envs_app, name="envs")  # envs list | check
app.command("play")(play)
register_train_commands(app)  # train, eval, export, plot
app.command("sft")(sft)
app.command("rollout")(rollout_cmd)
app.command("view")(view)
app.add_typer(sandbox_app, name="sandbox")  # sandbox build | check


@app.callback()
def _root() -> None:
    """Train LLM agents with reinforcement learning on multi-turn tasks."""
    from agentrl._console import quiet_third_party

    quiet_third_party()


def main() -> None:
    """Console-script entry point. Ctrl-C exits 130 and SIGTERM 143, with one line and no
    traceback, after `finally` blocks and exit hooks have run (`agentrl._signals`), so a run
    saves what it has and engine subprocesses and sandboxes are shut down."""
    install_signals()
    watch()  # what the command starts ends with it, even after a kill -9 (agentrl._watchdog)
    try:
        app()
    except SystemExit as e:
        if isinstance(e, Stopped) and not getattr(e, "reported", False):
            sys.stderr.write(f"\n{e.what}\n")
        _exit_without_hung_threads(e.code)
        raise
    _exit_without_hung_threads(0)


def _exit_without_hung_threads(code: int | str | None) -> None:
    """With a thread still inside a timed-out env call (`rollout.env_executor: thread`), run
    the exit hooks and end the process now: Python's own exit would join that thread."""
    loop = sys.modules.get("agentrl.rollout.loop")
    if loop is None or not loop.hung_env_threads():
        return
    import atexit
    import os

    if isinstance(code, str):
        sys.stderr.write(f"{code}\n")
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


if __name__ == "__main__":
    main()
