"""`SFTConfig`: supervised fine-tuning on expert trajectories (`agentrl sft`)."""

from __future__ import annotations

from pydantic import Field

from agentrl.runtime.config import EnvConfig, ExpertSFTConfig, LoraConfig
from agentrl.runtime.model_settings import ModelSettings


class SFTConfig(ExpertSFTConfig):
    """Everything one `agentrl sft` run needs: the expert, its episodes and the optimizer
    (`ExpertSFTConfig`, which the warm start of `agentrl train` shares), and the env, model,
    sequence limits and validation of a stand-alone run."""

    env: EnvConfig = Field(default_factory=EnvConfig)
    """The environment the expert plays."""
    model: str = "tiny"
    """Model to fine-tune: alias (`tiny`, `smollm2-135m`), Hugging Face id or folder."""
    first_seed: int = Field(default=0, ge=0)
    """Expert episodes use seeds `first_seed + i`; keep them below `eval_seed_offset`."""
    max_context_tokens: int = Field(default=2048, ge=8)
    """Longest episode sequence; longer expert episodes end `truncated` (still trained on)."""
    expert_noise: float = Field(default=0.0, ge=0, lt=1)
    """Chance that a turn plays a random answer instead of the expert's (DART), so that the
    data shows the expert's answers from states off its own path; those random answers are
    not trained on."""
    history_turns: int | None = Field(default=None, ge=0)
    """Earlier turns each prompt keeps (`rollout.history_turns` of the RL run that follows);
    None keeps the whole conversation."""
    micro_batch_tokens: int = Field(default=8192, gt=0)
    """Padded tokens per forward/backward; gradients accumulate over micro-batches."""
    eval_episodes: int = Field(default=0, ge=0)
    """Validation episodes after training (fixed seeds from `eval_seed_offset`); 0 skips."""
    eval_temperature: float = Field(default=0.5, ge=0)
    """Sampling temperature of the validation episodes."""
    eval_max_new_tokens: int = Field(default=256, gt=0)
    """Ids sampled per validation turn; the model folder keeps it as the turn length
    `agentrl eval --model` uses. The default is `rollout.sampling.max_new_tokens`'s, which a
    tool call with a program fits in."""
    eval_seed_offset: int = Field(default=1_000_000, ge=0)
    """First validation seed (the same seeds `agentrl train` and `agentrl eval` use)."""
    seed: int = 0
    """Seed for torch (init of nothing, batch shuffling) and the evaluation sampler."""
    num_threads: int = Field(default=0, ge=0)
    """torch intra-op threads; 0 chooses them from the CPUs the process may use and the
    machine's load, or takes `OMP_NUM_THREADS` when it is set."""
    lora: LoraConfig = Field(default_factory=LoraConfig)
    """LoRA adapters instead of all weights (the keys of `trainer.lora`): the output folder
    is then a peft adapter over `model` (a few MB), which `agentrl eval --model` merges and
    `agentrl train --model` with the same `trainer.lora` trains on. The warm start of
    `agentrl train` takes the run's `trainer.lora`."""

    def model_settings(self) -> ModelSettings:
        """How the fine-tuned model plays its env: what `agentrl eval --model` reproduces."""
        return ModelSettings(
            env=self.env,
            history_turns=self.history_turns,
            max_context_tokens=self.max_context_tokens,
            max_new_tokens=self.eval_max_new_tokens,
            eval_temperature=self.eval_temperature,
            eval_seed_offset=self.eval_seed_offset,
            **({"eval_episodes": self.eval_episodes} if self.eval_episodes else {}),
        )
