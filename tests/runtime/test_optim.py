"""The learning-rate schedule: RL's decays in one cycle, supervised fine-tuning's may restart."""

from __future__ import annotations

import pytest

from agentrl.runtime.config import PolicyOptimConfig, SFTOptimConfig
from agentrl.runtime.optim import lr_factor


def test_sft_cosine_restarts_with_shrinking_peaks() -> None:
    cfg = SFTOptimConfig(warmup_steps=0, min_lr_ratio=0.0, cycles=2, cycle_decay=0.5)
    factors = [lr_factor(s, cfg, 8) for s in range(8)]
    assert factors[0] == pytest.approx(1.0)
    assert factors[4] == pytest.approx(0.5)  # the second cycle restarts at half the peak
    assert factors[3] < factors[4] and factors[7] < factors[4]


def test_rl_schedule_decays_once() -> None:
    """RL's optim has no cycles: one decay from the peak to `min_lr_ratio`."""
    cfg = PolicyOptimConfig(schedule="cosine", min_lr_ratio=0.0)
    factors = [lr_factor(s, cfg, 8) for s in range(8)]
    assert factors == sorted(factors, reverse=True)
    assert not hasattr(cfg, "cycles")


def test_sft_defaults_live_on_the_sft_optim() -> None:
    """Supervised fine-tuning's defaults (lr 1e-3, warmup, cosine to 0.1 x lr) are its own."""
    cfg = SFTOptimConfig()
    assert (cfg.lr, cfg.warmup_steps, cfg.schedule, cfg.min_lr_ratio) == (1e-3, 10, "cosine", 0.1)
    assert PolicyOptimConfig().schedule == "constant"
