"""The Docker sandbox under the load of training: exec latency idle against during a run.

Runs `agentrl train` with `--episodes` episodes at once and logs each sandbox call's start
and end. Before the run, the same calls are timed with as many concurrent callers and no
training. Two runs to choose from:
- by default, the `tiny` model (one torch thread) on `SandboxGrader`, an env that grades
  every turn's answer with a small program in the sandbox (a few minutes);
- with `--config` (e.g. `examples/tool-python.yaml`) and `--model` (its warm start or a
  checkpoint), that recipe's RL on `tool-python`, whose every tool call is timed
  (`TimedPythonTool`): the model's own programs, the recipe's engine and batch.

Prints:
- exec latency p50/p95 (ms), idle against during training;
- the sandbox's share of the training wall time (some call in flight) and of the rollout;
- the `env_error` rate of the run's episodes;
- the labelled containers left after the run (must be 0).

Needs a Docker daemon and the sandbox image (`agentrl sandbox build --offline`).
Usage: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sandbox_under_training.py [--steps 10]
       .venv/bin/python benchmarks/sandbox_under_training.py --config examples/tool-python.yaml \
           --model results/smollm2-rl/tool-python/warm_start --steps 10
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agentrl.envs.base import TokenEnv
from agentrl.envs.tool.env import PythonToolEnv
from agentrl.sandbox import SandboxConfig, SandboxError

GRADER = "import sys; print(sum(c.isalpha() for c in sys.stdin.read()))"
"""The program each turn runs: counts the letters of the answer."""
_LOG_LOCK = threading.Lock()


def sandbox_config(pool_size: int) -> SandboxConfig:
    """The sandbox of the benchmark env (small limits, `pool_size` warm containers)."""
    return SandboxConfig(pool_size=pool_size, memory_mb=128, work_mb=16, tmp_mb=16)


PROGRAM = "print(sum(i for i in range(517, 6020 + 1) if i % 7 == 0))"
"""The idle calls of `--config`: a program like the ones tool-python's solver writes."""


def timed_call(sandbox: Any, code: str, log: str | None = None, **kwargs: Any) -> Any:
    """Run `code` (`kwargs`: `stdin`, `timeout`); append its start, end and error to `log`
    (JSON lines)."""
    start = time.time()
    result = sandbox.run(code, **kwargs)
    end = time.time()
    if log:
        line = json.dumps({"start": start, "end": end, "error": result.sandbox_error})
        with _LOG_LOCK, open(log, "a") as f:
            f.write(line + "\n")
    return result


class _TimedSandbox:
    """A sandbox whose every `run` is logged by `timed_call`."""

    def __init__(self, sandbox: Any, log: str) -> None:
        self.sandbox, self.log = sandbox, log

    def run(self, code: str, **kwargs: Any) -> Any:
        return timed_call(self.sandbox, code, self.log, **kwargs)


class TimedPythonTool(PythonToolEnv):
    """`tool-python` whose every python call is logged (`--config` runs)."""

    def __init__(self, log: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.log = log

    @property
    def sandbox(self) -> Any:
        return _TimedSandbox(super().sandbox, self.log)


class SandboxGrader(TokenEnv):
    """Three turns; each answer is graded in the Docker sandbox (reward: its letters / 20)."""

    system_prompt = "Answer with many letters."
    max_turns = 3

    def __init__(self, log: str = "", pool_size: int = 8) -> None:
        self.log, self.pool_size = log, pool_size

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.turn = 0
        return "Write a word.", {}

    def step(self, action: str):
        from agentrl.envs.code.env import shared_sandbox

        self.require_reset()
        self.turn += 1
        sandbox = shared_sandbox(sandbox_config(self.pool_size))
        result = timed_call(sandbox, GRADER, self.log, stdin=action)
        if result.sandbox_error is not None:
            raise SandboxError(result.sandbox_error)
        reward = min(int(result.stdout or 0), 20) / 20
        done = self.turn >= self.max_turns
        return "Again.", reward, done, False, {"success": reward > 0.5} if done else {}


def percentiles(seconds: list[float]) -> tuple[float, float]:
    """p50 and p95 in milliseconds."""
    return statistics.median(seconds) * 1000, statistics.quantiles(seconds, n=20)[18] * 1000


def busy_share(calls: list[dict[str, float]], start: float, end: float) -> float:
    """The share of [start, end] during which at least one call was in flight.

    >>> busy_share([{"start": 0, "end": 2}, {"start": 1, "end": 3}, {"start": 5, "end": 6}], 0, 10)
    0.4
    """
    busy, reach = 0.0, start
    for call in sorted(calls, key=lambda c: c["start"]):
        lo, hi = max(call["start"], reach), min(call["end"], end)
        if hi > lo:
            busy += hi - lo
        reach = max(reach, call["end"])
    return busy / (end - start)


def idle_latencies(
    callers: int, config: SandboxConfig, calls: int, code: str = GRADER, stdin: str = ""
) -> list[float]:
    """`calls` runs of `code` from `callers` concurrent callers, nothing else running."""
    from agentrl.sandbox import DockerSandbox

    sandbox = DockerSandbox(config)
    try:
        for _ in range(config.pool_size):
            sandbox.run(code, stdin="warm up")

        def one(_: int) -> float:
            start = time.perf_counter()
            result = timed_call(sandbox, code, stdin=stdin)
            assert result.ok, result
            return time.perf_counter() - start

        with ThreadPoolExecutor(callers) as pool:
            return list(pool.map(one, range(calls)))
    finally:
        sandbox.close()


def main() -> None:
    """Time idle calls, run the training, print the table."""
    from agentrl.sandbox.docker import connect

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=10, help="training steps")
    parser.add_argument("--episodes", type=int, default=32, help="episodes at once (a step)")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--pool", type=int, default=8, help="warm containers")
    parser.add_argument("--config", help="a tool-python recipe to run instead of tiny's")
    parser.add_argument("--model", help="with --config: the model it starts from")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sandbox-bench-"))
    log, run_dir = work / "calls.jsonl", work / "run"
    argv = [sys.executable, "-m", "agentrl.cli", "train", "--run-dir", str(run_dir)]
    argv += ["--steps", str(args.steps)]
    settings: dict[str, Any] = {"env.kwargs.log": log, "checkpoint.every": 10_000}
    settings["logging.progress"] = "false"
    if args.config:
        if not args.model:
            raise SystemExit("--config needs --model: the warm start or checkpoint to train on")
        from agentrl.train.config import load_config

        cfg = load_config(args.config)
        if cfg.env.name != "tool-python":
            raise SystemExit(f"--config {args.config}: env {cfg.env.name}, not tool-python")
        config = SandboxConfig(**cfg.env.kwargs.get("sandbox_config", {}))
        episodes = cfg.trainer.num_groups * cfg.rollout.group_size
        what = f"{args.config} from {args.model} ({cfg.engine.name} engine)"
        argv += ["-c", args.config, "--model", args.model, "--no-warm-start"]
        argv += ["--env", "sandbox_under_training:TimedPythonTool"]
        code, stdin = PROGRAM, ""
    else:
        if args.episodes % args.group_size:
            raise SystemExit("--episodes must be a multiple of --group-size")
        config, episodes = sandbox_config(args.pool), args.episodes
        what = "tiny (hf engine)"
        argv += ["--model", "tiny", "--env", "sandbox_under_training:SandboxGrader"]
        settings |= {
            "env.kwargs.pool_size": args.pool,
            "trainer.num_groups": episodes // args.group_size,
            "rollout.group_size": args.group_size,
            "rollout.num_env_workers": episodes,
            "rollout.sampling.max_new_tokens": 16,
        }
        code, stdin = GRADER, "a few words here"
    for key, value in settings.items():
        argv += ["--set", f"{key}={value}"]

    alone = idle_latencies(1, config, calls=100, code=code, stdin=stdin)
    idle = idle_latencies(episodes, config, calls=20 * episodes, code=code, stdin=stdin)
    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": f"{here}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    if not args.config:
        env.setdefault("OMP_NUM_THREADS", "1")
    started = time.time()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    _, err = proc.communicate()
    ended = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"the training run failed:\n{err[-3000:]}")
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    owners = {f"{socket.gethostname()}:{pid}" for pid in (proc.pid, os.getpid())}
    left = [  # the idle pool and the run have closed: none of their containers may remain
        c["Id"][:12]
        for c in connect().api.containers(all=True, filters={"label": "agentrl.sandbox=1"})
        if (c.get("Labels") or {}).get("agentrl.sandbox.owner") in owners
    ]
    train_s = sum(m["time/step"] for m in steps)
    rollout_s = sum(m["time/rollout"] for m in steps)
    errors = sum(m.get("rollout/env_error_rate", 0.0) for m in steps) / len(steps)
    groups = f"{episodes} episodes at once"
    if not args.config:
        groups += f" ({episodes // args.group_size} groups of {args.group_size})"
    print(
        f"sandbox under training: {groups}, {config.pool_size} warm containers, "
        f"{args.steps} steps of {what}, {len(steps)} steps in {train_s:.0f} s"
    )
    p50_i, p95_i = percentiles(idle)
    print(f"{'exec latency (ms)':<34}{'p50':>8}{'p95':>8}{'calls':>8}")
    print(
        f"{'  idle, ' + str(episodes) + ' callers at once':<34}{p50_i:>8.1f}{p95_i:>8.1f}{len(idle):>8}"
    )
    p50_a, p95_a = percentiles(alone)
    print(f"{'  idle, one caller':<34}{p50_a:>8.1f}{p95_a:>8.1f}{len(alone):>8}")
    if len(calls) >= 2:
        p50_t, p95_t = percentiles([c["end"] - c["start"] for c in calls])
        print(f"{'  during training':<34}{p50_t:>8.1f}{p95_t:>8.1f}{len(calls):>8}")
        print(f"p50 during training / idle: {p50_t / p50_i:.2f}x, p95: {p95_t / p95_i:.2f}x")
        first = min(c["start"] for c in calls)  # the first step's rollout: the model is loaded
        print(
            f"sandbox busy (a call in flight): {100 * busy_share(calls, first, ended):.1f}% of "
            f"the run's wall time from its first call ({ended - first:.0f} s of "
            f"{ended - started:.0f}); rollout: {100 * rollout_s / train_s:.1f}% of step time"
        )
    else:
        print(
            f"  during training: {len(calls)} call(s), too few to time (the model called no tool)"
        )
    rates = [m["episode/tool_call_rate"] for m in steps if "episode/tool_call_rate" in m]
    if rates:
        ok = [m[k] for m in steps if isinstance(m.get(k := "episode/tool_ok_rate"), float)]
        ok_text = f", {100 * statistics.mean(ok):.1f}% of the calls ran without error" if ok else ""
        print(f"tool calls: in {100 * statistics.mean(rates):.1f}% of episodes{ok_text}")
    print(f"env_error rate: {errors:.4f} (mean over steps)")
    print(f"sandbox containers left after the run: {len(left)}")


if __name__ == "__main__":
    main()
