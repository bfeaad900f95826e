"""Shared helpers of the distributed backends: process group, devices, layers, HF weights.

`fsdp2` and `deepspeed` are launched one process per rank, by torchrun or by Ray actors
(`agentrl.train.ray_workers`). Both read the usual variables `RANK`, `WORLD_SIZE`,
`LOCAL_RANK`, `MASTER_ADDR` and `MASTER_PORT`; without them a backend runs as a single-rank
group on loopback, so the same code path also works in one plain process.
"""

from __future__ import annotations

import gc
import os
import socket
import sys
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Literal, NoReturn

import torch
import torch.distributed as dist
from torch import nn

DEFAULT_TIMEOUT = timedelta(minutes=30)
"""Collective timeout; long enough for a slow rollout on another rank."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (for a loopback rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun_command(script: str | Path, *args: str, nproc: int, port: int) -> list[str]:
    """The argv that launches `script` on `nproc` local ranks, rendezvous on 127.0.0.1."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={port}",
        str(script),
        *args,
    ]


def pick_device(name: str = "auto") -> torch.device:
    """This rank's device: `cuda:LOCAL_RANK` for `cuda` (or `auto` with CUDA), else the CPU."""
    if name not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, not {name!r}")
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def comm_backend(device: torch.device) -> str:
    """The torch.distributed backend for `device`: nccl on CUDA, gloo on the CPU."""
    return "nccl" if device.type == "cuda" else "gloo"


def init_process_group(device: torch.device) -> tuple[int, int]:
    """Join (or create) the default process group and return `(rank, world_size)`.

    Uses the launcher's environment (torchrun, Ray actors). Without `WORLD_SIZE` it forms a
    one-rank group on 127.0.0.1, so single-process runs take the same code path.
    """
    if not dist.is_initialized():
        if "WORLD_SIZE" not in os.environ:
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(free_port()))
            os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        dist.init_process_group(
            backend=comm_backend(device),
            timeout=DEFAULT_TIMEOUT,
            device_id=device if device.type == "cuda" else None,
        )
    return dist.get_rank(), dist.get_world_size()


def leave_process_group(*, ok: bool = True) -> None:
    """Leave the default process group, if one was joined: wait for the other ranks (when this
    rank ended without error), then destroy every group while the interpreter is fully alive.

    Garbage collection runs before and after, so that models, optimizers and device meshes
    that are no longer referenced release their process groups and pending gloo work now,
    not during interpreter shutdown. Left to shutdown, a rank can abort with "terminate
    called without an active exception" after its run has finished: seen in CI under torchrun
    (DeepSpeed ZeRO-3 and FSDP2 on gloo, rank 1, after the last line of output); the pattern
    is described in pytorch/pytorch#179291.
    """
    if not dist.is_initialized():
        return
    gc.collect()
    if ok:
        dist.barrier()
    dist.destroy_process_group()
    gc.collect()


def exit_rank(code: int = 0) -> NoReturn:
    """End this torchrun rank now with `code`, after flushing logs and stdio, skipping
    interpreter shutdown (where C++ extension teardown can still abort a finished rank; see
    `leave_process_group`). Call it only once the rank's work is written and its group left.
    """
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a Hugging Face model, each wrapped on its own by FSDP2.

    Uses the model's `_no_split_modules` class names (every HF architecture declares its
    decoder layer there); falls back to the longest `nn.ModuleList` of same-class modules.
    """
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if layers:
        return layers
    best: list[nn.Module] = []
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len({type(m) for m in module}) == 1:
            if len(module) > len(best):
                best = list(module)
    if not best:
        raise ValueError(
            f"cannot find the transformer blocks of {type(model).__name__}: it declares no "
            "_no_split_modules and has no nn.ModuleList of layers"
        )
    return best


def enable_gradient_checkpointing(model: nn.Module) -> None:
    """Turn on non-reentrant activation checkpointing (the kind FSDP2 and ZeRO-3 support)."""
    enable = getattr(model, "gradient_checkpointing_enable", None)
    if enable is None:
        raise ValueError(f"{type(model).__name__} does not support gradient checkpointing")
    enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def default_mixed_precision(device: torch.device) -> Literal["fp32", "bf16"]:
    """fp32 on the CPU, bf16 on GPUs (weights and optimizer state stay fp32 either way)."""
    return "bf16" if device.type == "cuda" else "fp32"


MODEL_DIR = "model"
"""Sub-folder of a backend checkpoint holding the Hugging Face model (as `LocalBackend`)."""
MODEL_FILE = "model.safetensors"


def save_hf(model: nn.Module, state_dict: Mapping[str, torch.Tensor], path: Path) -> None:
    """Write `state_dict` as a Hugging Face model folder (config + one safetensors file).

    Tied duplicates (e.g. `lm_head.weight` tied to the embeddings) are left out, as
    `save_pretrained` does, so `from_pretrained` and vLLM load the folder unchanged.
    """
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = getattr(model, "config", None)
    if config is not None:
        config.save_pretrained(path)
    generation_config = getattr(model, "generation_config", None)
    if generation_config is not None:
        generation_config.save_pretrained(path)
    tied = {k for k, src in tied_pairs(model).items() if k in state_dict and src in state_dict}
    tensors = {k: v.contiguous() for k, v in state_dict.items() if k not in tied}
    save_file(tensors, str(path / MODEL_FILE), metadata={"format": "pt"})


def load_hf_weights(model: nn.Module, path: Path) -> dict[str, torch.Tensor]:
    """All weights in the Hugging Face folder `path`, tied duplicates filled in from their
    source so the dict matches `model.state_dict()`'s keys."""
    from safetensors.torch import load_file

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {path}")
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        weights.update(load_file(str(file)))
    for key, source in tied_pairs(model).items():
        if key not in weights and source in weights:
            weights[key] = weights[source]
    return weights


def tied_pairs(model: nn.Module) -> dict[str, str]:
    """`{duplicate name: first name}` for parameters registered under two names."""
    first: dict[int, str] = {}
    pairs: dict[str, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first:
            pairs[name] = first[id(param)]
        else:
            first[id(param)] = name
    return pairs
