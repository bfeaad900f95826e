"""`run_training`: the whole run with a progress bar (what `agentrl train` calls)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from agentrl._signals import Stopped
from agentrl.cli.plan import PhaseClock, plan_lines, time_lines

log = logging.getLogger("agentrl.train")


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]train"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("reward {task.fields[reward]}  success {task.fields[success]}"),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
    )


def _headline(metrics: dict[str, float]) -> tuple[str, str]:
    """The step's reward and success for the progress line: the policy's own. An
    expert-iteration step (`algo.name: expert-iteration`) samples no episode: its policy
    success is its greedy pass over the step's rooms, and the search's is shown beside it,
    labelled as such.

    >>> _headline({"reward/mean": 1.5, "success_rate": 0.25})
    ('1.500', '0.25')
    >>> _headline({"search/solved_frac": 0.9, "search/greedy_solved_frac": 0.5})
    ('-', '0.50 (policy; search 0.90)')
    >>> _headline({"search/solved_frac": 0.9})
    ('-', '- (search 0.90)')
    """
    if "search/solved_frac" in metrics:
        search = f"search {metrics['search/solved_frac']:.2f}"
        if "search/greedy_solved_frac" not in metrics:
            return "-", f"- ({search})"
        return "-", f"{metrics['search/greedy_solved_frac']:.2f} (policy; {search})"
    return (
        f"{metrics.get('reward/mean', float('nan')):.3f}",
        f"{metrics.get('success_rate', float('nan')):.2f}",
    )


def live_bars(cfg: Any) -> bool:
    """Progress bars when asked for and stderr is a terminal; else a log line per step (a
    bar drawn to a file would show only at the end)."""
    from agentrl._console import console

    return bool(cfg.logging.progress) and console().is_terminal


def trainer_rank() -> int:
    """This process's rank (0 without torch.distributed)."""
    from agentrl.runtime._ranks import world_size

    if world_size() > 1:
        import torch.distributed as dist

        return dist.get_rank()
    return 0


def _with_warm_start(cfg: Any, run_dir: Path) -> Any:
    """Run the warm start on rank 0 (the others wait) and return `cfg` with its model."""
    from agentrl.cli.warm_start import WARM_START_DIR, warm_start
    from agentrl.runtime._ranks import barrier

    if trainer_rank() == 0:
        warm_start(cfg, run_dir, progress=live_bars(cfg))
    barrier()
    cfg = cfg.model_copy(deep=True)
    cfg.model.name = str((run_dir / WARM_START_DIR).resolve())
    return cfg


def run_training(
    cfg: Any, run_dir: Path, *, resume: bool = False, engine: Any | None = None
) -> None:
    """Train for the steps left in `cfg.trainer.num_steps` (all of them for a new run)."""
    from agentrl._console import setup_logging
    from agentrl.runtime.lora import ADAPTER_DIR
    from agentrl.runtime.metrics import METRICS_FILE
    from agentrl.runtime.threads import set_torch_threads
    from agentrl.train.checkpoint import latest_checkpoint
    from agentrl.train.trainer import Trainer

    setup_logging()
    if trainer_rank() == 0:
        log.info("run dir %s", run_dir)
        for line in plan_lines(cfg, Path(run_dir), resume=resume):
            log.info("%s", line)
    # chosen once a process; logs `threads: N (...)` and, on vllm-cpu, `vLLM threads: ...`
    set_torch_threads(cfg.trainer.num_threads, engine=cfg.engine.name)
    if trainer_rank() == 0:
        for line in time_lines(cfg, resume=resume):
            log.info("%s", line)
    if cfg.warm_start.expert is not None:
        cfg = _with_warm_start(cfg, Path(run_dir))
    if resume and latest_checkpoint(run_dir) is None:  # killed before RL's first checkpoint
        log.info("no RL checkpoint in %s yet: RL starts at step 0", run_dir)
        resume = False
        if trainer_rank() == 0:  # lines of steps that will be taken again
            (Path(run_dir) / METRICS_FILE).unlink(missing_ok=True)
    trainer = Trainer(cfg, run_dir, resume=resume, engine=engine)
    total = cfg.trainer.num_steps
    if trainer.rank != 0:  # a follower rank: same steps, no progress bar or log lines
        try:
            while trainer.state.step < total:
                trainer.train_step()
        finally:
            trainer.close()
        return
    if trainer.resumed_from is not None:
        log.info(
            "resume: RL continues at step %d of %d from %s (policy, optimizer, RNG and seeds)",
            trainer.state.step + 1,
            cfg.trainer.num_steps,
            trainer.resumed_from,
        )
    log.info("%d steps of %s on %s", total, cfg.model.name, cfg.env.name)
    clock = PhaseClock("RL")
    try:
        _steps(trainer, cfg, total, clock)
    except Stopped:  # Ctrl-C or SIGTERM between two updates: keep the last finished step
        _save_on_stop(trainer, Path(run_dir))
        raise
    finally:
        trainer.close()
    log.info(
        "done: metrics in %s, checkpoints in %s", run_dir / "metrics.jsonl", run_dir / "checkpoints"
    )
    final = latest_checkpoint(run_dir)
    if cfg.trainer.lora.enabled and final is not None:
        adapter = final / "policy" / ADAPTER_DIR
        log.info(
            "LoRA adapter in %s (agentrl eval --model %s; merged: %s)",
            adapter,
            adapter,
            final / "policy" / "model",
        )


def _steps(trainer: Any, cfg: Any, total: int, clock: PhaseClock) -> None:
    """Train the steps left, with a progress bar or a log line per step."""
    from agentrl._console import console

    if live_bars(cfg):
        with _progress(console()) as bar:
            task = bar.add_task(
                "train", total=total, completed=trainer.state.step, reward="-", success="-"
            )
            while trainer.state.step < total:
                metrics = trainer.train_step()
                clock.step(trainer.state.step, total)
                reward, success = _headline(metrics)
                bar.update(task, completed=trainer.state.step, reward=reward, success=success)
    else:
        while trainer.state.step < total:
            metrics = trainer.train_step()
            clock.step(trainer.state.step, total)
            reward, success = _headline(metrics)
            log.info(
                "step %d/%d reward %s success %s (%.1f s)",
                trainer.state.step,
                total,
                reward,
                success,
                metrics.get("time/step", 0.0),
            )


def _save_on_stop(trainer: Any, run_dir: Path) -> None:
    """Save the last finished step, unless a checkpoint of it is there already."""
    from agentrl.runtime._ranks import world_size
    from agentrl.train.checkpoint import latest_checkpoint

    if world_size() > 1:  # a save is collective: the other ranks are not in it
        log.info("stopping: the last checkpoint is the one to resume from (several ranks)")
        return
    latest = latest_checkpoint(run_dir)
    saved = int(latest.name.removeprefix("step-")) if latest is not None else 0
    if trainer.state.step > saved:
        path = trainer.save_checkpoint()
        log.info("saved step %d to %s before stopping", trainer.state.step, path)
