"""The `fsdp2` backend: `torch.distributed.fsdp.fully_shard` per transformer block, then the root.

Launch one process per rank (torchrun or Ray actors); gloo on CPU, nccl on GPU:

    torchrun --nproc_per_node=2 --master_addr=127.0.0.1 --master_port=29511 my_train.py

Gradients are *summed* over ranks (not averaged): each rank's loss is its share of the global
loss, e.g. its tokens' loss sum divided by the global token count from `all_reduce_sum`. The
sum over ranks and micro-batches of the losses passed to `backward` is the loss optimized.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
import torch.distributed as dist
from torch import nn

from agentrl.runtime._dist import (
    MODEL_DIR,
    decoder_layers,
    enable_gradient_checkpointing,
    init_process_group,
    load_hf_weights,
    pick_device,
)
from agentrl.runtime.lora import ADAPTER_DIR, hf_weights, lora_scaling, read_adapter, save_weights
from agentrl.runtime.optim import build_optimizer, build_scheduler

if TYPE_CHECKING:
    from agentrl.runtime.config import OptimConfig

OPTIM_DIR = "optim_dcp"
"""Sub-folder of a checkpoint with the sharded optimizer state (torch.distributed.checkpoint)."""
STATE_FILE = "backend_state.json"


class FSDP2Backend:
    """A Hugging Face causal LM sharded with FSDP2, with AdamW and an LR schedule.

    Every rank constructs it with the same (identically initialised) model; parameters are
    sharded in place. `model` is then called like the plain model. A model that
    `agentrl.runtime.lora.apply_lora` wrapped trains its adapters only.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        optim: OptimConfig,
        lr: float,
        num_optimizer_steps: int,
        device: torch.device | None = None,
        mixed_precision: Literal["fp32", "bf16"] = "fp32",
        gradient_checkpointing: bool = False,
    ) -> None:
        """Shard `model` over the default process group (created from the launcher's env).

        `lr` is the peak LR (`optim.lr` or `optim.critic_lr`); the schedule spans
        `num_optimizer_steps`. `device` defaults to `cuda:LOCAL_RANK` or the CPU; bf16
        computes in bf16 with fp32 weights, gradient reduction and optimizer state.
        """
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        if mixed_precision not in ("fp32", "bf16"):
            raise ValueError(f"mixed_precision must be 'fp32' or 'bf16', not {mixed_precision!r}")
        self.device = pick_device() if device is None else _rank_device(device)
        self.rank, self.world_size = init_process_group(self.device)
        self.max_grad_norm = optim.max_grad_norm
        self.lora_scaling = lora_scaling(model)
        """`alpha / r` of the LoRA adapters; None when all weights train."""

        model = model.to(device=self.device, dtype=torch.float32)
        model.train()
        if gradient_checkpointing:
            enable_gradient_checkpointing(model)
        mesh = init_device_mesh(self.device.type, (self.world_size,))
        if mixed_precision == "bf16":
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        else:
            mp = MixedPrecisionPolicy()
        for layer in decoder_layers(model):
            fully_shard(layer, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        for module in model.modules():  # sum, not average, over ranks (see module docstring)
            if hasattr(module, "set_gradient_divide_factor"):
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
        self.model = model

        self.optimizer = build_optimizer(model.parameters(), optim, lr=lr)
        self.scheduler = build_scheduler(self.optimizer, optim, num_optimizer_steps)
        self.num_steps = 0

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate the gradients of this rank's share of the loss."""
        loss.backward()

    def step(self) -> float:
        """Clip to `max_grad_norm` (norm over all shards), step AdamW and the LR schedule,
        zero the grads; return the global grad norm before clipping."""
        params = [p for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        if hasattr(norm, "full_tensor"):  # a DTensor: the norm over every rank's shard
            norm = norm.full_tensor()
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.num_steps += 1
        return float(norm)

    def full_state_dict(self) -> Mapping[str, torch.Tensor]:
        """Every rank must call this; rank 0 gets all weights on CPU (Hugging Face names,
        LoRA merged in), the others `{}`."""
        return hf_weights(self._gather(), self.lora_scaling)

    def _gather(self) -> dict[str, torch.Tensor]:
        """The model's own full state dict on rank 0's CPU (peft names under LoRA)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(self.model, options=options)

    def all_reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        """Sum `value` over ranks (returns a new tensor on the value's device)."""
        out = value.detach().to(self.device, copy=True)
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out.to(value.device)

    def save(self, path: Path) -> None:
        """Collective: rank 0 writes the Hugging Face model (and the LoRA adapter); all ranks
        write optimizer shards (torch.distributed.checkpoint) so any world size can load
        them."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        path = Path(path)
        full = self._gather()
        if self.rank == 0:
            save_weights(self.model, full, path, self.lora_scaling)
            state = {"num_steps": self.num_steps, "scheduler": self.scheduler.state_dict()}
            (path / STATE_FILE).write_text(json.dumps(state))
        del full
        optim_sd = get_optimizer_state_dict(self.model, self.optimizer, options=StateDictOptions())
        dcp.save({"optim": optim_sd}, checkpoint_id=str(path / OPTIM_DIR))
        dist.barrier()

    @property
    def lr(self) -> float:
        """The current learning rate."""
        return float(self.scheduler.get_last_lr()[0])

    def load(self, path: Path, *, with_optimizer: bool = True) -> None:
        """Collective: restore weights (read on rank 0, broadcast and resharded; with LoRA
        the adapter, over the base weights the model holds), optimizer and schedule from a
        `save` folder (any world size); without optimizer files, or with
        `with_optimizer=False`, only the weights."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        path = Path(path)
        lora = self.lora_scaling is not None
        full = {}
        if self.rank == 0 and lora:
            full = read_adapter(path / ADAPTER_DIR, self.model.state_dict().keys())
        elif self.rank == 0:
            full = load_hf_weights(self.model, path / MODEL_DIR)
        set_model_state_dict(
            self.model,
            full,  # overwritten in place by the broadcast (torch 2.13)
            options=StateDictOptions(
                full_state_dict=True, broadcast_from_rank0=True, strict=not lora
            ),
        )
        del full
        if with_optimizer and (path / OPTIM_DIR).is_dir():
            optim_sd = get_optimizer_state_dict(self.model, self.optimizer)
            holder = {"optim": optim_sd}
            dcp.load(holder, checkpoint_id=str(path / OPTIM_DIR))
            set_optimizer_state_dict(self.model, self.optimizer, holder["optim"])
        if with_optimizer and (path / STATE_FILE).is_file():
            state = json.loads((path / STATE_FILE).read_text())
            self.scheduler.load_state_dict(state["scheduler"])
            self.num_steps = int(state["num_steps"])
        dist.barrier()


def _rank_device(device: torch.device) -> torch.device:
    """A CUDA device without an index means this rank's GPU (`LOCAL_RANK`)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return pick_device("cuda")
    return device
