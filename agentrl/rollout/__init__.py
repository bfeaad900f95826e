"""Rollouts: the engine protocol, HF and vLLM engines, and the multi-turn rollout loop.

Names load lazily, so `import agentrl.rollout` does not import torch, transformers or vLLM.
"""

from __future__ import annotations

from agentrl._lazy import lazy_exports

_EXPORTS = {
    "SamplingParams": "agentrl.rollout.engine",
    "GenerationRequest": "agentrl.rollout.engine",
    "Completion": "agentrl.rollout.engine",
    "Engine": "agentrl.rollout.engine",
    "generate_sync": "agentrl.rollout.engine",
    "RolloutConfig": "agentrl.rollout.config",
    "SamplingConfig": "agentrl.rollout.config",
    "EngineConfig": "agentrl.rollout.config",
    "RolloutResult": "agentrl.rollout.loop",
    "arollout": "agentrl.rollout.loop",
    "rollout": "agentrl.rollout.loop",
    "rollout_metrics": "agentrl.rollout.loop",
    "HFEngine": "agentrl.rollout.hf_engine",
    "VLLMEngine": "agentrl.rollout.vllm_engine",
    "RayEngine": "agentrl.rollout.ray_engine",
    "register_engine": "agentrl.rollout.engine_registry",
    "engine_names": "agentrl.rollout.engine_registry",
    "load_model": "agentrl.rollout.models",
    "load_tokenizer": "agentrl.rollout.models",
    "resolve_model": "agentrl.rollout.models",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
