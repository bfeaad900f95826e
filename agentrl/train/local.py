"""`LocalBackend`: one process, fp32 weights, bf16 autocast on GPU, AdamW, clipping."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from agentrl.train.config import LoraConfig, OptimConfig, TrainerConfig
from agentrl.train.optim import build_optimizer, build_scheduler


class _Autocast(nn.Module):
    """Runs the wrapped model's forward under bf16 autocast (GPU); weights stay fp32."""

    def __init__(self, inner: nn.Module, device_type: str) -> None:
        super().__init__()
        self.inner = inner
        self.device_type = device_type

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(self.device_type, dtype=torch.bfloat16):
            return self.inner(*args, **kwargs)


def apply_lora(model: nn.Module, cfg: LoraConfig) -> nn.Module:
    """Wrap `model` with peft LoRA adapters (only the adapters train)."""
    try:
        import peft
    except ImportError as e:
        raise RuntimeError("trainer.lora.enabled needs peft: pip install 'agentrl[peft]'") from e
    lora = peft.LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules),
        bias="none",
    )
    return peft.get_peft_model(model, lora)


def _base_name(name: str) -> str:
    """peft parameter name -> the base model's Hugging Face name."""
    name = name.removeprefix("base_model.model.")
    return name.replace(".base_layer.", ".")


class LocalBackend:
    """The `Backend` protocol in one process (CPU or one GPU)."""

    rank = 0
    world_size = 1

    def __init__(
        self,
        model: nn.Module,
        *,
        optim: OptimConfig,
        trainer: TrainerConfig,
        lr: float,
        num_optimizer_steps: int,
        device: torch.device,
        lora: LoraConfig | None = None,
    ) -> None:
        self.device = device
        self.optim_cfg = optim
        model = model.to(device=device, dtype=torch.float32)
        if trainer.gradient_checkpointing and hasattr(model, "gradient_checkpointing_enable"):
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
            if hasattr(model, "config"):
                model.config.use_cache = False
        self.lora = lora is not None
        if lora is not None:
            model = apply_lora(model, lora)
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
        """Full weights on CPU with Hugging Face names (LoRA merged in), as copies."""
        if not self.lora:
            return {k: v.detach().to("cpu", copy=True) for k, v in self.module.state_dict().items()}
        self.module.merge_adapter()
        try:
            return {
                _base_name(k): v.detach().to("cpu", copy=True)
                for k, v in self.module.state_dict().items()
                if "lora_" not in k
            }
        finally:
            self.module.unmerge_adapter()

    def all_reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        """Identity: one process."""
        return value

    def save(self, path: Path) -> None:
        """Model in Hugging Face format under `path/model` (LoRA merged; the adapters alone
        under `path/adapter`), optimizer and scheduler beside."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self.lora:  # adapters to resume from, merged weights for export and eval
            self.module.save_pretrained(path / "adapter", safe_serialization=True)
        self.save_model(path / "model")
        torch.save(self.optimizer.state_dict(), path / "optimizer.pt")
        torch.save(self.scheduler.state_dict(), path / "scheduler.pt")

    def save_model(self, path: Path) -> None:
        """Only the weights (Hugging Face format, LoRA merged) under `path`.

        Written by `save_hf`, not `save_pretrained`: that one imports DeepSpeed (through
        accelerate's `extract_model_from_parallel`) whenever it is installed, which costs
        half a second and prints a warning on every CPU run.
        """
        from agentrl.train._dist import save_hf

        if not self.lora:
            state = {k: v.detach().cpu() for k, v in self.module.state_dict().items()}
            save_hf(self.module, state, path)
            return
        save_hf(self.module.get_base_model(), self.full_state_dict(), path)

    def load(self, path: Path, *, with_optimizer: bool = True) -> None:
        """Restore what `save` wrote (weights in place, so the optimizer keeps its params)."""
        path = Path(path)
        if self.lora:
            import peft

            peft.set_peft_model_state_dict(
                self.module, load_file(str(path / "adapter" / "adapter_model.safetensors"))
            )
        else:
            load_weights_in_place(self.module, path / "model")
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
