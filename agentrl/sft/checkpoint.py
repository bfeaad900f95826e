"""SFT checkpoints: `<out>/sft_checkpoint`, written atomically, so `agentrl sft --resume OUT`
(and `agentrl train --resume RUN` in its warm start) continues where a killed run stopped.

A checkpoint holds the model and the optimizer and scheduler states (`Backend.save`), the RNG
states with the shuffling generator as it stood at the start of the current epoch (the data
order is drawn again from it and the steps already taken are skipped), and `sft_state.json`:
the step, the NLL before training, the seconds worked, and the config it was trained with.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentrl.runtime.checkpoint import fsync_dir, rng_state, set_rng_state

CHECKPOINT_DIR = "sft_checkpoint"
STATE_FILE = "sft_state.json"
NOT_COMPARED = frozenset(
    {
        "checkpoint_every_s",
        "eval_episodes",
        "eval_temperature",
        "eval_max_new_tokens",
        "num_threads",
    }
)
"""Config fields a resume may change: they do not touch the optimizer steps."""


@dataclass
class SFTState:
    """Where an SFT run is, besides weights, optimizer and RNG."""

    step: int = 0
    """Optimizer steps done."""
    initial_nll: float = float("nan")
    """NLL on the measuring sample before the first step."""
    elapsed_s: float = 0.0
    """Seconds of work before this checkpoint (the result's wall time adds them)."""
    config: dict[str, Any] = field(default_factory=dict)
    """The run's `SFTConfig` (JSON), to refuse a resume with other settings."""


def save_sft_checkpoint(
    out_dir: Path, state: SFTState, *, backend: Any, epoch_generator: torch.Generator
) -> Path:
    """Write `<out_dir>/sft_checkpoint` through a temp folder and a rename."""
    final = Path(out_dir) / CHECKPOINT_DIR
    tmp, old = final.with_name(f".{CHECKPOINT_DIR}.tmp"), final.with_name(f".{CHECKPOINT_DIR}.old")
    shutil.rmtree(tmp, ignore_errors=True)
    backend.save(tmp)
    torch.save(rng_state(epoch_generator), tmp / "rng.pt")
    (tmp / STATE_FILE).write_text(json.dumps(asdict(state), indent=2) + "\n")
    fsync_dir(tmp)
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.rename(final, old)  # a kill between the renames leaves .old, which load reads
    os.rename(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def find_sft_checkpoint(out_dir: Path) -> Path | None:
    """The complete checkpoint in `out_dir`, or None."""
    for name in (CHECKPOINT_DIR, f".{CHECKPOINT_DIR}.old"):
        path = Path(out_dir) / name
        if (path / STATE_FILE).is_file():
            return path
    return None


def check_sft_checkpoint(path: Path, config: dict[str, Any]) -> SFTState:
    """The state of checkpoint `path`; ValueError if it was trained with other settings."""
    state = SFTState(**json.loads((Path(path) / STATE_FILE).read_text()))
    changed = sorted(
        k
        for k in config.keys() | state.config.keys()
        if k not in NOT_COMPARED and config.get(k) != state.config.get(k)
    )
    if changed:
        diffs = ", ".join(f"{k}: {state.config.get(k)!r} -> {config.get(k)!r}" for k in changed)
        raise ValueError(
            f"{path} was trained with other settings ({diffs}); resume with the same settings "
            "or delete the folder to start over"
        )
    return state


def load_sft_checkpoint(
    path: Path, config: dict[str, Any], *, backend: Any, generator: torch.Generator
) -> SFTState:
    """Restore model, optimizer, scheduler and RNG from `path` (`generator` to the start of
    the checkpoint's epoch); raise ValueError if it was trained with other settings."""
    state = check_sft_checkpoint(path, config)
    backend.load(path)
    set_rng_state(torch.load(Path(path) / "rng.pt", weights_only=False), generator)
    return state


def remove_sft_checkpoint(out_dir: Path) -> None:
    """Delete the checkpoint once the run's result is written."""
    for name in (CHECKPOINT_DIR, f".{CHECKPOINT_DIR}.old", f".{CHECKPOINT_DIR}.tmp"):
        shutil.rmtree(Path(out_dir) / name, ignore_errors=True)
