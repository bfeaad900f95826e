"""Worker launched by torchrun from the backend tests: one rank of `fsdp2` or `deepspeed`.

Every rank builds the same `tiny` model and the same 4-sequence batch; rank r trains on its
share, in two micro-batches (gradient accumulation). Rank 0 also runs the single-process
`LocalBackend` on the whole batch and writes the differences to a JSON file:

    torchrun --nproc_per_node=2 --master_addr=127.0.0.1 --master_port=29511 \\
        tests/train/_dist_worker.py --backend fsdp2 --out /tmp/r.json --ckpt /tmp/ckpt
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist

NUM_SEQS = 4
SEQ_LEN = 12
ADVANTAGES = [1.0, -0.5, 0.25, 2.0]
LR = 1e-2


def make_batch(vocab_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fixed token ids [B, T], loss mask [B, T-1] (prompt and padding 0) and advantages [B]."""
    gen = torch.Generator().manual_seed(1234)
    input_ids = torch.randint(0, vocab_size, (NUM_SEQS, SEQ_LEN), generator=gen)
    mask = torch.zeros(NUM_SEQS, SEQ_LEN - 1)
    for i, (start, end) in enumerate([(3, 11), (2, 7), (5, 11), (4, 9)]):
        mask[i, start:end] = 1.0
    return input_ids, mask, torch.tensor(ADVANTAGES)


def loss_sum(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor):
    """Sum over sampled tokens of -advantage * logprob (policy-gradient surrogate)."""
    logits = model(input_ids=ids).logits[:, :-1].float()  # [B, T-1, V]
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # [B, T-1]
    return -(logp * mask * adv[:, None]).sum()


def train_step(backend, ids, mask, adv, rows: list[int]) -> tuple[float, dict | None, float]:
    """One optimizer step on `rows` (one row per micro-batch), loss normalised by the global
    token count; return (global loss, full grads, grad norm)."""
    num_tokens = backend.all_reduce_sum(mask[rows].sum())
    local = 0.0
    for r in rows:
        loss = loss_sum(backend.model, ids[r : r + 1], mask[r : r + 1], adv[r : r + 1]) / num_tokens
        backend.backward(loss)
        local += float(loss)
    grads = full_grads(backend)
    norm = backend.step()
    total = float(backend.all_reduce_sum(torch.tensor(local, dtype=torch.float64)))
    return total, grads, norm


def full_grads(backend) -> dict[str, torch.Tensor] | None:
    """Unsharded gradients before the step, by parameter name (collective); None for
    DeepSpeed, whose caller-owned accumulation reduces gradients only inside `step`."""
    if hasattr(backend, "engine"):
        return None
    out: dict[str, torch.Tensor] = {}
    for name, p in backend.model.named_parameters():
        g = p.grad
        if g is None:  # frozen (LoRA base weights)
            continue
        out[name] = (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().cpu().clone()
    return out


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Max abs difference over all tensors; the key sets must be equal."""
    if set(a) != set(b):
        raise AssertionError(f"different keys: {sorted(set(a) ^ set(b))[:5]}")
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def build(name: str, model, optim):
    """The backend under test, through the trainer's factory as `agentrl train` builds it.

    `name` is local, fsdp2, zero2 or zero3; a `-lora` suffix trains LoRA adapters (r 4),
    initialised alike on every rank and in every backend."""
    from agentrl.config import TrainConfig
    from agentrl.runtime.backend import Backend
    from agentrl.train.backends import backend_for_run
    from agentrl.train.config import LoraConfig, TrainerConfig

    kind, _, lora = name.partition("-")
    backend, stage = {
        "local": ("local", 2),
        "fsdp2": ("fsdp2", 2),
        "zero2": ("deepspeed", 2),
        "zero3": ("deepspeed", 3),
    }[kind]
    trainer = TrainerConfig(
        backend=backend,
        zero_stage=stage,
        device="cpu",
        lora=LoraConfig(enabled=lora == "lora", r=4, alpha=16),
    )
    cfg = TrainConfig(optim=optim.model_dump(), trainer=trainer)
    torch.manual_seed(1)  # the LoRA init
    out = backend_for_run(cfg, model, lr=LR, num_optimizer_steps=4)
    assert isinstance(out, Backend), type(out)
    return out


def run(name: str, ckpt: Path) -> dict:
    """Two steps against LocalBackend, a full-weight gather, and a save/load round trip."""
    from agentrl.rollout.models import load_model
    from agentrl.train.config import OptimConfig

    optim = OptimConfig(lr=LR, max_grad_norm=0.5, warmup_steps=1, schedule="linear")
    torch.manual_seed(0)
    model = load_model("tiny", dtype="float32").train()
    reference = copy.deepcopy(model)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ids, mask, adv = make_batch(model.config.vocab_size)

    t0 = time.perf_counter()
    backend = build(name, model, optim)
    rank, world = backend.rank, backend.world_size
    per_rank = NUM_SEQS // world
    rows = list(range(rank * per_rank, (rank + 1) * per_rank))
    result: dict = {"backend": name, "world_size": world, "init_s": time.perf_counter() - t0}
    t0 = time.perf_counter()
    loss1, grads1, norm1 = train_step(backend, ids, mask, adv, rows)
    result["step_s"] = time.perf_counter() - t0
    full1 = backend.full_state_dict()
    backend.save(ckpt)
    loss2, _, norm2 = train_step(backend, ids, mask, adv, rows)
    full2 = backend.full_state_dict()
    backend.load(ckpt)  # back to after step 1: step 2 again must give the same weights
    full_after_load = backend.full_state_dict()
    loss2b, _, norm2b = train_step(backend, ids, mask, adv, rows)
    full2b = backend.full_state_dict()
    if rank != 0:
        return {}

    local = build("local-lora" if name.endswith("-lora") else "local", reference, optim)
    ref_loss1, ref_grads1, ref_norm1 = train_step(local, ids, mask, adv, list(range(NUM_SEQS)))
    ref_full1 = local.full_state_dict()
    ref_loss2, _, ref_norm2 = train_step(local, ids, mask, adv, list(range(NUM_SEQS)))
    ref_full2 = local.full_state_dict()

    from transformers import AutoModelForCausalLM

    from agentrl.runtime._dist import MODEL_DIR

    reloaded = AutoModelForCausalLM.from_pretrained(ckpt / MODEL_DIR, dtype=torch.float32)
    saved = reloaded.state_dict()  # every weight, as the checkpoint holds it after step 1

    def sent(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """`weights` under the names the engines get (under LoRA the adapted layers only)."""
        return {k: weights[k] for k in full1}

    result.update(
        loss=[loss1, loss2],
        ref_loss=[ref_loss1, ref_loss2],
        grad_norm=[norm1, norm2],
        ref_grad_norm=[ref_norm1, ref_norm2],
        max_norm=optim.max_grad_norm,
        grad_max_diff=None if grads1 is None else max_diff(grads1, ref_grads1),
        grad_max_abs=max(float(g.abs().max()) for g in ref_grads1.values()),
        weights_step1_max_diff=max_diff(full1, ref_full1),
        weights_step2_max_diff=max_diff(full2, ref_full2),
        weights_update_max_abs=max_diff(ref_full1, sent(init)),
        load_restores_max_diff=max_diff(full_after_load, full1),
        resumed_step_max_diff=max_diff(full2b, full2),
        resumed_loss_grad_norm=[loss2b, norm2b],
        hf_reload_max_diff=max_diff(sent(saved), full1),
        state_dict_keys=sorted(full1),
        frozen_max_diff=max_diff(
            {k: v for k, v in saved.items() if "_proj" not in k},
            {k: v for k, v in init.items() if "_proj" not in k},
        ),
        adapter_saved=(ckpt / "adapter" / "adapter_model.safetensors").is_file(),
    )
    return result


def launch(backends: str, tmp: Path, *, timeout: float, variants: bool = True) -> dict:
    """Run this script under torchrun with 2 CPU ranks (loopback only); return its results.

    Called from the tests; on failure the assertion message carries the ranks' output tail.
    """
    import os
    import subprocess

    from agentrl.runtime._dist import free_port, torchrun_command

    out = tmp / "results.json"
    argv = ["--backend", backends, "--out", str(out), "--ckpt", str(tmp / "ckpt")]
    argv += ["--variants"] if variants else []
    cmd = torchrun_command(Path(__file__), *argv, nproc=2, port=free_port())
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="0")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0 and out.is_file(), (proc.stdout + proc.stderr)[-6000:]
    return json.loads(out.read_text())


def run_variants(name: str) -> dict:
    """Step 1 again with gradient checkpointing (same numbers expected) and with bf16 mixed
    precision (close numbers expected); returns grad norms and weights vs the plain run."""
    from agentrl.rollout.models import load_model
    from agentrl.train.config import OptimConfig

    optim = OptimConfig(lr=LR, max_grad_norm=0.5, warmup_steps=1, schedule="linear")
    out: dict = {}
    weights = {}
    for variant, kwargs in [
        ("plain", {}),
        ("checkpointing", {"gradient_checkpointing": True}),
        ("bf16", {"mixed_precision": "bf16"}),
    ]:
        torch.manual_seed(0)
        model = load_model("tiny", dtype="float32").train()
        ids, mask, adv = make_batch(model.config.vocab_size)
        if name == "fsdp2":
            from agentrl.runtime.fsdp2 import FSDP2Backend

            backend = FSDP2Backend(model, optim=optim, lr=LR, num_optimizer_steps=4, **kwargs)
        else:
            from agentrl.runtime.deepspeed_backend import DeepSpeedBackend

            stage = {"zero2": 2, "zero3": 3}[name]
            backend = DeepSpeedBackend(
                model, optim=optim, lr=LR, num_optimizer_steps=4, zero_stage=stage, **kwargs
            )
        per_rank = NUM_SEQS // backend.world_size
        rows = list(range(backend.rank * per_rank, (backend.rank + 1) * per_rank))
        loss, _, norm = train_step(backend, ids, mask, adv, rows)
        weights[variant] = backend.full_state_dict()
        out[variant] = {"loss": loss, "grad_norm": norm}
        if variant != "plain" and backend.rank == 0:
            out[variant]["weights_max_diff"] = max_diff(weights[variant], weights["plain"])
    return out


def main() -> None:
    """Parse arguments, run each backend named, write the JSON results from rank 0."""
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--backend", required=True, help="comma-separated: fsdp2, zero2, zero3 (-lora: LoRA)"
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ckpt", type=Path, required=True)
    parser.add_argument("--variants", action="store_true", help="also checkpointing and bf16")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {}
    for name in args.backend.split(","):
        results[name] = run(name, args.ckpt / name)
        if args.variants:
            results[name]["variants"] = run_variants(name)
    if dist.get_rank() == 0:
        args.out.write_text(json.dumps(results, indent=2))
    from agentrl.runtime._dist import exit_rank, leave_process_group

    leave_process_group()
    exit_rank(0)


if __name__ == "__main__":
    main()
