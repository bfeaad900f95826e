"""The training backend protocol. `local`, `fsdp2` and `deepspeed` implement it.

A backend owns the wrapped model and its optimizer. The trainer computes losses with
`backend.model` (called like the plain Hugging Face model) and never checks which backend
runs it; gradient accumulation, clipping, sharding and mixed precision live here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
from torch import nn

if TYPE_CHECKING:
    from agentrl.runtime.config import LoraConfig, OptimConfig


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
        """Full (unsharded) weights on CPU, with Hugging Face names, for the engines; under
        LoRA only the layers the adapters change, merged (`agentrl.runtime.lora.hf_weights`).

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


def make_backend(
    model: nn.Module,
    *,
    optim: OptimConfig,
    lr: float,
    num_optimizer_steps: int,
    backend: str = "local",
    device: str = "auto",
    zero_stage: int = 2,
    gradient_checkpointing: bool = False,
    lora: LoraConfig | None = None,
    base_model: str | None = None,
    adapter: Path | None = None,
) -> Backend:
    """Wrap `model` in the backend `backend` names (`local`, `fsdp2` or `deepspeed`).

    `optim` gives AdamW and the schedule (its `lr` is replaced by `lr`, so a critic can train
    at another rate). With `lora` enabled, `model` gets LoRA adapters here, before any backend
    wraps it, and every backend trains only them; `base_model` (the model's name or folder)
    goes into the adapter's config; the adapters start from the weights of the adapter folder
    `adapter` when given (they must have `lora`'s shape). `fsdp2` and `deepspeed` are imported
    only when selected.
    """
    if lora is not None and lora.enabled:
        from agentrl.runtime.lora import apply_lora, load_start_adapter

        model = apply_lora(model, lora, base_model=base_model or "")
        if adapter is not None:
            load_start_adapter(model, adapter, lora)
    common: dict[str, Any] = {
        "optim": optim,
        "lr": lr,
        "num_optimizer_steps": num_optimizer_steps,
        "gradient_checkpointing": gradient_checkpointing,
    }
    if backend == "local":
        from agentrl.runtime.local import LocalBackend

        return LocalBackend(model, device=resolve_device(device), **common)
    if backend in ("fsdp2", "deepspeed"):  # this rank's device; bf16 mixed precision on GPU
        from agentrl.runtime._dist import default_mixed_precision, pick_device

        rank_device = pick_device(device)
        common |= {"device": rank_device, "mixed_precision": default_mixed_precision(rank_device)}
        if backend == "fsdp2":
            from agentrl.runtime.fsdp2 import FSDP2Backend

            return FSDP2Backend(model, **common)
        from agentrl.runtime.deepspeed_backend import DeepSpeedBackend

        return DeepSpeedBackend(model, zero_stage=zero_stage, **common)
    raise ValueError(f"trainer.backend = {backend!r}: expected local, fsdp2 or deepspeed")


def resolve_device(name: str) -> torch.device:
    """`auto` -> cuda when available, else cpu."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
