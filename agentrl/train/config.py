"""`TrainConfig`, everything one `agentrl train` run needs, and the sections of the RL trainer.

One pydantic model per component (loop, backend, checkpoints, evaluation, warm start), nested
into `TrainConfig` beside the env, model, rollout, engine and algorithm sections; the sections
`agentrl sft` shares (optimizer, LoRA, logging, the expert fine-tuning the warm start runs) live
in `agentrl.runtime.config`. Configs load from one YAML file plus dotted overrides
(`--set algo.clip_eps_high=0.28`); `agentrl.config` re-exports what users import.

>>> cfg = load_config(overrides=["rollout.group_size=4", "env.name=sokoban"])
>>> cfg.rollout.group_size, cfg.env.name
(4, 'sokoban')
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentrl.algos.config import AlgoConfig
from agentrl.rollout.config import EngineConfig, RolloutConfig
from agentrl.runtime.config import (
    EnvConfig,
    ExpertSFTConfig,
    LoggingConfig,
    LoraConfig,
    ModelConfig,
    OptimConfig,
    PolicyOptimConfig,
    SFTOptimConfig,
)
from agentrl.runtime.config import config_keys as _config_keys
from agentrl.runtime.config import load_config as _load_config
from agentrl.runtime.model_settings import ModelSettings

__all__ = [
    "CheckpointConfig",
    "EvalConfig",
    "LoggingConfig",
    "LoraConfig",
    "OptimConfig",
    "PolicyOptimConfig",
    "SFTOptimConfig",
    "TrainConfig",
    "TrainerConfig",
    "WarmStartConfig",
    "config_keys",
    "load_config",
]


class _Section(BaseModel):
    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, validate_assignment=True
    )


class TrainerConfig(_Section):
    """The training loop: how much data per step and how it is turned into updates."""

    num_steps: int = Field(default=50, gt=0)
    """Training steps (rollout + update) in the run (an env's recipe may set its own)."""
    num_groups: int = Field(default=4, gt=0)
    """Initial states (env seeds) per step; each is rolled out `rollout.group_size` times."""
    first_seed: int = Field(default=500_000, ge=0)
    """RL training seeds are drawn from `[first_seed, eval.seed_offset)`: above the warm
    start's expert seeds (which start at 0) and below the validation seeds, so RL never
    trains on rooms the warm start imitated or on validation rooms."""
    micro_batch_tokens: int = Field(default=4096, gt=0)
    """Token budget (padded B x T) of one forward/backward; gradients accumulate over these."""
    backend: Literal["local", "fsdp2", "deepspeed"] = "local"
    """Training backend: one process, FSDP2 (torchrun / Ray) or DeepSpeed ZeRO."""
    zero_stage: Literal[2, 3] = 2
    """DeepSpeed ZeRO stage (backend `deepspeed` only)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Trainer device; `auto` is cuda when available."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""
    lora: LoraConfig = Field(default_factory=LoraConfig)
    """Optional LoRA adapters."""
    async_rollout: bool = False
    """Overlap the rollout of step t+1 with the update of step t (staleness <= 1, corrected
    with sampler logprobs)."""
    max_env_error_steps: int | None = Field(default=3, gt=0)
    """Steps in a row in which most episodes (over half) may end `env_error` before the run
    stops (exit 1, saving its last step first); null never stops. Each step with any env
    error prints one line (count, first reason, the `agentrl play` command that replays it)."""
    num_threads: int = Field(default=0, ge=0)
    """torch intra-op threads (also the warm start's); 0 chooses them from the CPUs the
    process may use and the machine's load, or takes `OMP_NUM_THREADS` when it is set."""


class CheckpointConfig(_Section):
    """Periodic checkpoints under `<run>/checkpoints/step-N`."""

    every: int = Field(default=10, ge=0)
    """Write a checkpoint every this many steps (and at the end); 0 only at the end."""
    keep_last: int = Field(default=2, gt=0)
    """Checkpoints kept; older ones are deleted after a new one is written."""


class EvalConfig(_Section):
    """Periodic evaluation on fixed validation seeds."""

    every: int = Field(default=0, ge=0)
    """Evaluate every this many steps; 0 disables periodic evaluation."""
    num_episodes: int = Field(default=16, gt=0)
    """Validation episodes (one per seed)."""
    temperature: float = Field(default=0.5, ge=0)
    """Sampling temperature during evaluation."""
    seed_offset: int = Field(default=1_000_000, ge=0)
    """Validation seeds are `seed_offset + i`; training seeds stay below it (disjoint)."""


class WarmStartConfig(ExpertSFTConfig):
    """Supervised fine-tuning on an expert's episodes before RL (`agentrl sft`, run in-line).

    With `expert` set, a new run first plays `num_episodes` training seeds with the expert,
    fine-tunes the model on them (token-exact trajectories, masked NLL) into
    `<run>/warm_start`, and then starts RL from that model. A resumed run reuses the folder.
    The keys are `agentrl sft`'s (`ExpertSFTConfig`); the env, model, seed, context limit and
    `history_turns` come from the run.
    """

    expert: str | None = None
    """Registered expert that plays the env (`solver` for Sokoban); None: no warm start."""
    num_episodes: int = Field(default=4096, gt=0)
    """Expert episodes (one per training seed, from seed 0)."""
    num_epochs: int = Field(default=1, gt=0)
    """Passes over the expert episodes."""


class TrainConfig(_Section):
    """Everything one `agentrl train` run needs."""

    retired_keys: ClassVar[dict[str, str]] = {
        "warm_start.lr": "now warm_start.optim.lr",
        "warm_start.lr_cycles": "now warm_start.optim.cycles",
        "warm_start.lr_cycle_decay": "now warm_start.optim.cycle_decay",
        "optim.eps": "removed: AdamW's epsilon is 1e-8",
        "rollout.inline_env_step_s": "removed: env steps under 1 ms run inline",
        "rollout.generate_timeout_s": "removed: rollout.episode_timeout_s bounds generation",
        "logging.wandb_project": "removed: set the WANDB_PROJECT environment variable",
        "trainer.weight_sync_timeout_s": "now engine.update_timeout_s",
        "checkpoint.save_optimizer": "removed: checkpoints always keep the optimizer state",
        "algo.reinforce_baseline": "removed: reinforce++ always subtracts the group mean",
        "algo.whiten_advantages": "removed: ppo always whitens its advantages",
        "algo.normalize_rewards": "removed: rewards are normalised exactly when a critic runs",
        "algo.kl_in_reward": "removed: algo.kl_kind k1 goes into the reward, k2 and k3 the loss",
        "algo.vf_coef": "removed: the critic has its own optimizer (optim.critic_lr)",
        "engine.num_cpus_per_replica": "removed: each Ray replica reserves one CPU",
        "engine.placement_strategy": "removed: Ray's scheduler places the replicas",
        "trainer.lora.dropout": "removed: LoRA adapters have no dropout",
        "rollout.max_concurrent_episodes": "removed: every episode of a step is in flight at once",
        "optim.weight_decay": "removed: AdamW runs without weight decay",
        "optim.betas": "removed: AdamW's betas are (0.9, 0.999)",
        "warm_start.optim.weight_decay": "removed: AdamW runs without weight decay",
        "warm_start.optim.betas": "removed: AdamW's betas are (0.9, 0.999)",
        "warm_start.optim.critic_lr": "removed: the warm start trains no critic",
        "rollout.sampling.seed": "removed: the run's `seed` seeds the sampling too",
        "optim.cycles": "removed: RL's lr decays once; warm_start.optim has cycles",
        "optim.cycle_decay": "removed: RL's lr decays once; warm_start.optim has cycle_decay",
        "logging.collapse": "removed: the collapse warning (a metric and a log line) always runs",
    }
    """Keys of earlier versions -> what to write instead (named when a config still has one)."""

    env: EnvConfig = Field(default_factory=EnvConfig)
    """The environment to train on."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The policy model."""
    warm_start: WarmStartConfig = Field(default_factory=WarmStartConfig)
    """Optional supervised warm start on an expert before RL."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """How episodes are rolled out and sampled."""
    engine: EngineConfig = Field(default_factory=EngineConfig)
    """The inference engine."""
    algo: AlgoConfig = Field(default_factory=AlgoConfig)
    """The RL algorithm (see the presets)."""
    optim: PolicyOptimConfig = Field(default_factory=PolicyOptimConfig)
    """AdamW and the learning-rate schedule."""
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    """The training loop and its backend."""
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    """Periodic checkpoints."""
    eval: EvalConfig = Field(default_factory=EvalConfig)
    """Periodic evaluation on validation seeds."""
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    """Metrics, TensorBoard, W&B, trajectories, progress bar."""
    seed: int = 0
    """Seed for torch, numpy and the env seed sequence."""

    @model_validator(mode="after")
    def _check_seed_ranges(self) -> TrainConfig:
        first, stop = self.trainer.first_seed, self.eval.seed_offset
        if first >= stop:
            raise ValueError(
                f"trainer.first_seed ({first}) must be below eval.seed_offset ({stop}): "
                "RL training seeds are drawn from [first_seed, seed_offset)"
            )
        if self.warm_start.expert is not None and self.warm_start.num_episodes > first:
            raise ValueError(
                f"warm_start.num_episodes ({self.warm_start.num_episodes}) uses expert seeds "
                f"0..{self.warm_start.num_episodes - 1}, which reach trainer.first_seed "
                f"({first}): raise trainer.first_seed so RL trains on rooms it did not imitate"
            )
        return self

    @model_validator(mode="after")
    def _check_algorithm(self) -> TrainConfig:
        """Combinations the algorithm cannot run with fail here, so `--print-config` shows
        them before any model loads."""
        from agentrl.algos.base import algorithm_class

        missing = algorithm_class(self.algo.name).run_requirements(self)
        if missing:
            raise ValueError(
                f"algo.name {self.algo.name} needs "
                + ", ".join(missing)
                + "; for another algorithm, name it (--preset NAME, or algo.name)"
            )
        return self

    def model_settings(self) -> ModelSettings:
        """How the run's models play the env: what `agentrl eval --model` reproduces."""
        return ModelSettings(
            env=self.env,
            max_turns=self.rollout.max_turns,
            history_turns=self.rollout.history_turns,
            max_context_tokens=self.rollout.max_context_tokens,
            max_new_tokens=self.rollout.sampling.max_new_tokens,
            eval_temperature=self.eval.temperature,
            eval_seed_offset=self.eval.seed_offset,
            eval_episodes=self.eval.num_episodes,
            engine=self.engine.name,
        )


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    base: dict[str, Any] | None = None,
    model: type[BaseModel] = TrainConfig,
    typed: dict[str, str] | None = None,
) -> Any:
    """Build a config (a `TrainConfig` unless `model` says otherwise) from `base`, then a YAML
    file, then `key.path=value` overrides (`agentrl.runtime.config.load_config`; `typed`
    names the overrides a command-line flag set, for error headers)."""
    return _load_config(path, overrides, base=base, model=model, typed=typed)


def config_keys(model: type[BaseModel] = TrainConfig, prefix: str = "") -> list[str]:
    """Every dotted key of a config model (nested sections expanded), in declaration order.

    >>> "trainer.lora.r" in config_keys()
    True
    """
    return _config_keys(model, prefix)
