"""AdamW and the learning-rate schedule, shared by every backend."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from agentrl.runtime.config import OptimConfig, SFTOptimConfig

ADAM_EPS = 1e-8
"""AdamW's epsilon (PyTorch's default)."""
ADAM_BETAS = (0.9, 0.999)
"""AdamW's betas (PyTorch's default)."""


def build_optimizer(
    params: Iterable[torch.nn.Parameter], cfg: OptimConfig, *, lr: float
) -> torch.optim.AdamW:
    """AdamW over the parameters that require grad (foreach kernels, no fused CPU path), without
    weight decay."""
    trainable = [p for p in params if p.requires_grad]
    return torch.optim.AdamW(trainable, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=0.0)


def lr_factor(step: int, cfg: OptimConfig, num_optimizer_steps: int) -> float:
    """Multiplier of the base LR at optimizer step `step` (0-based): linear warmup, then
    constant, linear or cosine decay to `min_lr_ratio`; supervised fine-tuning's (an
    `SFTOptimConfig`) in `cfg.cycles` equal cycles whose peaks shrink by `cfg.cycle_decay` each.

    >>> cfg = OptimConfig(warmup_steps=2, schedule="linear", min_lr_ratio=0.0)
    >>> [round(lr_factor(s, cfg, 6), 2) for s in range(6)]
    [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]
    >>> cfg = SFTOptimConfig(warmup_steps=0, schedule="linear", min_lr_ratio=0.0,
    ...                      cycles=2, cycle_decay=0.5)
    >>> [round(lr_factor(s, cfg, 8), 3) for s in range(8)]
    [1.0, 0.75, 0.5, 0.25, 0.5, 0.375, 0.25, 0.125]
    """
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    decay_steps = max(1, num_optimizer_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / decay_steps)
    cycles, cycle_decay = (
        (cfg.cycles, cfg.cycle_decay) if isinstance(cfg, SFTOptimConfig) else (1, 1.0)
    )
    cycle = min(int(progress * cycles), cycles - 1)
    progress = min(1.0, progress * cycles - cycle)
    if cfg.schedule == "linear":
        shape = 1.0 - progress
    else:
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    peak = cycle_decay**cycle
    return peak * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * shape)


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: OptimConfig, num_optimizer_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR following `lr_factor`."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, cfg, num_optimizer_steps)
    )
