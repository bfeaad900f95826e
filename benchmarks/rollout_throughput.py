"""Rollout throughput: loop overhead vs the bare engine, and async vs lockstep episodes.

(a) overhead: agentrl's rollout wall time / the bare engine's time to generate the same
    requests (same prompts, same number of sampled ids: `ignore_eos`), for each engine on the
    same tiny model. Goal <= 1.10.
(b) async vs lockstep: agentrl's per-episode tasks against a lockstep rollout (all episodes
    advance turn by turn together, as RAGEN does), with env step latency drawn from
    0-200 ms. Goal >= 2x. The lockstep baseline steps envs in parallel threads (the stronger
    baseline) and, as RAGEN does, one after another.

(b) runs with a scripted engine (fixed time per call) and with a real engine on the tiny
    model (`--lockstep-engines scripted,hf[,vllm]`), so generation time per turn is real.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rollout_throughput.py --engines hf
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rollout_throughput.py --engines hf,vllm
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rollout_throughput.py --engines '' \
        --lockstep-engines scripted,hf,vllm
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")


class RecordingEngine:
    """Wraps an engine and keeps every request it was given."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.requests: list[Any] = []

    @property
    def weight_version(self) -> int:
        return self.inner.weight_version

    async def generate(self, requests: Any) -> Any:
        self.requests.extend(requests)
        return await self.inner.generate(requests)

    def update_weights(self, state_dict: Any, version: int) -> None:
        self.inner.update_weights(state_dict, version)

    def close(self) -> None:
        self.inner.close()


def build(engine: str, model: str) -> Any:
    if engine == "vllm":
        from agentrl.rollout.vllm_engine import VLLMEngine

        return VLLMEngine(model)
    from agentrl.rollout.hf_engine import HFEngine

    return HFEngine(model, num_threads=1)


def overhead(
    engine_name: str, model: str, episodes: int, turns: int, new_tokens: int, repeats: int
) -> None:
    """(a): rollout time / bare-engine time for the same requests, `repeats` interleaved runs.

    Both sides sample exactly `new_tokens` ids per request (`ignore_eos`, fixed seed), on the
    same warm engine with the same batch size limit; the bare side gets each turn's requests
    (recorded from the rollout) as one `generate` call, so it always has the whole batch at
    once and no env or bridge work. Within each pair the side that goes first alternates.
    The rollouts share one `ChatBridge`, as a trainer's steps do: its template probe runs once
    (its first-prompt cache then also hits on the repeated seeds, about 0.1 ms per episode).
    """
    import statistics

    from agentrl.rollout.config import RolloutConfig
    from agentrl.rollout.engine import SamplingParams
    from agentrl.rollout.loop import rollout
    from agentrl.rollout.models import load_tokenizer
    from agentrl.trajectory.bridge import ChatBridge
    from agentrl.trajectory.testing import ScriptedEnv

    tok = load_tokenizer(model)
    bridge = ChatBridge(tok)  # one per run, as the trainer keeps (`Trainer.bridge`)
    engine = RecordingEngine(build(engine_name, model))
    env = functools.partial(ScriptedEnv, min_steps=turns, max_steps=turns)
    sampling = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True, seed=1)
    cfg = RolloutConfig(max_turns=turns, max_context_tokens=4096)
    seeds = list(range(episodes))

    def run_rollout() -> tuple[float, list[list[Any]]]:
        engine.requests.clear()
        t0 = time.perf_counter()
        result = rollout(
            engine, env, tok, seeds, group_size=1, cfg=cfg, sampling=sampling, bridge=bridge
        )
        wall = time.perf_counter() - t0
        assert result.metrics["rollout/num_sampled_tokens"] == episodes * turns * new_tokens
        by_turn: dict[int, list[Any]] = {}
        seen: dict[str, int] = {}
        for req in engine.requests:
            k = seen.get(req.session_id, 0)
            seen[req.session_id] = k + 1
            by_turn.setdefault(k, []).append(replace(req, session_id=None))
        return wall, [by_turn[k] for k in sorted(by_turn)]

    async def bare(turn_requests: list[list[Any]]) -> float:
        start = time.perf_counter()
        for requests in turn_requests:
            completions = await engine.inner.generate(requests)
            assert sum(len(c.token_ids) for c in completions) == len(requests) * new_tokens
        return time.perf_counter() - start

    ours_s: list[float] = []
    bare_s: list[float] = []
    try:
        _, turn_requests = run_rollout()  # warm-up: first calls, allocator, caches
        asyncio.run(bare(turn_requests))
        for i in range(repeats):
            # The pair's sides take turns going first, so neither always runs right after
            # the other (warmer caches, a load spike). The bare side replays the requests of
            # the latest rollout: when it goes first, the previous rollout's, which are the
            # same work (seeded envs and sampling, `new_tokens` ids per request).
            if i % 2:
                bare_s.append(asyncio.run(bare(turn_requests)))
            wall, turn_requests = run_rollout()
            ours_s.append(wall)
            if not i % 2:
                bare_s.append(asyncio.run(bare(turn_requests)))
    finally:
        engine.close()
    ratios = [o / b for o, b in zip(ours_s, bare_s, strict=True)]
    print(
        f"(a) {engine_name}: {episodes} episodes x {turns} turns x {new_tokens} ids "
        f"({episodes * turns * new_tokens} ids), {repeats} runs: "
        f"rollout median {statistics.median(ours_s):.2f} s, "
        f"bare engine median {statistics.median(bare_s):.2f} s, "
        f"ratio median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}; goal <= 1.10)\n"
        f"    ratio per run: {' '.join(f'{r:.3f}' for r in ratios)}"
    )


def async_vs_lockstep(
    engine_name: str, model: str, episodes: int, turns: int, new_tokens: int, gen_delay_s: float
) -> None:
    """(b): per-episode tasks vs lockstep turns, env step latency uniform in 0-200 ms.

    `engine_name` "scripted" is a fake engine that takes `gen_delay_s` per call whatever
    the batch; "hf" / "vllm" generate for real on `model` (each request samples exactly
    `new_tokens` ids, so every mode generates the same tokens' worth of work). Episode
    lengths come from the env's seed, so all modes run the same turns.
    """
    from agentrl.rollout.config import RolloutConfig
    from agentrl.rollout.engine import GenerationRequest, SamplingParams
    from agentrl.rollout.loop import rollout
    from agentrl.rollout.testing import ScriptedEngine
    from agentrl.trajectory.bridge import ChatBridge, EpisodeTokens
    from agentrl.trajectory.testing import ScriptedEnv, build_tokenizer, plain_vocab_ids

    if engine_name == "scripted":
        tok = build_tokenizer("chatml")

        def new_engine() -> Any:
            return ScriptedEngine(plain_vocab_ids(tok), seed=0, p_stop=0.0, delay_s=gen_delay_s)

        what = f"scripted engine, {gen_delay_s * 1000:.0f} ms per generate call"
    else:
        from agentrl.rollout.models import load_tokenizer

        tok = load_tokenizer(model)
        shared = build(engine_name, model)

        def new_engine() -> Any:
            return shared

        what = f"{engine_name} engine on {model}, {new_tokens} ids per turn"
    bridge = ChatBridge(tok)
    env = functools.partial(
        ScriptedEnv, latency_s=(0.0, 0.2), min_steps=turns // 2, max_steps=turns
    )
    sampling = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True, seed=1)
    cfg = RolloutConfig(max_turns=turns, num_env_workers=episodes, max_context_tokens=4096)
    seeds = list(range(episodes))

    def run_async() -> tuple[float, int, float]:
        engine = new_engine()
        t0 = time.perf_counter()
        result = rollout(engine, env, tok, seeds, group_size=1, cfg=cfg, sampling=sampling,
                         bridge=bridge)  # fmt: skip
        wall = time.perf_counter() - t0
        turns_done = sum(t.num_turns for t in result.trajectories)
        return wall, turns_done, result.metrics["rollout/generation_s"] / episodes

    def lockstep(parallel_env: bool) -> tuple[float, int, float]:
        engine = new_engine()
        envs = [env() for _ in range(episodes)]
        pool = ThreadPoolExecutor(episodes)
        start = time.perf_counter()
        obs = [e.reset(seed=i)[0] for i, e in enumerate(envs)]
        records = [
            EpisodeTokens(bridge, e.system_prompt, o) for e, o in zip(envs, obs, strict=True)
        ]
        active = list(range(episodes))
        n = 0
        gen_s = 0.0
        for _ in range(turns):
            if not active:
                break
            reqs = [GenerationRequest(records[i].prompt_ids, sampling, f"0-{i}") for i in active]
            t0 = time.perf_counter()
            comps = asyncio.run(engine.generate(reqs))  # one batch: everyone waits for it
            gen_s += time.perf_counter() - t0
            actions = []
            sampled = {}
            for i, c in zip(active, comps, strict=True):
                records[i].add_completion(c.token_ids, c.logp, 0)
                sampled[i] = c.token_ids
                actions.append(bridge.decode(c.token_ids, skip_special_tokens=True))
            if parallel_env:
                steps = list(
                    pool.map(lambda ia: envs[ia[0]].step(ia[1]), zip(active, actions, strict=True))
                )
            else:
                steps = [envs[i].step(a) for i, a in zip(active, actions, strict=True)]
            n += len(active)
            still = []
            for i, (o, _, term, trunc, _) in zip(active, steps, strict=True):
                if not (term or trunc):
                    ids = records[i].next_ids(o, sampled[i])
                    records[i].add_observation(o, ids, 0)
                    still.append(i)
            active = still
        pool.shutdown()
        return time.perf_counter() - start, n, gen_s

    try:
        if engine_name != "scripted":  # warm the engine (first calls, allocator)
            asyncio.run(shared.generate([GenerationRequest([1, 2, 3], sampling)] * episodes))
        ours_s, turns_done, _ = run_async()
        par_s, par_turns, par_gen = lockstep(parallel_env=True)
        seq_s, seq_turns, _ = lockstep(parallel_env=False)
    finally:
        if engine_name != "scripted":
            shared.close()
    assert par_turns == seq_turns == turns_done, (par_turns, seq_turns, turns_done)
    num_turns = max(1, -(-turns_done // episodes))
    print(
        f"(b) {what}: {episodes} episodes, {turns_done} turns, env step latency U(0, 200 ms)\n"
        f"    lockstep generation per turn (whole batch): {par_gen / num_turns * 1000:.0f} ms\n"
        f"    async per-episode tasks (agentrl)      {ours_s:6.2f} s\n"
        f"    lockstep, env steps in parallel threads {par_s:6.2f} s -> async is "
        f"{par_s / ours_s:.2f}x faster\n"
        f"    lockstep, env steps one after another   {seq_s:6.2f} s -> async is "
        f"{seq_s / ours_s:.2f}x faster (RAGEN-style loop; goal >= 2x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="hf", help="comma list of hf, vllm ('' skips a)")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5, help="(a) runs per engine")
    parser.add_argument("--lockstep-episodes", type=int, default=32)
    parser.add_argument("--lockstep-turns", type=int, default=8)
    parser.add_argument("--gen-delay-ms", type=float, default=20.0, help="(b) scripted engine")
    parser.add_argument(
        "--lockstep-engines",
        default="scripted,hf",
        help="(b): comma list of scripted, hf, vllm ('' skips b)",
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    for name in filter(None, args.lockstep_engines.split(",")):
        async_vs_lockstep(
            name,
            args.model,
            args.lockstep_episodes,
            args.lockstep_turns,
            args.new_tokens,
            args.gen_delay_ms / 1000,
        )
    for name in filter(None, args.engines.split(",")):
        overhead(name, args.model, args.episodes, args.turns, args.new_tokens, args.repeats)


if __name__ == "__main__":
    main()
