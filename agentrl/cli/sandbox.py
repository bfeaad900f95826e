"""`agentrl sandbox build|check`: build the sandbox image and self-test the sandbox."""

from __future__ import annotations

import typer

app = typer.Typer(help="Build and check the code-execution sandbox.", no_args_is_help=True)


@app.command()
def build(
    offline: bool = typer.Option(
        False, "--offline", help="No container registry: debootstrap Debian, then docker import."
    ),
    image: str = typer.Option("agentrl-sandbox:latest", help="Image name to build."),
    force: bool = typer.Option(False, help="Rebuild even if the image exists."),
) -> None:
    """Build the sandbox image (from the shipped Dockerfile, or offline with debootstrap)."""
    from agentrl.sandbox.image import build_from_dockerfile, build_offline, image_exists

    if not force and image_exists(image):
        typer.echo(f"{image} already exists (use --force to rebuild)")
        return
    image_id = build_offline(image) if offline else build_from_dockerfile(image)
    typer.echo(f"built {image}: {image_id}")


@app.command()
def check(
    backend: str = typer.Option(
        "docker", help="docker, local (bubblewrap) or a registered backend."
    ),
    image: str = typer.Option("agentrl-sandbox:latest", help="Image for the docker backend."),
) -> None:
    """Run a self-test of the sandbox (isolation and limits) and print a table."""
    import time

    from rich.console import Console
    from rich.table import Table

    from agentrl.sandbox import SandboxConfig, SandboxError, make_sandbox

    try:
        sandbox = make_sandbox(
            SandboxConfig(backend=backend, image=image, pool_size=1, memory_mb=256, work_mb=32)
        )
    except SandboxError as e:
        typer.echo(f"sandbox unavailable: {e}", err=True)
        raise typer.Exit(1) from None
    checks = [
        ("hello", "print('hello')", 5, lambda r: r.stdout == "hello\n"),
        ("non-root", "import os; print(os.getuid())", 5, lambda r: r.stdout.strip() != "0"),
        ("timeout", "while True: pass", 1, lambda r: r.timed_out),
        (
            "no network",
            "import socket; print([n for _, n in socket.if_nameindex()])",
            5,
            lambda r: r.stdout.strip() in ("['lo']", "[]"),
        ),
        ("read-only root", "open('/usr/x', 'w')", 5, lambda r: r.exit_code != 0),
        ("output cap", "print('x' * 10_000_000)", 5, lambda r: r.truncated),
        (
            "memory limit",
            "a = []\nwhile True: a.append(b'x' * (16 << 20))",
            5,
            lambda r: r.oom_killed or "MemoryError" in r.stderr,
        ),
    ]
    table = Table(title=f"agentrl sandbox check ({backend})")
    for column in ("check", "result", "time (ms)"):
        table.add_column(column)
    failed = 0
    with sandbox:
        for name, code, timeout, ok in checks:
            start = time.perf_counter()
            result = sandbox.run(code, timeout=timeout)
            passed = ok(result)
            failed += not passed
            ms = f"{(time.perf_counter() - start) * 1000:.0f}"
            table.add_row(name, "[green]ok[/]" if passed else "[red]FAIL[/]", ms)
    Console().print(table)
    if failed:
        raise typer.Exit(1)
