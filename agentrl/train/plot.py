"""Learning curves of one or more runs (matplotlib, Agg backend).

A run's curves come from its RL `metrics.jsonl` and from its warm start's
(`<run>/warm_start/metrics.jsonl`, drawn under `warm_start/...` keys), so a run stopped
during the warm start plots too; an `agentrl sft` output folder plots its own metrics.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl.runtime.metrics import METRICS_FILE, read_metrics
from agentrl.train.checkpoint import WARM_START_DIR

WARM_START_PREFIX = f"{WARM_START_DIR}/"
"""The warm start's metrics are drawn under `warm_start/<key>` (its steps are SFT steps)."""

ALWAYS_KEYS = (
    "reward/mean",
    "success_rate",
    "search/greedy_solved_frac",
    "search/solved_frac",
    "eval/success_rate",
)
"""Reward and success: drawn whenever a run logged them, even when they never change (a run
that fails at every step). A run with a warm start but no RL step yet gets empty
`reward/mean` and `success_rate` panels that say so."""

RL_KEYS = ("reward/mean", "success_rate", "search/greedy_solved_frac")
"""One of these is in every RL step's metrics."""

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
    f"{WARM_START_PREFIX}sft/nll",
    f"{WARM_START_PREFIX}sft/token_accuracy",
)
"""Metrics drawn when present in at least one run, one panel each; those not in
`ALWAYS_KEYS` only when they change (`search/*`: the policy's greedy success on each step's
new rooms, and what the search solved, for `algo.name: expert-iteration` runs; `sft/*`: an
`agentrl sft` folder; `warm_start/sft/*`: a run's warm start)."""


def run_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The metric records of a run: its `metrics.jsonl`, then its warm start's with every key
    but `step` under `warm_start/`. Raises FileNotFoundError when there is neither.

    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> (run / "warm_start").mkdir()
    >>> _ = (run / "warm_start" / "metrics.jsonl").write_text('{"step": 1, "sft/nll": 2.5}\\n')
    >>> run_metrics(run)
    [{'step': 1, 'warm_start/sft/nll': 2.5}]
    """
    run_dir = Path(run_dir)
    warm_start_file = run_dir / WARM_START_DIR / METRICS_FILE
    if not (run_dir / METRICS_FILE).is_file() and not warm_start_file.is_file():
        raise FileNotFoundError(
            f"{run_dir / METRICS_FILE} does not exist, nor {warm_start_file} "
            f"(is {run_dir} a run directory?)"
        )
    records = read_metrics(run_dir) if (run_dir / METRICS_FILE).is_file() else []
    if warm_start_file.is_file():
        for line in warm_start_file.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                step = record.pop("step", None)
                records.append(
                    {"step": step} | {WARM_START_PREFIX + k: v for k, v in record.items()}
                )
    return records


def plot_runs(
    run_dirs: Sequence[Path], out: Path, *, keys: Sequence[str] | None = None
) -> list[str]:
    """Draw one panel per metric with one line per run into the PNG `out`.

    `keys` None draws those of `DEFAULT_KEYS` that some run logged, less the ones that hold
    one value in every step of every run (`actor/kl` without a KL term, say) unless they are
    in `ALWAYS_KEYS` or that leaves none, plus empty reward and success panels while no run
    has an RL step; given `keys` are drawn as asked. Returns the keys drawn. Raises
    ValueError when none of the keys is in any run.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {Path(r): run_metrics(Path(r)) for r in run_dirs}
    asked = list(DEFAULT_KEYS if keys is None else keys)
    values = {
        k: {r[k] for recs in runs.values() for r in recs if isinstance(r.get(k), int | float)}
        for k in asked
    }
    drawn = [k for k in asked if values[k]]
    if not drawn:
        raise ValueError(f"none of the metrics {asked} appear in {[str(r) for r in runs]}")
    if keys is None:
        changing = [k for k in drawn if len(values[k]) > 1 or k in ALWAYS_KEYS]
        drawn = changing or drawn
        warm_start = any(k.startswith(WARM_START_PREFIX) for k in drawn)
        if warm_start and not any(values[k] for k in RL_KEYS):  # stopped in the warm start
            drawn = ["reward/mean", "success_rate", *drawn]
    cols = min(3, len(drawn))
    rows = math.ceil(len(drawn) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.2 * rows), squeeze=False)
    for ax, key in zip(axes.flat, drawn, strict=False):
        for run, records in runs.items():
            points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), int | float)]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="." if len(xs) < 30 else None, label=run.name)
        if not values.get(key):
            ax.text(0.5, 0.5, "no RL step yet", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(key)
        ax.set_xlabel("warm-start step" if key.startswith(WARM_START_PREFIX) else "step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(drawn) :]:
        ax.axis("off")
    next(ax for ax, key in zip(axes.flat, drawn, strict=False) if values.get(key)).legend(
        fontsize="small"
    )
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return drawn
