"""Progress bars of an SFT run (`agentrl sft` and the warm start of `agentrl train`): one for
the expert episodes as they are played (or read back), then one for the optimizer steps."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from agentrl._console import console

OnEpisode = Callable[[int, int], None]
OnStep = Callable[[int, int, dict[str, float]], None]


@contextmanager
def sft_progress(step_label: str = "sft") -> Iterator[tuple[OnEpisode, OnStep]]:
    """Live bars on the shared stderr console; yields `(on_episode, on_step)` for `run_sft`.

    The steps bar appears with the first step (the expert episodes come first), and picks up
    at a resumed run's step.
    """
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console(),
    ) as bar:
        episodes = bar.add_task("expert episodes", total=None, info="")
        steps: list[int] = []  # the steps task, once there is one

        def on_episode(done: int, total: int) -> None:
            bar.update(episodes, completed=done, total=total)

        def on_step(step: int, total: int, metrics: dict[str, float]) -> None:
            info = f"nll {metrics['sft/nll']:.3f}  acc {metrics['sft/token_accuracy']:.2f}"
            if not steps:
                # begin the ETA at the first step the run takes (a resumed run's is not 1)
                steps.append(bar.add_task(step_label, total=total, completed=step - 1, info=info))
            bar.update(steps[0], completed=step, total=total, info=info)

        yield on_episode, on_step
