"""The `agentrl` command line. Each command group lives beside the code it drives."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="agentrl",
    help="Train LLM agents with reinforcement learning on multi-turn tasks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


from agentrl.envs._cli import envs_app, play  # noqa: E402 - registered after `app` exists

app.add_typer(envs_app, name="envs")
from agentrl.sandbox._cli import app as sandbox_app  # noqa: E402

app.add_typer(sandbox_app, name="sandbox")
app.command("play")(play)

from agentrl.train._cli import register as _register_train  # noqa: E402

_register_train(app)  # train, eval, export, plot

from agentrl.rollout._cli import rollout_cmd  # noqa: E402
from agentrl.trajectory._cli import view  # noqa: E402

app.command("rollout")(rollout_cmd)
app.command("view")(view)
from agentrl.sft._cli import sft  # noqa: E402

app.command("sft")(sft)


@app.callback()
def _root() -> None:
    """Train LLM agents with reinforcement learning on multi-turn tasks."""


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
