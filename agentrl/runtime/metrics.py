"""Per-step metrics: `<run>/metrics.jsonl`, TensorBoard, optional W&B, collapse warning."""

from __future__ import annotations

import json
import math
import os
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.runtime.config import LoggingConfig
from agentrl.trajectory.types import Trajectory, tool_use_stats

METRICS_FILE = "metrics.jsonl"


def trajectory_stats(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Reward, success, length and status counts over a step's trajectories (and, for tool
    envs, `episode/tool_call_rate` and `episode/tool_ok_rate`: `tool_use_stats`)."""
    if not trajectories:
        return {}
    rewards = np.array([t.total_reward for t in trajectories], dtype=np.float64)
    trainable = [t for t in trajectories if t.status.trainable]
    return {
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std()),
        "reward/max": float(rewards.max()),
        "reward/min": float(rewards.min()),
        "success_rate": float(np.mean([t.success for t in trajectories])),
        "episode/num_turns": float(np.mean([t.num_turns for t in trajectories])),
        "episode/sampled_tokens": float(np.mean([t.num_sampled_tokens for t in trajectories])),
        "episode/truncated_frac": float(np.mean([t.status == "truncated" for t in trajectories])),
        "episode/error_frac": 1.0 - len(trainable) / len(trajectories),
        **{f"episode/{k}": v for k, v in tool_use_stats(trajectories).items()},
    }


def in_group_reward_std(returns: Sequence[float], group_ids: Sequence[int]) -> float:
    """Mean over groups of the reward std inside each group (0 when every group agrees)."""
    groups: dict[int, list[float]] = {}
    for r, g in zip(returns, group_ids, strict=True):
        groups.setdefault(int(g), []).append(float(r))
    if not groups:
        return 0.0
    return float(np.mean([np.std(v) for v in groups.values()]))


ABSOLUTE_SIGNALS = ("parse_failures", "no_reward_variance")
"""`CollapseDetector`'s signals that raise the warning on their own."""


class CollapseDetector:
    """The "Echo Trap" early warning: in-group reward std and entropy fall, grad norm spikes.

    Each of those signals compares the latest value with the mean of the previous `WINDOW`
    steps; the warning fires when at least `MIN_SIGNALS` fire together. Two absolute signals
    raise it on their own, on every step they hold, so that a dead run keeps saying so:
    `parse_failures` (at least `MAX_PARSE_FAILURE` of the answers did not parse) and
    `no_reward_variance` (`DEAD_STEPS` steps in a row where no group's episodes differed).

    >>> d = CollapseDetector()
    >>> [d.update(reward_std=1.0, entropy=2.0, grad_norm=1.0)[0] for _ in range(5)]
    [False, False, False, False, False]
    >>> d.update(reward_std=0.1, entropy=0.5, grad_norm=1.0)
    (True, ['reward_std', 'entropy'])
    >>> d = CollapseDetector()
    >>> d.update(reward_std=0.3, entropy=0.5, grad_norm=1.0, parse_failure_rate=0.9)
    (True, ['parse_failures'])
    >>> [d.update(reward_std=0.0, entropy=0.0, grad_norm=0.0)[1] for _ in range(10)][-2:]
    [[], ['no_reward_variance']]
    """

    WINDOW = 5
    """Steps of history the latest step is compared with."""
    REWARD_STD_DROP = 0.5
    """Signal when the in-group reward std falls below this fraction of the window mean."""
    ENTROPY_DROP = 0.5
    """Signal when the entropy falls below this fraction of the window mean."""
    GRAD_NORM_SPIKE = 3.0
    """Signal when the grad norm exceeds this multiple of the window mean."""
    MIN_SIGNALS = 2
    """Signals that must fire together to raise the warning."""
    MAX_PARSE_FAILURE = 0.5
    """Warn on every step where at least this share of the answers did not parse."""
    DEAD_STEPS = 10
    """Warn on every step once this many steps in a row had no reward difference in any group."""

    def __init__(self) -> None:
        self.history: dict[str, deque[float]] = {
            k: deque(maxlen=self.WINDOW) for k in ("reward_std", "entropy", "grad_norm")
        }
        self.steps_without_variance = 0

    def state(self) -> dict[str, list[float]]:
        """The recent history, for checkpoints."""
        return {k: list(h) for k, h in self.history.items()} | {
            "steps_without_variance": [float(self.steps_without_variance)]
        }

    def load_state(self, state: dict[str, list[float]]) -> None:
        """Restore what `state` returned."""
        for key, values in state.items():
            if key == "steps_without_variance":
                self.steps_without_variance = int(values[0])
                continue
            self.history[key].clear()
            self.history[key].extend(values)

    def update(
        self,
        *,
        reward_std: float,
        entropy: float,
        grad_norm: float,
        parse_failure_rate: float = 0.0,
    ) -> tuple[bool, list[str]]:
        """Add one step; return (warning, names of the signals that fired)."""
        latest = {"reward_std": reward_std, "entropy": entropy, "grad_norm": grad_norm}
        fired = []
        if all(len(h) == self.WINDOW for h in self.history.values()):
            mean = {k: float(np.mean(h)) for k, h in self.history.items()}
            if mean["reward_std"] > 0 and reward_std < self.REWARD_STD_DROP * mean["reward_std"]:
                fired.append("reward_std")
            if mean["entropy"] > 0 and entropy < self.ENTROPY_DROP * mean["entropy"]:
                fired.append("entropy")
            if mean["grad_norm"] > 0 and grad_norm > self.GRAD_NORM_SPIKE * mean["grad_norm"]:
                fired.append("grad_norm")
        for k, v in latest.items():
            if math.isfinite(v):
                self.history[k].append(v)
        relative = len(fired) >= self.MIN_SIGNALS
        if parse_failure_rate >= self.MAX_PARSE_FAILURE:
            fired.append("parse_failures")
        if math.isfinite(reward_std):
            self.steps_without_variance = (self.steps_without_variance + 1) * (reward_std == 0)
        if self.steps_without_variance >= self.DEAD_STEPS:
            fired.append("no_reward_variance")
        absolute = any(name in ABSOLUTE_SIGNALS for name in fired)
        return relative or absolute, fired


class MetricsLogger:
    """Writes one JSON line per step, TensorBoard scalars and (optionally) W&B."""

    def __init__(
        self, run_dir: Path, cfg: LoggingConfig, *, run_name: str, config: Mapping[str, Any]
    ) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tb = None
        self._wandb = None
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))
        if cfg.wandb:
            try:
                import wandb
            except ImportError as e:
                raise RuntimeError("logging.wandb=true needs wandb: pip install wandb") from e
            self._wandb = wandb.init(
                project=os.environ.get("WANDB_PROJECT", "agentrl"),
                name=run_name,
                config=dict(config),
                dir=str(run_dir),
            )

    def truncate_after(self, step: int) -> None:
        """Drop lines of steps after `step` (written before a crash, redone on resume)."""
        if not self.path.is_file():
            return
        kept = [line for line in self.path.read_text().splitlines() if line.strip()]
        kept = [line for line in kept if json.loads(line).get("step", 0) <= step]
        self.path.write_text("".join(line + "\n" for line in kept))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Append `metrics` for `step` everywhere."""
        record = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, int | float):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(dict(metrics), step=step)

    def close(self) -> None:
        """Flush and close the writers."""
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """All records of a run's `metrics.jsonl`."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (is {run_dir} a run directory?)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _plain(value: Any) -> Any:
    """Numbers as JSON-friendly floats (NaN/inf stay readable as strings)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float | np.floating | np.integer):
        value = float(value)
        return value if math.isfinite(value) else str(value)
    return value
