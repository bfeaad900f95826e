"""Learning curves from one or more runs' `metrics.jsonl` (matplotlib, Agg backend)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from agentrl.runtime.metrics import read_metrics

DEFAULT_KEYS = (
    "reward/mean",
    "success_rate",
    "search/greedy_solved_frac",
    "search/solved_frac",
    "reward/in_group_std",
    "actor/entropy",
    "actor/grad_norm",
    "actor/kl",
    "eval/success_rate",
    "time/step",
    "sft/nll",
    "sft/token_accuracy",
)
"""Metrics drawn when present in at least one run and not the same number throughout, one
panel each (`search/*`: the policy's greedy success on each step's new rooms, and what the
search solved, for `algo.name: expert-iteration` runs)."""


def plot_runs(
    run_dirs: Sequence[Path], out: Path, *, keys: Sequence[str] | None = None
) -> list[str]:
    """Draw one panel per metric with one line per run into the PNG `out`.

    `keys` None draws those of `DEFAULT_KEYS` that some run logged, less the ones that hold
    one value in every step of every run (`actor/kl` without a KL term, say), unless that
    leaves none; given `keys` are drawn as asked. Returns the keys drawn. Raises ValueError
    when none of the keys is in any run.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {Path(r): read_metrics(Path(r)) for r in run_dirs}
    asked = list(DEFAULT_KEYS if keys is None else keys)
    values = {
        k: {r[k] for recs in runs.values() for r in recs if isinstance(r.get(k), int | float)}
        for k in asked
    }
    drawn = [k for k in asked if values[k]]
    if not drawn:
        raise ValueError(f"none of the metrics {asked} appear in {[str(r) for r in runs]}")
    if keys is None:
        drawn = [k for k in drawn if len(values[k]) > 1] or drawn
    cols = min(3, len(drawn))
    rows = math.ceil(len(drawn) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.2 * rows), squeeze=False)
    for ax, key in zip(axes.flat, drawn, strict=False):
        for run, records in runs.items():
            points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), int | float)]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="." if len(xs) < 30 else None, label=run.name)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(drawn) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize="small")
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return drawn
