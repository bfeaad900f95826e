"""Rollout speed of SmolLM2-135M-Instruct on CPU: the hf engine against vllm, side by side.

Real episodes of real envs (not scripted ones), with the recipes' sampling settings: each
engine rolls out the same seeds (`--episodes` seeds x `--group-size`) of each env, and the
repeats alternate between the engines, so a load spike on this shared machine hits both.
Printed per env and engine: sampled tokens per second, episodes per second, mean sampled
tokens per episode, and vllm's speed-up over hf (ratio of the medians).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/smollm2_engines.py          # ~10 min, 2 cores
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/smollm2_engines.py --envs bandit --repeats 1

Both engines sample at the same temperature and token limit, but their random draws differ,
so answer lengths differ a little: compare tokens/s, not wall time.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from dataclasses import replace

os.environ.setdefault("OMP_NUM_THREADS", "1")

ENV_KWARGS = {  # as in examples/bandit.yaml and examples/math.yaml
    "bandit": {"name_fallback": True},
    "math-arithmetic": {"last_number_fallback": True},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--engines", default="hf,vllm")
    parser.add_argument("--envs", default="bandit,math-arithmetic")
    parser.add_argument("--episodes", type=int, default=16, help="seeds per rollout")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from agentrl._console import quiet_third_party

    quiet_third_party()
    from agentrl.cli.rollout import build_engine
    from agentrl.envs import make
    from agentrl.rollout.config import RolloutConfig
    from agentrl.rollout.engine import SamplingParams
    from agentrl.rollout.engines import SeededEngine
    from agentrl.rollout.loop import rollout
    from agentrl.rollout.models import load_tokenizer, resolve_model
    from agentrl.trajectory.bridge import ChatBridge

    model = str(resolve_model(args.model))
    tok = load_tokenizer(model)
    bridge = ChatBridge(tok)
    # as in training and eval: each episode and turn gets its own seed from the rollout's
    # base seed (a bare engine would give every episode of a group the same ids)
    engines = {name: SeededEngine(build_engine(model, name)) for name in args.engines.split(",")}
    sampling = SamplingParams(
        temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=0
    )
    cfg = RolloutConfig(max_context_tokens=1024)
    seeds = list(range(args.episodes))
    rows = []
    try:
        for env_name in args.envs.split(","):
            factory = functools.partial(make, env_name, **ENV_KWARGS.get(env_name, {}))
            stats: dict[str, list[tuple[float, int, int]]] = {name: [] for name in engines}
            for engine in engines.values():  # warm-up: first calls, prefix cache
                rollout(
                    engine,
                    factory,
                    tok,
                    seeds[:2],
                    group_size=2,
                    cfg=cfg,
                    sampling=sampling,
                    bridge=bridge,
                )
            for i in range(args.repeats):
                order = list(engines) if i % 2 == 0 else list(reversed(engines))
                for name in order:
                    t0 = time.perf_counter()
                    result = rollout(
                        engines[name],
                        factory,
                        tok,
                        seeds,
                        group_size=args.group_size,
                        cfg=cfg,
                        sampling=replace(sampling, seed=i + 1),
                        bridge=bridge,
                    )
                    wall = time.perf_counter() - t0
                    sampled = sum(t.num_sampled_tokens for t in result.trajectories)
                    stats[name].append((wall, sampled, len(result.trajectories)))
            for name, runs in stats.items():
                tok_s = statistics.median(s / w for w, s, _ in runs)
                ep_s = statistics.median(n / w for w, _, n in runs)
                per_ep = statistics.mean(s / n for _, s, n in runs)
                rows.append((env_name, name, tok_s, ep_s, per_ep))
    finally:
        for engine in engines.values():
            engine.close()
    print(
        f"\n{args.model}, {args.episodes}x{args.group_size} episodes per rollout, "
        f"T={args.temperature}, max_new_tokens {args.max_new_tokens}, median of "
        f"{args.repeats} alternating repeats, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
    )
    print(f"{'env':<18}{'engine':<8}{'tokens/s':>10}{'episodes/s':>12}{'tokens/ep':>11}")
    for env_name, name, tok_s, ep_s, per_ep in rows:
        print(f"{env_name:<18}{name:<8}{tok_s:>10.1f}{ep_s:>12.2f}{per_ep:>11.1f}")
    by = {(e, n): t for e, n, t, _, _ in rows}
    for env_name in args.envs.split(","):
        if (env_name, "hf") in by and (env_name, "vllm") in by:
            print(
                f"{env_name}: vllm / hf tokens/s = {by[env_name, 'vllm'] / by[env_name, 'hf']:.2f}x"
            )


if __name__ == "__main__":
    main()
