"""The Docker sandbox under the load of training: exec latency idle against during a run.

Runs `agentrl train` (the `tiny` model, one torch thread) on `SandboxGrader`, an env that
grades every turn's answer with a small program in the Docker sandbox (as `code` and
`tool-python` do), with `--episodes` episodes at once. Each call's start and end are logged.
Before the run, the same calls are timed with as many concurrent callers and no training.

Prints:
- exec latency p50/p95 (ms), idle against during training;
- the sandbox's share of the training wall time (some call in flight) and of the rollout;
- the `env_error` rate of the run's episodes;
- the labelled containers left after the run (must be 0).

Needs a Docker daemon and the sandbox image (`agentrl sandbox build --offline`).
Usage: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sandbox_under_training.py [--steps 10]
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
from agentrl.sandbox import SandboxConfig, SandboxError

GRADER = "import sys; print(sum(c.isalpha() for c in sys.stdin.read()))"
"""The program each turn runs: counts the letters of the answer."""
_LOG_LOCK = threading.Lock()


def sandbox_config(pool_size: int) -> SandboxConfig:
    """The sandbox of the benchmark env (small limits, `pool_size` warm containers)."""
    return SandboxConfig(pool_size=pool_size, memory_mb=128, work_mb=16, tmp_mb=16)


def timed_call(sandbox: Any, stdin: str, log: str | None = None) -> Any:
    """Run `GRADER` on `stdin`; append its start, end and error to `log` (JSON lines)."""
    start = time.time()
    result = sandbox.run(GRADER, stdin=stdin)
    end = time.time()
    if log:
        line = json.dumps({"start": start, "end": end, "error": result.sandbox_error})
        with _LOG_LOCK, open(log, "a") as f:
            f.write(line + "\n")
    return result


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
        result = timed_call(shared_sandbox(sandbox_config(self.pool_size)), action, self.log)
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


def idle_latencies(callers: int, pool_size: int, calls: int) -> list[float]:
    """`calls` grading calls from `callers` concurrent callers, nothing else running."""
    from agentrl.sandbox import DockerSandbox

    sandbox = DockerSandbox(sandbox_config(pool_size))
    try:
        for _ in range(pool_size):
            sandbox.run(GRADER, stdin="warm up")

        def one(_: int) -> float:
            start = time.perf_counter()
            result = timed_call(sandbox, "a few words here")
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
    args = parser.parse_args()
    assert args.episodes % args.group_size == 0, "--episodes must be a multiple of --group-size"

    alone = idle_latencies(1, args.pool, calls=100)
    idle = idle_latencies(args.episodes, args.pool, calls=20 * args.episodes)
    work = Path(tempfile.mkdtemp(prefix="sandbox-bench-"))
    log, run_dir = work / "calls.jsonl", work / "run"
    here = Path(__file__).resolve().parent
    argv = [sys.executable, "-m", "agentrl.cli", "train", "--model", "tiny"]
    argv += ["--env", "sandbox_under_training:SandboxGrader", "--steps", str(args.steps)]
    argv += ["--run-dir", str(run_dir)]
    for key, value in {
        "env.kwargs.log": log,
        "env.kwargs.pool_size": args.pool,
        "trainer.num_groups": args.episodes // args.group_size,
        "rollout.group_size": args.group_size,
        "rollout.num_env_workers": args.episodes,
        "rollout.sampling.max_new_tokens": 16,
        "checkpoint.every": 10_000,
        "logging.progress": "false",
    }.items():
        argv += ["--set", f"{key}={value}"]
    env = {**os.environ, "PYTHONPATH": f"{here}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.setdefault("OMP_NUM_THREADS", "1")
    started = time.time()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    _, err = proc.communicate()
    ended = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"the training run failed:\n{err[-3000:]}")
    calls = [json.loads(line) for line in log.read_text().splitlines()]
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
    during = [c["end"] - c["start"] for c in calls]
    p50_i, p95_i = percentiles(idle)
    p50_t, p95_t = percentiles(during)
    first = min(c["start"] for c in calls)  # the first step's rollout: the model is loaded
    share = busy_share(calls, first, ended)
    print(
        f"sandbox under training: {args.episodes} episodes at once ({args.episodes // args.group_size} "
        f"groups of {args.group_size}), {args.pool} warm containers, {args.steps} steps of tiny "
        f"(hf engine), {len(steps)} steps in {train_s:.0f} s"
    )
    print(f"{'exec latency (ms)':<34}{'p50':>8}{'p95':>8}{'calls':>8}")
    print(
        f"{'  idle, ' + str(args.episodes) + ' callers at once':<34}{p50_i:>8.1f}{p95_i:>8.1f}{len(idle):>8}"
    )
    print(
        f"{'  idle, one caller':<34}{percentiles(alone)[0]:>8.1f}{percentiles(alone)[1]:>8.1f}{len(alone):>8}"
    )
    print(f"{'  during training':<34}{p50_t:>8.1f}{p95_t:>8.1f}{len(during):>8}")
    print(f"p50 during training / idle: {p50_t / p50_i:.2f}x, p95: {p95_t / p95_i:.2f}x")
    print(
        f"sandbox busy (a call in flight): {100 * share:.1f}% of the run's wall time from its "
        f"first call ({ended - first:.0f} s of {ended - started:.0f}); rollout: "
        f"{100 * rollout_s / train_s:.1f}% of step time"
    )
    print(f"env_error rate: {errors:.4f} (mean over steps)")
    print(f"sandbox containers left after the run: {len(left)}")


if __name__ == "__main__":
    main()
