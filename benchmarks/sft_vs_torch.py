"""The warm start's SFT step against bare torch: tokens/s, SmolLM2-135M + LoRA r16, same rows.

Rows: the Sokoban LLM recipe's warm start (`cpu-sokoban-llm.yaml`: the solver's episodes on a
6x6 grid drawn with spaces, one action per turn, each prompt the system prompt and the
current grid, one row per turn), packed by `TokenRows` and split into mini-batches of the
recipe's `batch_size` (16) rows, the same ones for both sides.

- `agentrl`: `agentrl.sft.train._sft_step` on each mini-batch, as the warm start runs it
  (`LocalBackend` with peft LoRA r16 on q/k/v/o, micro-batches of `micro_batch_tokens` packed
  by length, the logits of trained positions only, the shared system prompt computed once,
  clipping, one AdamW step).
- `torch`: a bare loop over the same micro-batches: a fresh copy of the model with peft LoRA
  (same rank, alpha and modules), `model(ids, mask).logits`, cross-entropy of the trained ids
  summed / their count in the mini-batch, backward, clipping, `torch.optim.AdamW.step()`.

One torch thread; the sides alternate, one pass over the mini-batches each, after a warm-up
step each. Tokens/s counts every id through forward and backward (the same on both sides).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sft_vs_torch.py [--quick]

The last line is `ratio sft_vs_torch X.XX (goal >= 0.8)`: agentrl's tokens/s over bare
torch's (medians over the rounds).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

BATCH_SIZE = 16
"""Rows per optimizer step (the recipe's `warm_start.batch_size`)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=12, help="Sokoban solver episodes")
    parser.add_argument("--rounds", type=int, default=3, help="timed passes per side")
    parser.add_argument("--quick", action="store_true", help="2 episodes, 2 rounds (~2 min idle)")
    args = parser.parse_args()
    if args.quick:
        args.episodes, args.rounds = 2, 2

    import torch

    from agentrl._console import quiet_third_party

    quiet_third_party()
    from agentrl.rollout.models import load_model, load_tokenizer, resolve_model
    from agentrl.runtime.batch import micro_batches
    from agentrl.sft.config import SFTConfig
    from agentrl.sft.dataset import TokenRows
    from agentrl.sft.train import _backend, _expert_episodes, _sft_step

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = SFTConfig(
        env={"name": "sokoban", "kwargs": {"grid_sep": " ", "max_turns": 10}},
        model="smollm2-135m",
        max_actions_per_turn=1,
        history_turns=0,
        max_context_tokens=512,
        batch_size=BATCH_SIZE,
        lora={"enabled": True},
        optim={"lr": 5e-4},
    )
    path = resolve_model(cfg.model)
    tok = load_tokenizer(str(path))
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    rows = TokenRows.from_trajectories(
        _expert_episodes(cfg, tok, args.episodes), pad_id=pad_id, vocab_size=len(tok)
    )
    num_mini = max(1, rows.num_rows // BATCH_SIZE)
    minis = list(rows.mini_batches(num_mini, torch.Generator().manual_seed(0)))
    tokens = sum(int(m.attention_mask.sum()) for m in minis)
    print(
        f"rows {rows.num_rows} ({args.episodes} episodes) in {len(minis)} mini-batches, "
        f"ids {tokens}, trained ids {rows.num_loss_tokens}, "
        f"micro_batch_tokens {cfg.micro_batch_tokens}"
    )

    backend = _backend(cfg, load_model(str(path), dtype="float32"), 1000)

    def agentrl_pass(parts: list) -> float:
        start = time.perf_counter()
        for mini in parts:
            _sft_step(backend, mini, cfg.micro_batch_tokens)
        return time.perf_counter() - start

    from peft import LoraConfig as PeftLora
    from peft import get_peft_model

    bare = get_peft_model(
        load_model(str(path), dtype="float32"),
        PeftLora(
            r=cfg.lora.r,
            lora_alpha=cfg.lora.alpha,
            target_modules=list(cfg.lora.target_modules),
            lora_dropout=0.0,
        ),
    )
    bare.train()
    params = [p for p in bare.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.optim.lr)
    micros = [micro_batches(m, cfg.micro_batch_tokens) for m in minis]

    def torch_pass(parts: list) -> float:
        start = time.perf_counter()
        for mini in parts:
            num = max(1, sum(int(m.loss_mask.sum()) for m in mini))
            for micro in mini:
                logits = bare(input_ids=micro.input_ids, attention_mask=micro.attention_mask)
                logits = logits.logits[:, :-1].float()
                nll = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]),
                    micro.input_ids[:, 1:].reshape(-1),
                    reduction="none",
                )
                loss = (nll * micro.loss_mask[:, 1:].reshape(-1)).sum() / num
                loss.backward()
            torch.nn.utils.clip_grad_norm_(params, cfg.optim.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    warm = minis[0].rows(range(min(4, minis[0].num_rows)))  # first calls, allocator
    agentrl_pass([warm])
    torch_pass([micro_batches(warm, cfg.micro_batch_tokens)])
    seconds: dict[str, list[float]] = {"agentrl": [], "torch": []}
    for _ in range(args.rounds):
        seconds["agentrl"].append(agentrl_pass(minis))
        print(f"  agentrl: {seconds['agentrl'][-1]:.2f} s", flush=True)
        seconds["torch"].append(torch_pass(micros))
        print(f"  torch: {seconds['torch'][-1]:.2f} s", flush=True)

    print(f"{'side':<10}{'median s':>10}{'tokens/s':>10}  timed passes")
    rates = {}
    for name, times in seconds.items():
        median = statistics.median(times)
        rates[name] = tokens / median
        print(f"{name:<10}{median:>10.2f}{rates[name]:>10.0f}  {[round(t, 2) for t in times]}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"ratio sft_vs_torch {rates['agentrl'] / rates['torch']:.2f} (goal >= 0.8)")


if __name__ == "__main__":
    main()
