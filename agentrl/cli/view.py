"""`agentrl view`: show one episode of a trajectory file in the terminal and as HTML."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer


def _load_tokenizer(name: str) -> Any:
    """A tokenizer by alias, model path or id; a bare tokenizer folder also works, and a
    LoRA adapter folder gives its base model's."""
    from agentrl.runtime.lora import adapter_base, is_adapter_dir

    if is_adapter_dir(name):
        name = adapter_base(name)
    if Path(name).is_dir() and not (Path(name) / "config.json").is_file():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(name)
    try:
        from agentrl.rollout.models import load_tokenizer
    except ImportError:  # pragma: no cover - the models module ships with agentrl
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(name)
    return load_tokenizer(name)


def view(
    path: Annotated[Path, typer.Argument(help="A trajectory file (.jsonl or .parquet).")],
    episode: Annotated[int, typer.Option("--episode", "-e", help="Index of the episode.")] = 0,
    html_out: Annotated[
        Path | None, typer.Option("--html", help="Also write a self-contained HTML page here.")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Tokenizer to decode ids (default: the file's model)."),
    ] = None,
) -> None:
    """Show an episode: trained tokens highlighted, per-turn rewards and env observations."""
    from rich.console import Console

    from agentrl.trajectory.io import read_trajectories
    from agentrl.trajectory.view import episode_html, render_episode

    console = Console()
    try:
        data = read_trajectories(path)
    except (FileNotFoundError, ValueError) as e:
        raise typer.BadParameter(str(e), param_hint="PATH") from None
    if not data.trajectories:
        raise typer.BadParameter(f"{path} holds no episodes", param_hint="PATH")
    if not 0 <= episode < len(data.trajectories):
        raise typer.BadParameter(
            f"{path} holds episodes 0..{len(data.trajectories) - 1}", param_hint="--episode"
        )
    name = model or data.metadata.get("model")
    if not name:
        raise typer.BadParameter(
            f"{path} does not name its model; pass --model NAME_OR_PATH", param_hint="--model"
        )
    tokenizer = _load_tokenizer(str(name))
    traj = data.trajectories[episode]
    console.print(render_episode(traj, tokenizer))
    if html_out is not None:
        title = f"{path.name} · episode {episode}"
        html_out.parent.mkdir(parents=True, exist_ok=True)
        html_out.write_text(episode_html(traj, tokenizer, title=title))
        console.print(f"wrote {html_out}")
