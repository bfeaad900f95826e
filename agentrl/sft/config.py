"""`SFTConfig`: supervised fine-tuning on expert trajectories (`agentrl sft`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentrl.runtime.config import EnvConfig, OptimConfig
from agentrl.runtime.model_settings import ModelSettings

_SFT_OPTIM_DEFAULTS: dict[str, Any] = {
    "lr": 1e-3,
    "warmup_steps": 10,
    "schedule": "cosine",
    "min_lr_ratio": 0.1,
}


def _default_optim() -> OptimConfig:
    return OptimConfig(**_SFT_OPTIM_DEFAULTS)


class SFTConfig(BaseModel):
    """Everything one `agentrl sft` run needs."""

    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, validate_assignment=True
    )

    env: EnvConfig = Field(default_factory=EnvConfig)
    """The environment the expert plays."""
    model: str = "tiny"
    """Model to fine-tune: alias (`tiny`, `smollm2-135m`), Hugging Face id or folder."""
    expert: str = "solver"
    """Registered expert (`agentrl.sft.expert.register_expert`)."""
    num_episodes: int = Field(default=512, gt=0)
    """Expert episodes (one per training seed)."""
    first_seed: int = Field(default=0, ge=0)
    """Expert episodes use seeds `first_seed + i`; keep them below `eval_seed_offset`."""
    max_actions_per_turn: int | None = Field(default=None, gt=0)
    """Actions per expert answer; None uses the env's own per-turn limit."""
    max_context_tokens: int = Field(default=2048, ge=8)
    """Longest episode sequence; longer expert episodes end `truncated` (still trained on)."""
    expert_noise: float = Field(default=0.0, ge=0, lt=1)
    """Chance that a turn plays a random answer instead of the expert's (DART), so that the
    data shows the expert's answers from states off its own path; those random answers are
    not trained on."""
    history_turns: int | None = Field(default=None, ge=0)
    """Earlier turns each prompt keeps (`rollout.history_turns` of the RL run that follows);
    None keeps the whole conversation."""
    num_epochs: int = Field(default=3, gt=0)
    """Passes over the expert trajectories."""
    batch_size: int = Field(default=16, gt=0)
    """Samples per optimizer step (one per trajectory, or one per turn with per-turn samples)."""
    micro_batch_tokens: int = Field(default=8192, gt=0)
    """Padded tokens per forward/backward; gradients accumulate over micro-batches."""
    optim: OptimConfig = Field(default_factory=_default_optim)
    """AdamW and LR schedule. The default lr (1e-3) suits the random-weight `tiny` model;
    use about 1e-5 for a pretrained model."""
    eval_episodes: int = Field(default=0, ge=0)
    """Validation episodes after training (fixed seeds from `eval_seed_offset`); 0 skips."""
    eval_temperature: float = Field(default=0.5, ge=0)
    """Sampling temperature of the validation episodes."""
    eval_max_new_tokens: int = Field(default=64, gt=0)
    """Ids sampled per validation turn."""
    eval_seed_offset: int = Field(default=1_000_000, ge=0)
    """First validation seed (the same seeds `agentrl train` and `agentrl eval` use)."""
    seed: int = 0
    """Seed for torch (init of nothing, batch shuffling) and the evaluation sampler."""
    num_threads: int = Field(default=1, ge=0)
    """torch intra-op threads on CPU; 0 keeps torch's default."""
    checkpoint_every_s: float | None = Field(default=120.0, ge=0)
    """Seconds of training between checkpoints (`<out>/sft_checkpoint`, for `--resume`);
    0 writes one after every step, None none."""

    @field_validator("optim", mode="before")
    @classmethod
    def _sft_optim_defaults(cls, value: Any) -> Any:
        """Fill fields a partial `optim` (e.g. only `--lr`) leaves out from the SFT defaults
        (warmup 10, cosine to 0.1), not from `OptimConfig`'s RL defaults (constant)."""
        if isinstance(value, dict):
            return {**_SFT_OPTIM_DEFAULTS, **value}
        return value

    def model_settings(self) -> ModelSettings:
        """How the fine-tuned model plays its env: what `agentrl eval --model` reproduces."""
        return ModelSettings(
            env=self.env,
            history_turns=self.history_turns,
            max_context_tokens=self.max_context_tokens,
            max_new_tokens=self.eval_max_new_tokens,
            eval_temperature=self.eval_temperature,
            eval_seed_offset=self.eval_seed_offset,
        )
