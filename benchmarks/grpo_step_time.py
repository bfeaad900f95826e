"""Time per GRPO step: agentrl vs TRL's `GRPOTrainer`, side by side, same model and settings.

Settings (both sides): the `tiny` model, 8 prompts x 4 samples, up to 32 new tokens, one
torch thread, GRPO with no KL (no reference model), one optimizer step per rollout, lr 1e-5,
reward = fraction of vowels in the answer (single turn). The first step of each side is a
warm-up and is not counted.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/grpo_step_time.py [--steps 8] [--rounds 2]

Each round runs agentrl's steps, then TRL's; the medians pool all rounds' timed steps.

TRL is not a dependency of agentrl; install it only for this benchmark:
`.venv/bin/pip install trl==1.16.0` (the release checked against transformers 5.19).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

NUM_PROMPTS = 8
GROUP_SIZE = 4
MAX_NEW_TOKENS = 32
LR = 1e-5
PROMPT = "Round {}. Answer with many vowels."


def vowel_fraction(text: str) -> float:
    """The reward: fraction of letters that are vowels."""
    letters = [c for c in text.lower() if c.isalpha()]
    return sum(c in "aeiou" for c in letters) / max(1, len(letters))


def _make_env_class():
    from agentrl.envs.base import TokenEnv

    class OneTurnVowels(TokenEnv):
        """One turn; reward = fraction of vowels in the answer."""

        system_prompt = ""
        max_turns = 1

        def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
            super().reset(seed=seed)
            return PROMPT.format(seed), {}

        def step(self, action: str):
            self.require_reset()
            reward = vowel_fraction(action)
            return "", reward, True, False, {"success": reward > 0.3}

    return OneTurnVowels


def bench_agentrl(steps: int) -> tuple[list[float], float]:
    """Seconds per step (after a warm-up step) and mean completion length."""
    from agentrl.algos.presets import load_preset
    from agentrl.config import load_config
    from agentrl.envs import register
    from agentrl.train.trainer import Trainer

    register("bench-vowels", _make_env_class())
    cfg = load_config(
        overrides=[
            "env.name=bench-vowels",
            "model.name=tiny",
            "algo.kl_coef=0.0",
            f"rollout.group_size={GROUP_SIZE}",
            f"trainer.num_groups={NUM_PROMPTS}",
            f"rollout.sampling.max_new_tokens={MAX_NEW_TOKENS}",
            "trainer.num_threads=1",
            f"trainer.num_steps={steps + 100}",
            "checkpoint.every=0",
            f"optim.lr={LR}",
            "logging.tensorboard=false",
            "logging.save_trajectories=0",
            "logging.progress=false",
        ],
        base=load_preset("grpo"),
    )
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(cfg, Path(run_dir))
        times, lengths, stages = [], [], []
        try:
            for _ in range(steps + 1):
                start = time.perf_counter()
                metrics = trainer.train_step()
                times.append(time.perf_counter() - start)
                lengths.append(metrics["episode/sampled_tokens"])
                stages.append({k: v for k, v in metrics.items() if k.startswith("time/")})
        finally:
            trainer.close()
    breakdown = {k: statistics.mean(s[k] for s in stages[1:]) for k in stages[-1]}
    print("agentrl stages (mean s):", {k: round(v, 3) for k, v in breakdown.items()})
    return times[1:], statistics.mean(lengths[1:])


def bench_trl(steps: int) -> tuple[list[float], float] | None:
    """Seconds per step of TRL's GRPOTrainer (after a warm-up), or None without trl."""
    try:
        import trl
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    except ImportError:
        return None
    import torch

    from agentrl.rollout.models import resolve_model

    torch.set_num_threads(1)
    path = resolve_model("tiny")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    prompts = [
        [{"role": "user", "content": PROMPT.format(i)}] for i in range((steps + 1) * NUM_PROMPTS)
    ]
    dataset = Dataset.from_dict({"prompt": prompts})

    def reward(completions, **kwargs):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [vowel_fraction(t) for t in texts]

    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            stamps.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            stamps.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out:
        args = trl.GRPOConfig(
            output_dir=out,
            learning_rate=LR,
            per_device_train_batch_size=NUM_PROMPTS * GROUP_SIZE,
            gradient_accumulation_steps=1,
            num_generations=GROUP_SIZE,
            steps_per_generation=1,
            num_iterations=1,
            max_completion_length=MAX_NEW_TOKENS,
            temperature=1.0,
            beta=0.0,
            max_steps=steps + 1,
            use_cpu=True,
            bf16=False,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            disable_tqdm=True,
            dataloader_num_workers=0,
            seed=0,
        )
        trainer = trl.GRPOTrainer(
            model=model,
            reward_funcs=[reward],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[Clock()],
        )
        trainer.train()
    times = [stamps[i + 1] - stamps[i] for i in range(0, len(stamps) - 1, 2)]
    lengths = [
        float(r["completions/mean_length"])
        for r in trainer.state.log_history
        if "completions/mean_length" in r
    ]
    return times[1:], statistics.mean(lengths[1:])


def main() -> None:
    """Run both sides, alternating in rounds, and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=8, help="timed steps per side and round (after 1 warm-up)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="rounds of (agentrl, TRL); alternating evens out load drift on a shared machine",
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    ours: list[float] = []
    theirs: list[float] = []
    for round_ in range(args.rounds):
        times, our_len = bench_agentrl(args.steps)
        ours += times
        print(
            f"round {round_} agentrl: median {statistics.median(times):.3f} s/step, min "
            f"{min(times):.3f} (steps {[round(t, 2) for t in times]}), {our_len:.1f} sampled "
            "tokens per answer"
        )
        trl_result = bench_trl(args.steps)
        if trl_result is None:
            print(
                "TRL is not installed: pip install trl==1.16.0 to compare "
                "(not an agentrl dependency)"
            )
            continue
        trl_times, trl_len = trl_result
        theirs += trl_times
        print(
            f"round {round_} TRL GRPOTrainer: median {statistics.median(trl_times):.3f} s/step, "
            f"min {min(trl_times):.3f} (steps {[round(t, 2) for t in trl_times]}), "
            f"{trl_len:.1f} tokens per answer; round ratio "
            f"{statistics.median(times) / statistics.median(trl_times):.2f}"
        )
    print(f"agentrl: median {statistics.median(ours):.3f} s/step over {len(ours)} steps")
    if not theirs:
        return
    print(
        f"TRL GRPOTrainer: median {statistics.median(theirs):.3f} s/step over {len(theirs)} steps"
    )
    ratio = statistics.median(ours) / statistics.median(theirs)
    verdict = "meets" if ratio <= 0.5 else "misses"
    print(f"agentrl / TRL median time per step: {ratio:.2f} ({verdict} the goal of <= 0.5)")


if __name__ == "__main__":
    main()
