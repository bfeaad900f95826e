"""Regression pins: the first steps of every shipped preset, exactly.

Each preset runs 2 steps from the same tiny model and seeds on CPU. Its per-step metrics
(losses, advantage sums, clip fraction, success) and a checksum of the updated weights must
match `preset_pins.json`. A change to the algorithms or the trainer that moves any of them
is a change of behaviour: the commit that makes it regenerates the pins and says why:

    AGENTRL_UPDATE_PINS=1 .venv/bin/python -m pytest -q tests/train/test_preset_pins.py
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from trainer_envs import VowelCount

from agentrl.algos.presets import load_preset
from agentrl.config import load_config
from agentrl.envs import register
from agentrl.train.trainer import Trainer

register("vowel-count", VowelCount)

PINS = Path(__file__).with_name("preset_pins.json")
UPDATE = bool(os.environ.get("AGENTRL_UPDATE_PINS"))

PINNED_METRICS = (
    "success_rate",
    "reward/mean",
    "advantage/advantage_mean",
    "advantage/advantage_abs_mean",
    "actor/pg_loss",
    "actor/loss",
    "actor/clip_frac",
    "actor/entropy",
    "actor/grad_norm",
    "critic/value_loss",
    "filter/keep_frac",
    "throughput/train_tokens",
    "search/label_keep_frac",
    "search/solved_frac",
    "search/solution_turns",
)
"""The metrics a pin holds (those a preset reports)."""

_COMMON = [
    "model.name=tiny",
    "trainer.num_steps=2",
    "trainer.num_threads=1",
    "optim.lr=1e-3",
    "checkpoint.every=0",
    "eval.every=0",
    "logging.progress=false",
    "logging.tensorboard=false",
    "logging.save_trajectories=0",
]

_SAMPLED = [
    "env.name=vowel-count",
    "rollout.group_size=4",
    "rollout.sampling.max_new_tokens=12",
    "trainer.num_groups=4",
    "trainer.micro_batch_tokens=256",
]

_SEARCH = [
    "env.name=sokoban",
    "env.max_turns=6",
    "env.kwargs.max_actions_per_turn=1",
    "rollout.max_turns=6",
    "rollout.history_turns=0",
    "rollout.sampling.max_new_tokens=16",
    "trainer.num_groups=8",
    "trainer.micro_batch_tokens=2048",
    "algo.num_mini_batches=2",
]

CASES: dict[str, tuple[str, list[str]]] = {
    "grpo": ("grpo", _SAMPLED),
    "rloo": ("rloo", _SAMPLED),
    "reinforce++": ("reinforce++", _SAMPLED),
    "starpo": ("starpo", _SAMPLED),
    "starpo-s": ("starpo-s", _SAMPLED),
    "ppo": ("ppo", [*_SAMPLED, "algo.critic_warmup_steps=1"]),
    "gigpo": ("gigpo", _SAMPLED),
    "expert-iteration": ("expert-iteration", [*_SEARCH, "algo.search_beam=4"]),
}
"""Pin name -> (preset, overrides). Small sizes: the whole file runs in about a minute."""


def _weights_checksum(model: torch.nn.Module) -> list[float]:
    """`[sum, sum of squares, position-weighted sum]` of every weight, in float64."""
    total = squares = weighted = 0.0
    for _, p in sorted(model.state_dict().items()):
        x = p.detach().double().flatten()
        total += float(x.sum())
        squares += float((x * x).sum())
        weighted += float((x * torch.linspace(-1.0, 1.0, x.numel(), dtype=x.dtype)).sum())
    return [total, squares, weighted]


def _run(preset: str, overrides: list[str], run_dir: Path) -> dict:
    cfg = load_config(overrides=[*_COMMON, *overrides], base=load_preset(preset))
    trainer = Trainer(cfg, run_dir)
    try:
        steps = []
        for _ in range(cfg.trainer.num_steps):
            metrics = trainer.train_step()
            steps.append({k: float(metrics[k]) for k in PINNED_METRICS if k in metrics})
        return {"steps": steps, "weights": _weights_checksum(trainer.policy.model)}
    finally:
        trainer.close()


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7) or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("name", list(CASES))
def test_preset_first_steps_are_pinned(name: str, tmp_path: Path) -> None:
    preset, overrides = CASES[name]
    got = _run(preset, overrides, tmp_path)
    pins = json.loads(PINS.read_text()) if PINS.exists() else {}
    if UPDATE:
        pins[name] = got
        PINS.write_text(json.dumps(pins, indent=1, sort_keys=True) + "\n")
        return
    assert name in pins, f"no pin for {name!r}: run with AGENTRL_UPDATE_PINS=1 to record one"
    want = pins[name]
    assert [sorted(s) for s in got["steps"]] == [sorted(s) for s in want["steps"]], (
        "the pinned metrics a preset reports changed"
    )
    for i, (g, w) in enumerate(zip(got["steps"], want["steps"], strict=True)):
        moved = {k: (g[k], w[k]) for k in w if not _close(g[k], w[k])}
        assert not moved, f"step {i + 1} of {name!r} moved (got, pinned): {moved}"
    moved_weights = [
        (g, w) for g, w in zip(got["weights"], want["weights"], strict=True) if not _close(g, w)
    ]
    assert not moved_weights, f"{name!r}: the updated weights moved (got, pinned): {moved_weights}"
