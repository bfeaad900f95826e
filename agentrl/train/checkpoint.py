"""Checkpoints under `<run>/checkpoints/step-NNNNNN`, written atomically, last k kept.

A checkpoint holds the policy (Hugging Face format under `policy/model`, with the tokenizer,
so `agentrl export` and `from_pretrained` load it unchanged; with LoRA merged, and the
adapter alone under `policy/adapter`), optimizer and scheduler states,
the critic when there is one, the RNG states (python, numpy, torch) and `trainer_state.json`
(step, env seed cursor, weight version).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentrl.runtime.checkpoint import fsync_dir, rng_state, set_rng_state
from agentrl.runtime.lora import ADAPTER_DIR
from agentrl.runtime.model_settings import write_model_settings
from agentrl.train.config import load_config

CHECKPOINT_DIR = "checkpoints"
WARM_START_DIR = "warm_start"
"""Where a run keeps its warm-start model (`agentrl train` with `warm_start.expert`)."""
_NAME = re.compile(r"^step-(\d+)$")
_STEP = re.compile(r"^step-\d+$")


@dataclass
class TrainerState:
    """Where the run is: everything besides weights and optimizer that a resume needs."""

    step: int = 0
    """Completed training steps."""
    seed_cursor: int = 0
    """Env seeds used so far; the next step's groups start here."""
    weight_version: int = 0
    """Version of the policy weights the engines hold."""
    collapse_history: dict[str, list[float]] = field(default_factory=dict)
    """Recent values of the collapse early-warning signals (so a resume warns alike)."""
    return_stats: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    """Running `[count, mean, M2]` of the episode returns (`algo.normalize_rewards`)."""


def checkpoint_path(run_dir: Path, step: int) -> Path:
    """Folder of the checkpoint after `step` steps."""
    return Path(run_dir) / CHECKPOINT_DIR / f"step-{step:06d}"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first (temp folders are ignored)."""
    root = Path(run_dir) / CHECKPOINT_DIR
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _NAME.match(p.name)]
    return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)))


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def save_checkpoint(
    run_dir: Path,
    state: TrainerState,
    *,
    policy: Any,
    critic: Any | None = None,
    tokenizer: Any | None = None,
    generator: torch.Generator | None = None,
    keep_last: int = 2,
    rank: int = 0,
) -> Path:
    """Write a checkpoint into a temp folder, then rename it to `step-N`; prune old ones.

    `policy` and `critic` are backends (`save(path)`); every rank calls this, rank 0 writes
    the shared files and does the rename.
    """
    final = checkpoint_path(run_dir, state.step)
    tmp = final.parent / f".tmp-{final.name}"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    policy.save(tmp / "policy")
    if critic is not None:
        critic.save(tmp / "critic")
    if rank != 0:
        return final
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp / "policy" / "model")
    write_run_settings(run_dir, tmp / "policy" / "model")  # eval reproduces the run's settings
    if (tmp / "policy" / ADAPTER_DIR).is_dir():  # LoRA: `agentrl eval --model .../adapter`
        write_run_settings(run_dir, tmp / "policy" / ADAPTER_DIR)
    torch.save(rng_state(generator), tmp / "rng.pt")
    (tmp / "trainer_state.json").write_text(json.dumps(asdict(state), indent=2))
    fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    for old in list_checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(
    path: Path,
    *,
    policy: Any,
    critic: Any | None = None,
    generator: torch.Generator | None = None,
) -> TrainerState:
    """Restore backends and RNG states from checkpoint `path`; return the trainer state."""
    path = Path(path)
    policy.load(path / "policy")
    if critic is not None:
        if not (path / "critic").is_dir():
            raise FileNotFoundError(f"{path} has no critic/ but this run uses a critic")
        critic.load(path / "critic")
    set_rng_state(torch.load(path / "rng.pt", weights_only=False), generator)
    return TrainerState(**json.loads((path / "trainer_state.json").read_text()))


def model_dir(path: Path) -> Path:
    """The Hugging Face model folder inside a checkpoint, run dir, or model folder `path`."""
    path = Path(path)
    if (path / CHECKPOINT_DIR).is_dir():
        latest = latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"run {path} has no checkpoint yet")
        path = latest
    if (path / "policy" / "model").is_dir():
        return path / "policy" / "model"
    if (path / "config.json").is_file():
        return path
    raise FileNotFoundError(f"{path} is neither a run, a checkpoint nor a model folder")


def write_run_settings(run_dir: str | Path, folder: str | Path) -> Path | None:
    """Write the settings of the run in `run_dir` (its `config.yaml`) into the model folder
    `folder` (a checkpoint's `policy/model`); None when `run_dir` holds no run config (a
    `Trainer` driven without `agentrl train`)."""
    run_file = run_config_file(Path(run_dir))
    if run_file is None:
        return None
    return write_model_settings(folder, load_config(run_file))


def run_config_file(folder: Path) -> Path | None:
    """The `config.yaml` of the run directory `folder` is or sits in, else None."""
    folder = folder.resolve()
    candidates = [folder]
    if folder.name == WARM_START_DIR:
        candidates.append(folder.parent)
    if _STEP.match(folder.name) and folder.parent.name == "checkpoints":
        candidates.append(folder.parents[1])
    in_policy = folder.parts[-2:] in (("policy", "model"), ("policy", "adapter"))
    if in_policy and _STEP.match(folder.parents[1].name):
        candidates.append(folder.parents[3])
    for run in candidates:
        if (run / "config.yaml").is_file() and is_run_dir(run):
            return run / "config.yaml"
    return None


def is_run_dir(folder: Path) -> bool:
    """Whether `folder` looks like an `agentrl train` run directory (not any `config.yaml`)."""
    return any(
        (folder / name).exists() for name in (CHECKPOINT_DIR, "metrics.jsonl", WARM_START_DIR)
    )
