"""GPU path check (under 10 minutes on one H200): HF engine + FSDP2 backend in bf16.

A 0.5B-class Qwen2 (Qwen2.5-0.5B's shapes, random weights: nothing is downloaded) with the
`tiny` model's ChatML tokenizer trains a few RL steps on Sokoban through the real `Trainer`:
HF engine on the GPU, FSDP2 backend (a one-rank process group, nccl), bf16 mixed precision.
Reports rollout and training tokens/s, step times and peak GPU memory as JSON (stdout, and
`$OUT/gpu_check.json` when `$OUT` is set).

    .venv/bin/python benchmarks/gpu_check.py                    # on the GPU machine
    .venv/bin/python benchmarks/gpu_check.py --size tiny --device cpu --steps 1   # CPU dry run

Never part of CI. With several GPUs, run it under `torchrun --nproc_per_node=N` to shard.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES: dict[str, dict[str, Any]] = {
    "0.5b": dict(  # Qwen2.5-0.5B-Instruct's architecture
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151_936,
        tie_word_embeddings=True,
    ),
    "tiny": dict(  # for a CPU dry run of this script
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=4096,
        tie_word_embeddings=True,
    ),
}


def build_model(size: str, dest: Path) -> int:
    """Write a random-weight Qwen2 of `size` with the tiny ChatML tokenizer; its parameters."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from agentrl.rollout.models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny"))
    config = Qwen2Config(
        **SIZES[size],
        max_position_embeddings=4096,
        rope_theta=1_000_000.0,
        bos_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
    )
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    """Build the model, train `--steps` steps, print the measurements."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="0.5b", help="Model shape.")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--steps", type=int, default=3, help="Training steps (the first warms up).")
    p.add_argument("--preset", default="grpo", help="Algorithm preset (starpo-s adds a critic).")
    p.add_argument("--num-groups", type=int, default=8)
    p.add_argument("--group-size", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--max-turns", type=int, default=3)
    args = p.parse_args()

    import torch

    from agentrl.cli.train import resolve_train_config
    from agentrl.train.trainer import Trainer

    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = "cuda" if cuda else "cpu"
    if not cuda:
        torch.set_num_threads(1)
    report: dict[str, Any] = {"size": args.size, "device": device, "preset": args.preset}
    if cuda:
        report["gpu"] = torch.cuda.get_device_name(0)
    with tempfile.TemporaryDirectory(prefix="agentrl-gpu-check-") as tmp:
        model_dir = Path(tmp) / "model"
        t0 = time.perf_counter()
        report["num_params"] = build_model(args.size, model_dir)
        report["build_s"] = time.perf_counter() - t0
        overrides = [
            f"model.name={model_dir}",
            f"model.dtype={'bfloat16' if cuda else 'float32'}",
            "env.name=sokoban",
            f"engine.device={device}",
            f"engine.max_batch_size={args.num_groups * args.group_size}",
            f"trainer.device={device}",
            "trainer.backend=fsdp2",
            f"trainer.num_steps={args.steps}",
            f"trainer.num_groups={args.num_groups}",
            "trainer.micro_batch_tokens=16384",
            f"rollout.group_size={args.group_size}",
            f"rollout.max_turns={args.max_turns}",
            "rollout.max_context_tokens=2048",
            f"rollout.sampling.max_new_tokens={args.max_new_tokens}",
            "rollout.sampling.temperature=1.0",
            "optim.lr=1e-6",
            "algo.entropy_coef=0.001",  # gradients even when every reward is equal
            "checkpoint.every=0",
            "logging.progress=false",
            "logging.tensorboard=false",
            "logging.save_trajectories=0",
        ]
        cfg = resolve_train_config(
            config_file=None, overrides=overrides, preset=args.preset, flags={}, base_file=None
        )
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        trainer = Trainer(cfg, Path(tmp) / "run")
        report["setup_s"] = time.perf_counter() - t0
        steps = []
        try:
            for _ in range(args.steps):
                m = trainer.train_step()
                steps.append(
                    {
                        k: m.get(k)
                        for k in (
                            "time/step",
                            "time/rollout",
                            "time/score",
                            "time/update",
                            "time/sync",
                            "throughput/gen_tokens_per_s",
                            "throughput/train_tokens_per_s",
                            "rollout/num_sampled_tokens",
                            "actor/grad_norm",
                            "actor/pg_loss",
                        )
                    }
                )
                print(json.dumps({"step": len(steps), **steps[-1]}), flush=True)
        finally:
            trainer.close()
        measured = steps[1:] or steps
        report["steps"] = steps
        for key in ("throughput/gen_tokens_per_s", "throughput/train_tokens_per_s", "time/step"):
            values = [s[key] for s in measured if s.get(key) is not None]
            report[f"mean_{key.split('/')[-1]}"] = sum(values) / max(len(values), 1)
        if cuda:
            report["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
            report["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
    text = json.dumps(report, indent=2)
    print(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "gpu_check.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
