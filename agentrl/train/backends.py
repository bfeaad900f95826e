"""The run's backends: `agentrl.runtime.backend.make_backend` with a `TrainConfig`'s settings."""

from __future__ import annotations

from torch import nn

from agentrl.runtime.backend import Backend, make_backend
from agentrl.train.config import TrainConfig


def backend_for_run(
    cfg: TrainConfig,
    model: nn.Module,
    *,
    lr: float,
    num_optimizer_steps: int,
    role: str = "policy",
) -> Backend:
    """Wrap `model` in the backend `cfg.trainer.backend` names, with `cfg.optim`.

    `role` is `policy` or `critic`: with `trainer.lora` enabled, only the policy gets LoRA
    adapters (a critic trains fully). A policy whose `model.name` is an adapter folder
    continues that adapter (`model` is then its base: `agentrl.runtime.lora.start_folders`).
    """
    from agentrl.runtime.lora import adapter_base, start_adapter

    trainer = cfg.trainer
    lora = trainer.lora if role == "policy" else None
    adapter = start_adapter(cfg.model.name, lora)
    return make_backend(
        model,
        optim=cfg.optim,
        lr=lr,
        num_optimizer_steps=num_optimizer_steps,
        backend=trainer.backend,
        device=trainer.device,
        zero_stage=trainer.zero_stage,
        gradient_checkpointing=trainer.gradient_checkpointing,
        lora=lora,
        base_model=adapter_base(adapter) if adapter is not None else cfg.model.name,
        adapter=adapter,
    )
