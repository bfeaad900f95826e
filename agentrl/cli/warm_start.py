"""The optional warm start of a run: `agentrl sft` on the env's expert, before RL.

`agentrl train` calls `warm_start` when `warm_start.expert` is set. The fine-tuned model goes
to `<run>/warm_start` (a Hugging Face folder; with `trainer.lora`, a LoRA adapter), and RL
starts from it. A run that already finished its warm start (a resumed run) reuses the folder
instead of training again; one killed during it reuses the expert episodes and continues the
SFT from its last checkpoint.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from agentrl.cli.plan import PhaseClock
from agentrl.runtime.model_settings import write_model_settings
from agentrl.sft._progress import OnStep, sft_log_progress, sft_progress
from agentrl.sft.config import SFTConfig
from agentrl.train.checkpoint import WARM_START_DIR

__all__ = ["WARM_START_DIR", "sft_config", "warm_start"]

log = logging.getLogger("agentrl.train")


def sft_config(cfg: Any) -> Any:
    """The `SFTConfig` of a run's warm start: its `warm_start` keys as they are, and the run's
    env, model, seeds, context limit, `history_turns`, threads and `trainer.lora` (a LoRA
    warm start writes an adapter, which RL then trains on)."""
    return SFTConfig(
        **dict(cfg.warm_start),
        env=cfg.env,
        model=cfg.model.name,
        max_context_tokens=cfg.rollout.max_context_tokens,
        history_turns=cfg.rollout.history_turns,
        eval_seed_offset=cfg.eval.seed_offset,
        seed=cfg.seed,
        num_threads=cfg.trainer.num_threads,
        lora=cfg.trainer.lora,
    )


def warm_start(cfg: Any, run_dir: Path, *, progress: bool = True) -> Path:
    """Fine-tune `cfg.model.name` on `cfg.warm_start.expert`'s episodes into
    `<run_dir>/warm_start` (unless a finished one is there) and return that folder."""
    from agentrl.sft.train import RESULT_FILE, run_sft

    out = Path(run_dir) / WARM_START_DIR
    result_file = out / RESULT_FILE
    if result_file.is_file():
        log.info("warm start: reusing %s", out)
        return out
    sft_cfg = sft_config(cfg)
    ws = cfg.warm_start
    log.info(
        "warm start: %d %s episodes, %d epoch(s), lr %g -> %s",
        ws.num_episodes,
        ws.expert,
        ws.num_epochs,
        ws.optim.lr,
        out,
    )
    clock = PhaseClock("warm start (SFT)")

    def timed(on_step: OnStep) -> OnStep:
        def on_timed_step(step: int, total: int, metrics: dict[str, float]) -> None:
            on_step(step, total, metrics)
            clock.step(step, total)

        return on_timed_step

    if not progress:
        on_episode, on_step = sft_log_progress(log)
        result = run_sft(sft_cfg, out, on_episode=on_episode, on_step=timed(on_step))
    else:
        with sft_progress(ws.num_episodes, "warm start SFT") as (on_episode, on_step):
            result = run_sft(sft_cfg, out, on_episode=on_episode, on_step=timed(on_step))
    write_model_settings(out, cfg)  # the run's settings (16 new tokens, its turns), not SFT's
    log.info(
        "warm start done in %.0f s: expert NLL %.3f -> %.3f, token accuracy %.3f",
        result.wall_s,
        result.initial_nll,
        result.final_nll,
        result.final_token_accuracy,
    )
    return out
