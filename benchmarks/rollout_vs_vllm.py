"""agentrl's rollout against bare vLLM: sampled tokens/s of SmolLM2-135M on the same requests.

Two workloads, both sides in one run, with the same engine settings (`VLLMEngine`'s on CPU:
fp32, 0.25 GiB KV cache, prefix caching, whole prompts, eager):

- `math` (single turn): `math-arithmetic` questions, `--groups` x `GROUP` samples, up to 64
  new ids, temperature 1;
- `sokoban` (multi-turn): the LLM recipe's Sokoban (`cpu-sokoban-llm.yaml`: 6x6 grid drawn
  with spaces, each prompt the system prompt and the current grid, up to 16 new ids a turn),
  `--groups` x `GROUP` episodes of up to `--turns` turns.

- `agentrl`: `agentrl.rollout.loop.rollout` over `VLLMEngine`: episodes as async tasks, the
  chat template, the env steps, the trajectories with logprobs.
- `vllm`: `vllm.LLM.generate` (a second engine, started with the same arguments) given the
  requests agentrl's rollout sent (recorded), one call per turn with every episode's request
  for that turn (a turn's prompt needs the previous turn's answer), each with the seed,
  temperature and number of sampled ids agentrl's got (`max_tokens` = that count,
  `ignore_eos`), and `logprobs=0` (the sampled ids' logprobs, which RL needs).

Tokens/s is sampled ids over wall time; both sides sample the same ids' count. The sides
alternate, one warm-up round each.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rollout_vs_vllm.py [--quick]

The last line is `ratio rollout_vs_vllm X.XX (goal >= 0.9)`: agentrl's tokens/s over bare
vLLM's, both workloads pooled (total ids / total median seconds).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

GROUP = 4
"""Samples (episodes) per prompt (seed)."""
MAX_MODEL_LEN = 1024
MAX_NUM_SEQS = 64
KV_CACHE_GB = 0.25


class RecordingEngine:
    """Wraps an engine; keeps every request it was given and the ids sampled for it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[tuple[Any, int]] = []

    @property
    def weight_version(self) -> int:
        return self.inner.weight_version

    @property
    def default_stop_ids(self) -> tuple[int, ...]:
        return self.inner.default_stop_ids

    async def generate(self, requests: Any) -> Any:
        completions = await self.inner.generate(requests)
        self.calls += [(r, len(c.token_ids)) for r, c in zip(requests, completions, strict=True)]
        return completions

    def update_weights(self, state_dict: Any, version: int) -> None:
        self.inner.update_weights(state_dict, version)

    def close(self) -> None:
        self.inner.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=8, help="prompts (seeds) per workload")
    parser.add_argument("--turns", type=int, default=10, help="Sokoban turns at most")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per side")
    parser.add_argument("--quick", action="store_true", help="2 groups, 3 turns, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.groups, args.turns, args.rounds = 2, 3, 1

    import torch

    from agentrl._console import quiet_third_party

    quiet_third_party()
    from vllm import LLM
    from vllm import SamplingParams as VSamplingParams
    from vllm.inputs import TokensPrompt

    from agentrl.envs import make
    from agentrl.rollout.config import RolloutConfig
    from agentrl.rollout.engine import SamplingParams
    from agentrl.rollout.loop import rollout
    from agentrl.rollout.models import load_tokenizer, resolve_model
    from agentrl.rollout.vllm_engine import VLLMEngine
    from agentrl.trajectory.bridge import ChatBridge

    torch.set_num_threads(1)
    path = str(resolve_model("smollm2-135m"))
    tok = load_tokenizer(path)
    bridge = ChatBridge(tok)
    workloads = {
        "math": (
            functools.partial(make, "math-arithmetic"),
            RolloutConfig(max_turns=1, max_context_tokens=MAX_MODEL_LEN),
            SamplingParams(max_new_tokens=64, temperature=1.0),
        ),
        "sokoban": (
            functools.partial(make, "sokoban", grid_sep=" ", max_turns=args.turns),
            RolloutConfig(max_turns=args.turns, history_turns=0, max_context_tokens=512),
            SamplingParams(max_new_tokens=16, temperature=1.0),
        ),
    }
    engine = RecordingEngine(
        VLLMEngine(
            path,
            dtype="float32",
            max_model_len=MAX_MODEL_LEN,
            max_num_seqs=MAX_NUM_SEQS,
            kv_cache_gb=KV_CACHE_GB,
        )
    )
    bare = LLM(
        model=path,
        dtype="float32",
        max_model_len=MAX_MODEL_LEN,
        max_num_seqs=MAX_NUM_SEQS,
        kv_cache_memory_bytes=int(KV_CACHE_GB * 2**30),
        enable_prefix_caching=True,
        enforce_eager=True,
        enable_chunked_prefill=False,
        max_num_batched_tokens=max(MAX_MODEL_LEN, 2048),
        seed=0,
        disable_log_stats=True,
    )
    seeds = list(range(args.groups))

    def run_agentrl(name: str) -> tuple[float, int, list[list[tuple[Any, int]]]]:
        factory, cfg, sampling = workloads[name]
        engine.calls.clear()
        start = time.perf_counter()
        result = rollout(
            engine, factory, tok, seeds, group_size=GROUP, cfg=cfg, sampling=sampling, bridge=bridge
        )
        wall = time.perf_counter() - start
        sampled = int(result.metrics["rollout/num_sampled_tokens"])
        by_turn: dict[int, list[tuple[Any, int]]] = {}
        seen: dict[Any, int] = {}
        for request, n in engine.calls:
            k = seen.get(request.session_id, 0)
            seen[request.session_id] = k + 1
            by_turn.setdefault(k, []).append((request, n))
        return wall, sampled, [by_turn[k] for k in sorted(by_turn)]

    def run_vllm(turns: list[list[tuple[Any, int]]]) -> tuple[float, int]:
        start = time.perf_counter()
        sampled = 0
        for calls in turns:
            prompts = [TokensPrompt(prompt_token_ids=list(r.prompt_ids)) for r, _ in calls]
            params = [
                VSamplingParams(
                    temperature=r.params.temperature,
                    top_p=r.params.top_p,
                    max_tokens=max(1, n),
                    seed=r.params.seed,
                    ignore_eos=True,
                    logprobs=0,
                )
                for r, n in calls
            ]
            outs = bare.generate(prompts, params, use_tqdm=False)
            sampled += sum(len(o.outputs[0].token_ids) for o in outs)
        return time.perf_counter() - start, sampled

    seconds: dict[tuple[str, str], list[float]] = {}
    ids: dict[str, int] = {}
    try:
        for round_ in range(args.rounds + 1):  # the first round is a warm-up
            for name in workloads:
                wall, sampled, turns = run_agentrl(name)
                bare_s, bare_ids = run_vllm(turns)
                print(
                    f"  {name} round {round_}: agentrl {wall:.2f} s ({sampled} ids, "
                    f"{len(turns)} turns), vllm {bare_s:.2f} s ({bare_ids} ids)",
                    flush=True,
                )
                if round_ == 0:
                    continue
                seconds.setdefault((name, "agentrl"), []).append(wall / sampled)
                seconds.setdefault((name, "vllm"), []).append(bare_s / bare_ids)
                ids[name] = sampled
    finally:
        engine.close()

    print(f"{'workload':<10}{'side':<9}{'ids/round':>10}{'tokens/s':>10}")
    total = {"agentrl": 0.0, "vllm": 0.0}
    for (name, side), per_id in seconds.items():
        per = statistics.median(per_id)
        total[side] += per * ids[name]
        print(f"{name:<10}{side:<9}{ids[name]:>10}{1 / per:>10.1f}")
    for name in workloads:
        ratio = statistics.median(seconds[(name, "vllm")]) / statistics.median(
            seconds[(name, "agentrl")]
        )
        print(f"{name}: agentrl / vllm tokens/s {ratio:.2f}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"ratio rollout_vs_vllm {total['vllm'] / total['agentrl']:.2f} (goal >= 0.9)")


if __name__ == "__main__":
    main()
