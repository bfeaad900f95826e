"""Does the policy learn Sokoban? Presets side by side, same budget, several seeds.

For each preset (`starpo-s`, `starpo` with a PPO critic, `grpo`) and each seed, RL-train the
starting policy on `sokoban` (6x6, 1 box, 10 actions) with `agentrl train --env sokoban`'s CPU
defaults (`agentrl/train/defaults/cpu-sokoban.yaml`: one action per turn, up to 10 turns) for
the same budget (steps and/or wall-clock minutes), then evaluate on the fixed validation
protocol (RAGEN's):
`--eval-episodes` validation seeds from 1,000,000 (disjoint from training seeds), temperature
0.5, success = solved within the action budget. Beside every result: the floor (a uniformly
random policy, 5 random actions per turn) and the ceiling (the exact solver) on the same seeds.

The starting policy is `--init` (a model folder, e.g. from `agentrl sft`), or `--sft` runs
the defaults' warm start once (SFT on the solver's episodes, as `agentrl train` does before
RL) and every run starts from it, or the plain `--model` (RL only).

Writes into `--out` (default results/): `learn_sokoban.md` (the table), `learn_sokoban.json`
(every number), `learn_sokoban_curves.png` (success curves of every run, `agentrl plot`'s
function) and `runs/` (each run's metrics.jsonl, config.yaml; checkpoints are removed).

    # smoke run (about 2 minutes on 2 cores)
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/learn_sokoban.py --quick --out /tmp/ls
    # the default run in results/sokoban-default/ (its learn_sokoban.md has the command)
    .venv/bin/python benchmarks/learn_sokoban.py --sft --presets starpo-s --seeds 0 --total-minutes 60
    # on a bigger machine: the 9 runs at once, one torch thread each (a GPU is used if present;
    # results/compare-presets/)
    python benchmarks/learn_sokoban.py --init MODEL --parallel 9 --threads 1 --minutes 6
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ENV = "sokoban"
SEED_OFFSET = 1_000_000


def floor_and_ceiling(num_episodes: int) -> dict[str, float]:
    """Success of a uniformly random policy and of the solver on the validation seeds."""
    import numpy as np

    from agentrl.envs import make
    from agentrl.envs.sokoban import ACTIONS
    from agentrl.sft.data import policy_success_rate
    from agentrl.sft.expert import format_actions, solver_expert

    factory = functools.partial(make, ENV)
    seeds = range(SEED_OFFSET, SEED_OFFSET + num_episodes)
    rng = np.random.default_rng(0)

    def random_policy(env: Any) -> str:
        picks = rng.integers(len(ACTIONS), size=env.max_actions_per_turn)
        return format_actions([ACTIONS[int(i)] for i in picks])

    return {
        "random": policy_success_rate(factory, random_policy, seeds),
        "solver": policy_success_rate(factory, solver_expert, seeds),
    }


def _gpu_name() -> str | None:
    """The CUDA device's name, when there is one."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def base_config(preset: str | None, overrides: list[str]) -> Any:
    """`agentrl train --env sokoban [--preset P] [--set ...]`'s resolved config."""
    from agentrl.train._cli import resolve_train_config

    return resolve_train_config(
        config_file=None, overrides=overrides, preset=preset, flags={"env.name": ENV}
    )


def validation_success(model: str, num_episodes: int, max_new_tokens: int, cfg: Any) -> float:
    """The validation protocol: one episode per validation seed at temperature 0.5."""
    from agentrl.sft.train import evaluate_model

    result = evaluate_model(
        model,
        ENV,
        cfg.env.kwargs,
        history_turns=cfg.rollout.history_turns,
        num_episodes=num_episodes,
        temperature=0.5,
        max_new_tokens=max_new_tokens,
        seed_offset=SEED_OFFSET,
    )
    return result["success_rate"]


def warm_start(args: argparse.Namespace, out: Path) -> tuple[str, float]:
    """Run the defaults' warm start (SFT on the solver) into `out`; (model folder, seconds)."""
    from agentrl.sft.train import TRAJECTORIES_FILE
    from agentrl.train.warm_start import warm_start as run_warm_start

    start = time.perf_counter()
    cfg = base_config(None, [f"model.name={args.model}", *args.set])
    cfg.logging.progress = False
    folder = run_warm_start(cfg, out)
    wall_s = time.perf_counter() - start
    (folder / TRAJECTORIES_FILE).unlink(missing_ok=True)  # keep the results folder small
    result = json.loads((folder / "sft_result.json").read_text())
    print(
        f"warm start: {result['num_trajectories']} expert episodes, NLL "
        f"{result['initial_nll']:.3f} -> {result['final_nll']:.3f} in {wall_s:.0f} s",
        flush=True,
    )
    return str(folder), wall_s


def train_run(
    preset: str, seed: int, init: str, run_dir: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """RL from `init` with `preset` for the budget; returns the run's summary."""
    from agentrl.config import dump_config
    from agentrl.train.metrics import read_metrics
    from agentrl.train.trainer import Trainer

    overrides = [
        f"model.name={init}",
        "warm_start.expert=null",  # `init` is the starting policy
        f"seed={seed}",
        f"trainer.num_steps={args.steps}",
        f"eval.every={args.eval_every}",
        f"eval.num_episodes={args.curve_episodes}",
        "logging.progress=false",
        "logging.tensorboard=false",
        "logging.save_trajectories=0",
        "checkpoint.every=0",
        "checkpoint.save_optimizer=false",
        *args.set,
    ]
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    cfg = base_config(preset, overrides)
    (run_dir / "config.yaml").write_text(dump_config(cfg))
    start = time.perf_counter()
    trainer = Trainer(cfg, run_dir)
    try:
        while trainer.state.step < cfg.trainer.num_steps:
            if args.minutes and time.perf_counter() - start > 60 * args.minutes:
                break
            metrics = trainer.train_step()
            print(
                f"  {preset} seed {seed} step {trainer.state.step}: success "
                f"{metrics.get('success_rate', float('nan')):.2f} reward "
                f"{metrics.get('reward/mean', float('nan')):.2f} ({metrics['time/step']:.1f} s)",
                flush=True,
            )
        trainer.save_checkpoint()
    finally:
        trainer.close()
    wall_s = time.perf_counter() - start
    from agentrl.train.checkpoint import model_dir

    final = validation_success(
        str(model_dir(run_dir)), args.eval_episodes, args.max_new_tokens, cfg
    )
    records = read_metrics(run_dir)
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # keep results/ small
    return {
        "preset": preset,
        "seed": seed,
        "steps": trainer.state.step,
        "wall_s": wall_s,
        "final_success": final,
        "collapse_warning": any(r.get("collapse_warning", 0) for r in records),
        "train_success_last": records[-1].get("success_rate") if records else None,
    }


def _train_job(job: tuple[str, int, Path], init: str, args: argparse.Namespace) -> dict[str, Any]:
    """One run in a worker process (its own torch threads)."""
    import torch

    torch.set_num_threads(args.threads)
    preset, seed, run_dir = job
    return train_run(preset, seed, init, run_dir, args)


def run_all(
    jobs: list[tuple[str, int, Path]], init: str, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Every (preset, seed) run: one after another, or `--parallel` at once (each in its own
    process with `--threads` torch threads; for machines with more cores, or a GPU)."""
    if args.parallel <= 1:
        return [train_run(preset, seed, init, run_dir, args) for preset, seed, run_dir in jobs]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.parallel, mp_context=ctx) as pool:
        futures = [pool.submit(_train_job, job, init, args) for job in jobs]
        return [f.result() for f in futures]


def write_table(summary: dict[str, Any], out: Path) -> Path:
    """The Markdown table of the comparison."""
    fc = summary["floor_ceiling"]
    n = summary["eval_episodes"]
    lines = [
        "# Sokoban 6x6 / 1 box: StarPO-S vs StarPO (PPO critic) vs GRPO",
        "",
        f"Validation: {n} fixed seeds from {SEED_OFFSET}, temperature 0.5, success = solved "
        "within 10 actions. Floor (uniform random policy): "
        f"**{fc['random']:.1%}**; ceiling (exact solver): **{fc['solver']:.1%}**.",
        f"Starting policy `{summary['init_name']}`: **{summary['start_success']:.1%}**"
        + (
            f" (warm start: {summary['sft_wall_s'] / 60:.1f} min). "
            if summary["sft_wall_s"]
            else ". "
        )
        + f"RL budget per run: {summary['budget']}. Machine: {summary['machine']}.",
        "",
        "| preset | seeds | final success (mean ± sd) | per seed | gain over start "
        "| wall time / run | collapse warning |",
        "|---|---|---|---|---|---|---|",
    ]
    for preset, runs in summary["by_preset"].items():
        finals = [r["final_success"] for r in runs]
        sd = statistics.stdev(finals) if len(finals) > 1 else 0.0
        mean = statistics.mean(finals)
        walls = statistics.mean(r["wall_s"] for r in runs)
        fired = sum(r["collapse_warning"] for r in runs)
        lines.append(
            f"| {preset} | {len(runs)} | {mean:.1%} ± {sd:.1%} | "
            f"{', '.join(f'{f:.1%}' for f in finals)} | {mean - summary['start_success']:+.1%} | "
            f"{walls / 60:.1f} min | {fired}/{len(runs)} runs |"
        )
    lines += [
        "",
        f"Curves: `{summary['curves']}` (training success per step and periodic validation on "
        f"{summary['curve_episodes']} seeds, one line per run).",
        "",
        f"Command: `{summary['command']}`",
        "",
    ]
    path = out / "learn_sokoban.md"
    path.write_text("\n".join(lines))
    return path


def main() -> None:
    """Parse flags, run the comparison, write the table, JSON and curves."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", default="starpo-s,starpo,grpo", help="Comma-separated presets.")
    p.add_argument("--seeds", default="0,1,2", help="Comma-separated run seeds.")
    p.add_argument("--steps", type=int, default=200, help="RL steps per run (the budget).")
    p.add_argument("--minutes", type=float, default=0.0, help="Also stop a run after this.")
    p.add_argument(
        "--total-minutes",
        type=float,
        default=0.0,
        help="Budget of warm start + RL: each run's RL stops at this minus the warm start.",
    )
    p.add_argument("--model", default="tiny", help="Model to start from (with --sft: to SFT).")
    p.add_argument("--init", default=None, help="Start from this model folder (e.g. SFT output).")
    p.add_argument("--sft", action="store_true", help="Run the defaults' warm start first.")
    p.add_argument("--threads", type=int, default=2, help="Torch threads (the 2 CPU cores).")
    p.add_argument("--parallel", type=int, default=1, help="Runs at once, each in its own process.")
    p.add_argument("--eval-episodes", type=int, default=256, help="Final validation episodes.")
    p.add_argument("--eval-every", type=int, default=10, help="Validation curve interval.")
    p.add_argument("--curve-episodes", type=int, default=64, help="Episodes per curve point.")
    p.add_argument("--max-new-tokens", type=int, default=24, help="Ids per validation turn.")
    p.add_argument("--set", action="append", default=[], help="Train config override k=v.")
    p.add_argument("--quick", action="store_true", help="Smoke run: tiny budget, 1 seed.")
    p.add_argument("--out", type=Path, default=ROOT / "results", help="Results folder.")
    args = p.parse_args()
    if args.quick:
        args.seeds, args.steps, args.eval_episodes = "0", 2, 16
        args.eval_every, args.curve_episodes = 1, 8
        args.set = ["warm_start.num_episodes=64", *args.set]
    import torch

    torch.set_num_threads(args.threads)
    args.set = [f"trainer.num_threads={args.threads}", *args.set]
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    fc = floor_and_ceiling(args.eval_episodes)
    print(f"floor (random) {fc['random']:.3f}, ceiling (solver) {fc['solver']:.3f}", flush=True)
    init = args.init or args.model
    sft_wall_s = 0.0
    if args.sft and not args.init:
        init, sft_wall_s = warm_start(args, out / "runs")
    if args.total_minutes:
        args.minutes = max(args.total_minutes - sft_wall_s / 60, 0.1)
        print(f"RL budget per run: {args.minutes:.1f} min", flush=True)
    cfg = base_config(None, list(args.set))
    start_success = validation_success(init, args.eval_episodes, args.max_new_tokens, cfg)
    print(f"starting policy {init}: validation success {start_success:.3f}", flush=True)

    jobs = [
        (preset, int(seed), out / "runs" / f"{preset}-s{seed}")
        for preset in args.presets.split(",")
        for seed in args.seeds.split(",")
    ]
    by_preset: dict[str, list[dict[str, Any]]] = {}
    for summary in run_all(jobs, init, args):
        print(f"{summary['preset']} seed {summary['seed']}: {summary}", flush=True)
        by_preset.setdefault(summary["preset"], []).append(summary)
    run_dirs = [run_dir for _, _, run_dir in jobs]

    from agentrl.train.plot import plot_runs

    curves = out / "learn_sokoban_curves.png"
    plot_runs(
        run_dirs,
        curves,
        keys=("success_rate", "eval/success_rate", "reward/in_group_std", "actor/entropy"),
    )
    init_name = f"warm start of {args.model}" if args.sft and not args.init else init
    budget = f"{args.steps} steps" + (f" or {args.minutes:.1f} min" if args.minutes else "")
    summary = {
        "floor_ceiling": fc,
        "eval_episodes": args.eval_episodes,
        "curve_episodes": args.curve_episodes,
        "init": init,
        "init_name": init_name,
        "start_success": start_success,
        "sft_wall_s": sft_wall_s,
        "budget": budget,
        "machine": f"{os.cpu_count()} CPU cores, torch threads {args.threads}"
        + (f", {args.parallel} runs at once" if args.parallel > 1 else "")
        + (f", {gpu}" if (gpu := _gpu_name()) else ""),
        "by_preset": by_preset,
        "curves": str(curves.relative_to(out)) if curves.is_relative_to(out) else str(curves),
        "command": ".venv/bin/python benchmarks/learn_sokoban.py " + " ".join(os.sys.argv[1:]),
    }
    (out / "learn_sokoban.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = write_table(summary, out)
    print(table.read_text())


if __name__ == "__main__":
    main()
