"""The training backend protocol. `local`, `fsdp2` and `deepspeed` implement it.

A backend owns the wrapped model and its optimizer. The trainer computes losses with
`backend.model` (called like the plain Hugging Face model) and never checks which backend
runs it; gradient accumulation, clipping, sharding and mixed precision live here.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn


@runtime_checkable
class Backend(Protocol):
    """A wrapped policy (or critic) model plus its optimizer and LR schedule."""

    model: nn.Module
    """The wrapped model; `model(input_ids=..., attention_mask=...)` returns `.logits`."""
    rank: int
    world_size: int
    device: torch.device

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate gradients of `loss` (already scaled by the caller for accumulation)."""
        ...

    def step(self) -> float:
        """Clip gradients, step the optimizer and scheduler, zero grads; return the grad norm
        before clipping."""
        ...

    def full_state_dict(self) -> Mapping[str, torch.Tensor]:
        """Full (unsharded) weights on CPU, with Hugging Face names (LoRA merged in), for the
        engines.

        Every rank must call it; ranks other than 0 may receive an empty dict."""
        ...

    def all_reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        """Sum a tensor over data-parallel ranks (identity on one process)."""
        ...

    def save(self, path: Path) -> None:
        """Write model (Hugging Face format under `path/model`, LoRA merged; the adapter
        alone under `path/adapter`), optimizer and scheduler state under `path`."""
        ...

    def load(self, path: Path) -> None:
        """Restore what `save` wrote (with LoRA, the adapter: the base weights stay)."""
        ...


_BACKEND_MODULES = {
    "fsdp2": "agentrl.train.fsdp2",
    "deepspeed": "agentrl.train.deepspeed_backend",
}
"""Backends other than `local`, imported by name only when selected."""


def make_backend(
    cfg: Any,
    model: nn.Module,
    *,
    lr: float,
    num_optimizer_steps: int,
    role: str = "policy",
) -> Backend:
    """Wrap `model` in the backend `cfg.trainer.backend` names.

    `cfg` is the root `TrainConfig`. `fsdp2` and `deepspeed` live in their own modules, each
    exposing `make_backend(cfg, model, *, lr, num_optimizer_steps)` with this signature; they
    are imported only when selected. `role` is `policy` or `critic`: with `trainer.lora`
    enabled, the policy gets LoRA adapters here, before any backend wraps it, and every
    backend trains only them.
    """
    if role == "policy" and cfg.trainer.lora.enabled:
        from agentrl.train.lora import apply_lora

        model = apply_lora(model, cfg.trainer.lora, base_model=cfg.model.name)
    name = cfg.trainer.backend
    if name == "local":
        from agentrl.train.local import LocalBackend

        return LocalBackend(
            model,
            optim=cfg.optim,
            trainer=cfg.trainer,
            lr=lr,
            num_optimizer_steps=num_optimizer_steps,
            device=resolve_device(cfg.trainer.device),
        )
    if name not in _BACKEND_MODULES:
        raise ValueError(f"trainer.backend = {name!r}: expected local, fsdp2 or deepspeed")
    module = importlib.import_module(_BACKEND_MODULES[name])
    return module.make_backend(cfg, model, lr=lr, num_optimizer_steps=num_optimizer_steps)


def resolve_device(name: str) -> torch.device:
    """`auto` -> cuda when available, else cpu."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
