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


@app.callback()
def _root() -> None:
    """Train LLM agents with reinforcement learning on multi-turn tasks."""


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
