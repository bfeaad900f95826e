"""Progress bars of an SFT run (`agentrl sft` and the warm start of `agentrl train`): one for
the expert episodes as they are played (or read back), then one for the optimizer steps."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from agentrl._console import console

OnEpisode = Callable[[int, int], None]
OnStep = Callable[[int, int, dict[str, float]], None]


@contextmanager
def sft_progress(
    num_episodes: int | None = None, step_label: str = "sft"
) -> Iterator[tuple[OnEpisode, OnStep]]:
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
        episodes = bar.add_task("expert episodes", total=num_episodes, info="")
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


def sft_log_progress(log: logging.Logger, every_s: float = 30.0) -> tuple[OnEpisode, OnStep]:
    """`(on_episode, on_step)` that log a line at most every `every_s` seconds (and at the
    end of each phase): the progress of a run without bars (`logging.progress=false`)."""
    last = [time.monotonic()]

    def due(done: int, total: int) -> bool:
        if done < total and time.monotonic() - last[0] < every_s:
            return False
        last[0] = time.monotonic()
        return True

    def on_episode(done: int, total: int) -> None:
        if due(done, total):
            log.info("expert episodes %d/%d", done, total)

    def on_step(step: int, total: int, metrics: dict[str, float]) -> None:
        if due(step, total):
            log.info("sft step %d/%d nll %.3f", step, total, metrics["sft/nll"])

    return on_episode, on_step
