"""`LocalBackend`: one process, fp32 weights, bf16 autocast on GPU, AdamW, clipping."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from agentrl.runtime.config import OptimConfig
from agentrl.runtime.lora import (
    ADAPTER_DIR,
    changed_by_lora,
    hf_weights,
    lora_scaling,
    merge_lora,
    read_adapter,
    save_weights,
)
from agentrl.runtime.optim import build_optimizer, build_scheduler


class _Autocast(nn.Module):
    """Runs the wrapped model's forward under bf16 autocast (GPU); weights stay fp32."""

    def __init__(self, inner: nn.Module, device_type: str) -> None:
        super().__init__()
        self.inner = inner
        self.device_type = device_type

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(self.device_type, dtype=torch.bfloat16):
            return self.inner(*args, **kwargs)


class LocalBackend:
    """The `Backend` protocol in one process (CPU or one GPU).

    A `model` that `agentrl.runtime.lora.apply_lora` wrapped trains its adapters only.
    """

    rank = 0
    world_size = 1

    def __init__(
        self,
        model: nn.Module,
        *,
        optim: OptimConfig,
        lr: float,
        num_optimizer_steps: int,
        device: torch.device,
        gradient_checkpointing: bool = False,
    ) -> None:
        self.device = device
        self.optim_cfg = optim
        model = model.to(device=device, dtype=torch.float32)
        if gradient_checkpointing and hasattr(model, "gradient_checkpointing_enable"):
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
            if hasattr(model, "config"):
                model.config.use_cache = False
        self.lora_scaling = lora_scaling(model)
        """`alpha / r` of the LoRA adapters; None when all weights train."""
        self.module = model
        """The unwrapped (fp32) model; `model` may wrap it for autocast."""
        self.model: nn.Module = _Autocast(model, device.type) if device.type == "cuda" else model
        self.model.train()
        self.optimizer = build_optimizer(model.parameters(), optim, lr=lr)
        self.scheduler = build_scheduler(self.optimizer, optim, num_optimizer_steps)

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate gradients of `loss`."""
        loss.backward()

    def step(self) -> float:
        """Clip, step optimizer and scheduler, zero grads; return the pre-clip grad norm."""
        params = [p for p in self.module.parameters() if p.requires_grad]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.optim_cfg.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(grad_norm.item())

    @property
    def lr(self) -> float:
        """The current learning rate."""
        return float(self.scheduler.get_last_lr()[0])

    def full_state_dict(self) -> Mapping[str, torch.Tensor]:
        """Full weights on CPU with Hugging Face names, as copies; under LoRA only the layers
        the adapters change, merged (`hf_weights`)."""
        state = {k: v.detach() for k, v in self.module.state_dict().items()}
        if self.lora_scaling is not None:
            state = changed_by_lora(state)  # copied below: the rest is never sent
        state = {k: v.to("cpu", copy=True) for k, v in state.items()}
        return hf_weights(state, self.lora_scaling)

    def all_reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        """Identity: one process."""
        return value

    def save(self, path: Path) -> None:
        """Model in Hugging Face format under `path/model` (LoRA merged; the adapter alone
        under `path/adapter`), optimizer and scheduler beside."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu() for k, v in self.module.state_dict().items()}
        save_weights(self.module, state, path, self.lora_scaling)
        torch.save(self.optimizer.state_dict(), path / "optimizer.pt")
        torch.save(self.scheduler.state_dict(), path / "scheduler.pt")

    def save_model(self, path: Path) -> None:
        """Only the weights (Hugging Face format, LoRA merged) under `path`.

        Written by `save_hf`, not `save_pretrained`: that one imports DeepSpeed (through
        accelerate's `extract_model_from_parallel`) whenever it is installed, which costs
        half a second and prints a warning on every CPU run.
        """
        from agentrl.runtime._dist import save_hf

        if self.lora_scaling is None:
            save_hf(self.module, self.full_state_dict(), path)
            return
        state = {k: v.detach().cpu() for k, v in self.module.state_dict().items()}
        save_hf(self.module.get_base_model(), merge_lora(state, self.lora_scaling), path)

    def load(self, path: Path, *, with_optimizer: bool = True) -> None:
        """Restore what `save` wrote (weights in place, so the optimizer keeps its params;
        with LoRA the adapter, over the base weights the model already holds)."""
        path = Path(path)
        if self.lora_scaling is None:
            load_weights_in_place(self.module, path / "model")
        else:
            keys = self.module.state_dict().keys()
            self.module.load_state_dict(read_adapter(path / ADAPTER_DIR, keys), strict=False)
        optimizer_file = path / "optimizer.pt"
        if with_optimizer and optimizer_file.is_file():
            self.optimizer.load_state_dict(torch.load(optimizer_file, weights_only=True))
            self.scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=True))


def load_weights_in_place(model: nn.Module, model_dir: Path) -> None:
    """Copy the safetensors weights in `model_dir` into `model`'s existing parameters.

    Keys missing from the files must be tied to a loaded parameter (e.g. `lm_head.weight`).
    """
    model_dir = Path(model_dir)
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {model_dir}")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    result = model.load_state_dict(state, strict=False)
    params = dict(model.named_parameters(remove_duplicate=False))
    loaded_ptrs = {params[k].data_ptr() for k in state if k in params}
    untied = [
        k for k in result.missing_keys if k not in params or params[k].data_ptr() not in loaded_ptrs
    ]
    if untied or result.unexpected_keys:
        raise RuntimeError(
            f"weights in {model_dir} do not match the model: missing {untied[:5]}, "
            f"unexpected {result.unexpected_keys[:5]}"
        )
