"""Supervised fine-tuning on expert trajectories (`agentrl sft`), in the RL trajectory format."""

from agentrl.sft.config import SFTConfig
from agentrl.sft.expert import (
    Expert,
    NoExpertError,
    experts,
    format_actions,
    get_expert,
    register_expert,
    solver_expert,
)

__all__ = [
    "Expert",
    "NoExpertError",
    "SFTConfig",
    "experts",
    "format_actions",
    "get_expert",
    "register_expert",
    "solver_expert",
]
