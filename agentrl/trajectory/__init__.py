"""Token-exact trajectories: records, the chat-template bridge, and trajectory files."""

from agentrl.trajectory.bridge import ChatBridge, EpisodeTokens, TemplateError
from agentrl.trajectory.io import (
    TrajectoryFile,
    read_trajectories,
    step_path,
    write_step,
    write_trajectories,
)
from agentrl.trajectory.types import Sample, Status, Trajectory, Turn

__all__ = [
    "ChatBridge",
    "EpisodeTokens",
    "Sample",
    "Status",
    "TemplateError",
    "Trajectory",
    "TrajectoryFile",
    "Turn",
    "read_trajectories",
    "step_path",
    "write_step",
    "write_trajectories",
]
