"""Peak memory (RSS) of `agentrl train --env sokoban`: its warm start, then RL.

Runs go in fresh processes, as `agentrl train` runs them (the warm start, then RL in the same
process), with the run's defaults (agentrl/train/defaults/cpu-sokoban.yaml). Each reports its
peak RSS (`ru_maxrss`, so the ~0.45 GiB of torch, transformers and the interpreter count):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/memory.py          # ~10 min on 2 cores
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/memory.py --full   # the whole warm start

By default, two runs:
1. the warm start at its full size (all of the default's expert episodes played, written and
   packed), stopped after `--sft-steps` optimizer steps: its memory peaks there, since the
   steps are alike and what the end adds (the final NLL on 512 rows, saving a 5 MB model) is small;
2. a whole run at reduced size: 2,048 expert episodes, then `--rl-steps` RL steps of the
   default recipe with an evaluation (the run's `eval.num_episodes`) at the last one.
The default run's peak is then ESTIMATED as (1) plus what RL added over its warm start in
(2); the output says so. `--full` runs the complete warm start instead of (1). Neither runs
the 200 RL steps: over 7 steps RSS did not grow.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # as `agentrl` sets it

GIB = 1024**3


def _peak_rss() -> int:
    """This process's peak RSS in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _config(overrides: list[str]):
    from agentrl.cli.train import resolve_train_config

    return resolve_train_config(
        config_file=None, overrides=overrides, preset=None, flags={"env.name": "sokoban"}
    )


class _Stop(Exception):
    pass


def run_phase(run_dir: Path, episodes: int, steps: int, sft_steps: int) -> dict[str, float]:
    """The default run in this process, as `agentrl train --env sokoban` runs it: the warm
    start on `episodes` expert episodes (stopped after `sft_steps` steps if > 0, with no RL
    then), then `steps` RL steps, evaluating and checkpointing at the last one."""
    from agentrl.cli.run import run_training
    from agentrl.cli.warm_start import WARM_START_DIR, sft_config, warm_start
    from agentrl.sft.train import run_sft

    cfg = _config(
        [
            f"warm_start.num_episodes={episodes}",
            f"trainer.num_steps={steps}",
            f"eval.every={steps}",
            f"checkpoint.every={steps}",
            "logging.progress=false",
        ]
    )
    start = time.perf_counter()
    if sft_steps:

        def stop(step: int, total: int, metrics: dict[str, float]) -> None:
            if step == sft_steps:
                raise _Stop

        try:
            run_sft(sft_config(cfg), run_dir / WARM_START_DIR, on_step=stop)
        except _Stop:
            pass
        return {"warm_start_peak_rss": _peak_rss(), "seconds": time.perf_counter() - start}
    warm_start(cfg, run_dir, progress=False)  # run_training reuses it
    warm = {"warm_start_peak_rss": _peak_rss(), "warm_start_s": time.perf_counter() - start}
    run_training(cfg, run_dir)
    return {**warm, "seconds": time.perf_counter() - start}


def _child(run_dir: Path, episodes: int, steps: int, sft_steps: int = 0) -> dict[str, float]:
    """One run in a fresh interpreter; its numbers."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(run_dir), "--episodes", str(episodes)]
        + ["--rl-steps", str(steps), "--sft-steps", str(sft_steps)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="the complete warm start")
    parser.add_argument("--rl-steps", type=int, default=2)
    parser.add_argument("--sft-steps", type=int, default=20)
    parser.add_argument("--small", type=int, default=2048, help="episodes of the whole run")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--episodes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # one run, then its numbers as the last stdout line
        result = run_phase(args.child, args.episodes, args.rl_steps, args.sft_steps)
        print(json.dumps({**result, "peak_rss": _peak_rss()}))
        return

    episodes = _config([]).warm_start.num_episodes  # the default run's
    with tempfile.TemporaryDirectory() as tmp:
        if args.full:
            big = _child(Path(tmp) / "full", episodes, args.rl_steps)
            print(
                f"{episodes} expert episodes: warm start peak RSS "
                f"{big['warm_start_peak_rss'] / GIB:.2f} GiB; with {args.rl_steps} RL steps and "
                f"an eval: {big['peak_rss'] / GIB:.2f} GiB ({big['seconds']:.0f} s)"
            )
            return
        big = _child(Path(tmp) / "big", episodes, 1, args.sft_steps)  # no RL
        print(
            f"warm start, {episodes} expert episodes, stopped after {args.sft_steps} SFT "
            f"steps: peak RSS {big['peak_rss'] / GIB:.2f} GiB ({big['seconds']:.0f} s)"
        )
        small = _child(Path(tmp) / "small", args.small, args.rl_steps)
        rl_extra = small["peak_rss"] - small["warm_start_peak_rss"]
        print(
            f"whole run, {args.small} expert episodes: warm start peak RSS "
            f"{small['warm_start_peak_rss'] / GIB:.2f} GiB, with {args.rl_steps} RL steps and an "
            f"eval {small['peak_rss'] / GIB:.2f} GiB (RL adds {rl_extra / GIB:.2f} GiB)"
        )
        print(
            f"default run: about {(big['peak_rss'] + max(rl_extra, 0)) / GIB:.2f} GiB, "
            "ESTIMATED as the full-size warm start's peak plus what RL added above"
        )


if __name__ == "__main__":
    main()
