"""The `deepspeed` backend: ZeRO stage 2 or 3 through DeepSpeed's own engine.

Launch one process per rank (torchrun or Ray actors); gloo on CPU, nccl on GPU:

    torchrun --nproc_per_node=2 --master_addr=127.0.0.1 --master_port=29512 my_train.py

The optimizer is torch's AdamW handed to DeepSpeed as a client optimizer (DeepSpeed's fused
Adam ops need minutes of compilation and a GPU). Gradient accumulation is the caller's: the
engine runs with `managed_gradient_accumulation=false`, so any number of `backward` calls
accumulate until `step`. As in `fsdp2`, gradients are *summed* over ranks: the losses passed
to `backward` on all ranks add up to the loss optimized.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.distributed as dist
from torch import nn

from agentrl.runtime._dist import (
    comm_backend,
    enable_gradient_checkpointing,
    init_process_group,
    pick_device,
)
from agentrl.runtime.fsdp2 import _rank_device
from agentrl.runtime.lora import hf_weights, lora_scaling, save_weights
from agentrl.runtime.optim import build_optimizer, build_scheduler

if TYPE_CHECKING:
    from agentrl.runtime.config import OptimConfig

DS_DIR = "deepspeed"
DS_TAG = "state"
STATE_FILE = "backend_state.json"


def deepspeed_config(
    optim: OptimConfig, *, zero_stage: int, mixed_precision: Literal["fp32", "bf16"]
) -> dict[str, Any]:
    """The DeepSpeed config dict built from our settings (batch sizes are nominal: the
    caller owns micro-batching and accumulation)."""
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "gradient_clipping": optim.max_grad_norm,
        "zero_optimization": {
            "stage": zero_stage,
            "overlap_comm": False,
            "contiguous_gradients": True,
        },
        "bf16": {"enabled": mixed_precision == "bf16"},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


class DeepSpeedBackend:
    """A Hugging Face causal LM under a DeepSpeed ZeRO-2/3 engine, with AdamW and a schedule.

    `model` is the DeepSpeed engine, called like the plain model. A model that
    `agentrl.runtime.lora.apply_lora` wrapped trains its adapters only.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        optim: OptimConfig,
        lr: float,
        num_optimizer_steps: int,
        zero_stage: Literal[2, 3] = 2,
        device: torch.device | None = None,
        mixed_precision: Literal["fp32", "bf16"] = "fp32",
        gradient_checkpointing: bool = False,
    ) -> None:
        """Wrap `model` in a DeepSpeed engine over the default process group (created from
        the launcher's environment). `lr` is the peak LR (`optim.lr` or `optim.critic_lr`);
        the schedule spans `num_optimizer_steps`; `device` defaults to `cuda:LOCAL_RANK` or
        the CPU."""
        import deepspeed

        if zero_stage not in (2, 3):
            raise ValueError(f"zero_stage must be 2 or 3, not {zero_stage!r}")
        if mixed_precision not in ("fp32", "bf16"):
            raise ValueError(f"mixed_precision must be 'fp32' or 'bf16', not {mixed_precision!r}")
        logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
        self.device = pick_device() if device is None else _rank_device(device)
        self.rank, self.world_size = init_process_group(self.device)
        deepspeed.init_distributed(dist_backend=comm_backend(self.device))
        self.zero_stage = zero_stage
        self.lora_scaling = lora_scaling(model)
        """`alpha / r` of the LoRA adapters; None when all weights train."""

        model = model.to(device=self.device, dtype=torch.float32)
        model.train()
        if gradient_checkpointing:
            enable_gradient_checkpointing(model)
        optimizer = build_optimizer(model.parameters(), optim, lr=lr)
        scheduler = build_scheduler(optimizer, optim, num_optimizer_steps)
        engine, _, _, _ = deepspeed.initialize(
            model=model,
            optimizer=optimizer,
            lr_scheduler=scheduler,
            config=deepspeed_config(optim, zero_stage=zero_stage, mixed_precision=mixed_precision),
        )
        self.engine = engine
        self.model = engine
        self.num_steps = 0

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate the gradients of this rank's share of the loss.

        DeepSpeed averages gradients over ranks; scaling by the world size makes it a sum."""
        self.engine.backward(loss * self.world_size)

    def step(self) -> float:
        """Reduce, clip, step AdamW and the LR schedule, zero grads (all inside the engine);
        return the global grad norm before clipping."""
        self.engine.step()
        self.num_steps += 1
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    def full_state_dict(self) -> Mapping[str, torch.Tensor]:
        """Every rank must call this; rank 0 gets all weights on CPU (Hugging Face names,
        LoRA merged in), the others `{}`."""
        return hf_weights(self._gather(), self.lora_scaling)

    def _gather(self) -> dict[str, torch.Tensor]:
        """The model's own full state dict on rank 0's CPU (peft names under LoRA).

        ZeRO-3 parameters are gathered one module at a time, so peak memory stays at the
        full model on rank 0 plus one module's parameters on every rank."""
        module = self.engine.module
        if self.zero_stage < 3:
            if self.rank != 0:
                return {}
            return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}
        import deepspeed

        out: dict[str, torch.Tensor] = {}
        for prefix, sub in module.named_modules():
            params = dict(sub.named_parameters(recurse=False))
            if params:
                with deepspeed.zero.GatheredParameters(list(params.values()), modifier_rank=None):
                    if self.rank == 0:
                        for name, p in params.items():
                            out[_join(prefix, name)] = p.detach().to("cpu", copy=True)
            if self.rank == 0:
                for name, buf in sub.named_buffers(recurse=False):
                    if name not in sub._non_persistent_buffers_set:
                        out[_join(prefix, name)] = buf.detach().to("cpu", copy=True)
        if self.rank == 0:  # tied weights appear under every name, as in `state_dict()`
            for name, param in module.named_parameters(remove_duplicate=False):
                if name not in out:
                    source = next(n for n, q in module.named_parameters() if q is param)
                    out[name] = out[source]
        return out

    def all_reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        """Sum `value` over ranks (returns a new tensor on the value's device)."""
        out = value.detach().to(self.device, copy=True)
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out.to(value.device)

    def save(self, path: Path) -> None:
        """Collective: rank 0 writes the Hugging Face model (and the LoRA adapter); all ranks
        write DeepSpeed's own checkpoint (partitioned optimizer state, scheduler; the
        weights a resume loads, adapter included) under `path/deepspeed`."""
        path = Path(path)
        full = self._gather()
        if self.rank == 0:
            save_weights(self.engine.module, full, path, self.lora_scaling)
            (path / STATE_FILE).write_text(json.dumps({"num_steps": self.num_steps}))
        del full
        dist.barrier()
        self.engine.save_checkpoint(str(path / DS_DIR), tag=DS_TAG)
        dist.barrier()

    @property
    def lr(self) -> float:
        """The current learning rate."""
        return float(self.engine.get_lr()[0])

    def load(self, path: Path, *, with_optimizer: bool = True) -> None:
        """Collective: restore weights, and unless `with_optimizer=False` the optimizer and
        schedule, from a `save` folder (same world size and ZeRO stage).

        To start from Hugging Face weights alone, load them into the model before
        constructing the backend instead."""
        path = Path(path)
        if not (path / DS_DIR / DS_TAG).is_dir():
            raise FileNotFoundError(
                f"{path / DS_DIR / DS_TAG} is missing: DeepSpeedBackend.load needs a folder "
                "written by DeepSpeedBackend.save (load plain HF weights into the model "
                "before constructing the backend)"
            )
        load_path, _ = self.engine.load_checkpoint(
            str(path / DS_DIR),
            tag=DS_TAG,
            load_optimizer_states=with_optimizer,
            load_lr_scheduler_states=with_optimizer,
        )
        if load_path is None:
            raise RuntimeError(f"DeepSpeed could not load the checkpoint in {path / DS_DIR}")
        self.num_steps = int(json.loads((path / STATE_FILE).read_text())["num_steps"])
        dist.barrier()


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name
