"""The RL update against bare torch: trained tokens/s, SmolLM2-135M + LoRA r16, same rows.

Rows: the Sokoban LLM recipe's (`cpu-sokoban-llm.yaml`: 6x6 grid drawn with spaces, one
action per turn, each prompt the system prompt and the current grid), from the solver's
episodes, one row per turn, tokenized by SmolLM2's chat template; groups of `GROUP` episodes (`--rows` of them kept),
an advantage of +1 or -1 per episode (seeded).

- `agentrl`: `Learner.update` over the batch, as `agentrl train` runs it: GRPO (no KL), one
  mini-batch, micro-batches of `trainer.micro_batch_tokens` rows packed by length, the
  logits of trained positions only, the shared system prompt computed once, one AdamW step
  (`LocalBackend`, peft LoRA from `trainer.lora`).
- `torch`: a bare loop over the same micro-batches (the same packing): a fresh copy of the
  model with peft LoRA (same rank, alpha and modules), `model(ids, mask).logits`, log-softmax
  of the ids, loss `-(advantage * logp)` summed over trained tokens / their count, backward,
  gradient clipping, `torch.optim.AdamW.step()`.

Both sides start from the same weights (adapters zero-initialised B), one torch thread; the
rounds alternate between the sides after one warm-up each. Tokens/s counts every id through
forward and backward (the same count on both sides).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/update_vs_torch.py [--quick]

The last line is `ratio update_vs_torch X.XX (goal >= 0.8)`: agentrl's median tokens/s over
bare torch's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

GROUP = 4
"""Episodes per group."""
LR = 1e-4


def sokoban_batch(num_episodes: int, *, pad_id: int, tokenizer, seed: int = 0):
    """A `TrainBatch` of the solver's Sokoban episodes as the LLM recipe prompts them, with
    group ids and a +-1 advantage per episode on its trained tokens."""
    import torch

    from agentrl.runtime.batch import to_batch
    from agentrl.sft.config import SFTConfig
    from agentrl.sft.train import _expert_episodes

    cfg = SFTConfig(
        env={"name": "sokoban", "kwargs": {"grid_sep": " ", "max_turns": 10}},
        model="smollm2-135m",
        max_actions_per_turn=1,
        history_turns=0,
        max_context_tokens=512,
    )
    trajs = list(_expert_episodes(cfg, tokenizer, num_episodes))
    batch = to_batch(trajs, pad_id=pad_id)
    batch.group_ids = batch.traj_ids // GROUP
    sign = torch.randint(0, 2, (num_episodes,), generator=torch.Generator().manual_seed(seed))
    per_row = (2.0 * sign - 1.0)[batch.traj_ids]
    batch.advantages = per_row[:, None] * batch.loss_mask
    return batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=8, help="Sokoban solver episodes")
    parser.add_argument("--rows", type=int, default=64, help="rows (turns) kept, at most")
    parser.add_argument("--rounds", type=int, default=3, help="timed updates per side")
    parser.add_argument("--quick", action="store_true", help="8 rows, 2 rounds (~2 min idle)")
    args = parser.parse_args()
    if args.quick:
        args.episodes, args.rows, args.rounds = 2, 8, 2

    import torch

    from agentrl._console import quiet_third_party

    quiet_third_party()
    from agentrl.algos.base import make_algorithm
    from agentrl.algos.presets import load_preset
    from agentrl.config import load_config
    from agentrl.rollout.models import load_model, load_tokenizer, resolve_model
    from agentrl.runtime.backend import make_backend
    from agentrl.runtime.batch import micro_batches
    from agentrl.train.learner import Learner

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = load_config(
        overrides=["model.name=smollm2-135m", "algo.kl_coef=0.0", "trainer.lora.enabled=true"],
        base=load_preset("grpo"),
    )
    path = resolve_model("smollm2-135m")
    tok = load_tokenizer(str(path))
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    batch = sokoban_batch(args.episodes, pad_id=pad_id, tokenizer=tok)
    batch = batch.rows(range(min(args.rows, batch.num_rows)))
    tokens = int(batch.attention_mask.sum())
    trained = int(batch.loss_mask.sum())
    print(
        f"rows {batch.num_rows} (of {args.episodes} episodes), ids {tokens}, trained ids {trained}, "
        f"micro_batch_tokens {cfg.trainer.micro_batch_tokens}"
    )

    # -- agentrl: the learner's update -------------------------------------------------------
    policy = make_backend(
        load_model(str(path), dtype="float32"),
        optim=cfg.optim,
        lr=LR,
        num_optimizer_steps=1000,
        lora=cfg.trainer.lora,
        base_model="smollm2-135m",
    )
    learner = Learner(
        make_algorithm(cfg.algo),
        policy=policy,
        critic=None,
        reference=None,
        temperature=1.0,
        micro_batch_tokens=cfg.trainer.micro_batch_tokens,
        generator=torch.Generator().manual_seed(0),
        logits_to_keep=True,
        share_prefix=True,
        backend="local",
        lr=LR,
    )

    def agentrl_update() -> float:
        if learner.algo.needs.old_logp:
            learner.score(batch)  # before the update in `agentrl train` too; not timed
        start = time.perf_counter()
        learner.update(batch)
        return time.perf_counter() - start

    # -- bare torch --------------------------------------------------------------------------
    from peft import LoraConfig as PeftLora
    from peft import get_peft_model

    lora = cfg.trainer.lora
    bare = get_peft_model(
        load_model(str(path), dtype="float32"),
        PeftLora(
            r=lora.r,
            lora_alpha=lora.alpha,
            target_modules=list(lora.target_modules),
            lora_dropout=0.0,
        ),
    )
    bare.train()
    params = [p for p in bare.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=LR)
    micros = micro_batches(batch, cfg.trainer.micro_batch_tokens)

    def torch_update() -> float:
        start = time.perf_counter()
        for micro in micros:
            logits = bare(input_ids=micro.input_ids, attention_mask=micro.attention_mask).logits
            logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            logp = logp.gather(-1, micro.input_ids[:, 1:, None]).squeeze(-1)
            mask = micro.loss_mask[:, 1:]
            loss = -(micro.advantages[:, 1:] * logp * mask).sum() / trained
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    sides = {"agentrl": agentrl_update, "torch": torch_update}
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.rounds + 1):  # the first round is a warm-up
        for name, update in sides.items():
            seconds[name].append(update())
            print(f"  {name}: {seconds[name][-1]:.2f} s", flush=True)

    print(f"{'side':<10}{'median s':>10}{'tokens/s':>10}  timed updates")
    rates = {}
    for name, times in seconds.items():
        median = statistics.median(times[1:])
        rates[name] = tokens / median
        print(f"{name:<10}{median:>10.2f}{rates[name]:>10.0f}  {[round(t, 2) for t in times[1:]]}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"ratio update_vs_torch {rates['agentrl'] / rates['torch']:.2f} (goal >= 0.8)")


if __name__ == "__main__":
    main()
