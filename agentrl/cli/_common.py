"""What every command shares: failing with a one-line message."""

from __future__ import annotations

import typer


def fail(message: str, code: int = 2) -> None:
    """Print `error: message` to stderr and exit with `code` (2: bad usage)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)
