"""Seconds per LoRA weight sync into vLLM, SmolLM2-135M: the changed layers only, against all.

A LoRA run's engine needs only the layers its adapters change (`agentrl.runtime.lora.
hf_weights`). Both sides run in one process on the same policy and the same vLLM engine:

- `all weights`: what every step did before: copy the full state dict, merge every adapter
  into its base weight, write all 135 M weights to /dev/shm and reload them all in vLLM;
- `changed only`: the trainer's sync now (`LocalBackend.full_state_dict` then
  `VLLMEngine.update_weights`): the 27 M weights of the adapted attention layers.

Policy: SmolLM2-135M-Instruct (fp32) with LoRA r16, alpha 32 on q/k/v/o (the recipes'),
its adapters moved off zero. The syncs alternate between the sides, each with new adapter
weights; the medians are printed. After the last `changed only` sync, vLLM's logprobs of
sampled ids are checked against the trainer's (the peft model, teacher-forced) within the
tolerance of tests/rollout/test_vllm_engine.py.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lora_sync.py [--quick] [--syncs 6]

The last line is `ratio lora_sync_s X.XX (goal <= 0.3)`: the median seconds of a
`changed only` sync.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

PARITY_TOL = 2e-3
"""Max |vLLM logp - trainer logp| (tests/rollout/test_vllm_engine.py's PARITY_TOL)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--syncs", type=int, default=6, help="timed syncs per side")
    parser.add_argument("--quick", action="store_true", help="3 syncs per side (~2 min)")
    args = parser.parse_args()
    syncs = 3 if args.quick else args.syncs

    import torch

    from agentrl._console import quiet_third_party

    quiet_third_party()
    from agentrl.rollout.engine import GenerationRequest, SamplingParams, generate_sync
    from agentrl.rollout.models import load_model, resolve_model
    from agentrl.rollout.vllm_engine import VLLMEngine
    from agentrl.runtime.backend import make_backend
    from agentrl.runtime.config import LoraConfig, OptimConfig
    from agentrl.runtime.lora import merge_lora

    torch.set_num_threads(1)
    path = resolve_model(args.model)
    lora = LoraConfig(enabled=True, r=16, alpha=32)
    backend = make_backend(
        load_model(str(path), dtype="float32"),
        optim=OptimConfig(),
        lr=1e-4,
        num_optimizer_steps=1,
        lora=lora,
        base_model=args.model,
    )
    module = backend.module
    generator = torch.Generator().manual_seed(0)

    def move_adapters() -> None:  # as an optimizer step would, but large enough to see
        with torch.no_grad():
            for name, p in module.named_parameters():
                if ".lora_" in name:
                    p.copy_(0.02 * torch.randn(p.shape, generator=generator))

    def sync_all(version: int) -> None:
        state = {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}
        engine.update_weights(merge_lora(state, backend.lora_scaling), version)

    def sync_changed(version: int) -> None:
        engine.update_weights(backend.full_state_dict(), version)

    engine = VLLMEngine(str(path), dtype="float32", max_model_len=1024, max_num_seqs=8)
    print(f"vLLM engine start: {engine.stats['start_s']:.1f} s")
    sides = {"all weights": sync_all, "changed only": sync_changed}
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    sent = {
        "all weights": len(merge_lora(module.state_dict(), backend.lora_scaling)),
        "changed only": len(backend.full_state_dict()),
    }
    version = 0
    try:
        for _ in range(syncs + 1):  # the first round is a warm-up
            for name, sync in sides.items():
                move_adapters()
                version += 1
                start = time.perf_counter()
                sync(version)
                seconds[name].append(time.perf_counter() - start)
        prompts = [
            module.get_base_model().config.bos_token_id or 1,
            *range(100, 120),
        ]
        requests = [
            GenerationRequest(prompts, SamplingParams(max_new_tokens=16, seed=i, ignore_eos=True))
            for i in range(4)
        ]
        completions = generate_sync(engine, requests)
    finally:
        engine.close()

    gaps = []
    module.eval()
    for request, completion in zip(requests, completions, strict=True):
        ids = torch.tensor([list(request.prompt_ids) + completion.token_ids])
        with torch.no_grad():
            logits = module(input_ids=ids).logits[0, len(request.prompt_ids) - 1 : -1]
        logp = torch.log_softmax(logits.float(), dim=-1)
        trained = logp.gather(-1, torch.tensor(completion.token_ids)[:, None]).squeeze(-1)
        gaps += [abs(a - float(b)) for a, b in zip(completion.logp, trained, strict=True)]
    gap = max(gaps)

    print(f"{'sync':<14}{'tensors':>9}{'median s':>10}{'min s':>8}  timed syncs")
    for name, times in seconds.items():
        timed = times[1:]
        print(
            f"{name:<14}{sent[name]:>9}{statistics.median(timed):>10.3f}{min(timed):>8.3f}  "
            f"{[round(t, 3) for t in timed]}"
        )
    verdict = "within" if gap < PARITY_TOL else "OUTSIDE"
    print(
        f"vLLM vs trainer logprobs after the last changed-only sync: max gap {gap:.1e} "
        f"({verdict} {PARITY_TOL:g})"
    )
    ours = statistics.median(seconds["changed only"][1:])
    before = statistics.median(seconds["all weights"][1:])
    print(f"changed only / all weights: {ours / before:.2f}")
    if gap >= PARITY_TOL:
        raise SystemExit("the engine's logprobs do not match the trainer's after a sync")
    print(f"ratio lora_sync_s {ours:.2f} (goal <= 0.3)")


if __name__ == "__main__":
    main()
