"""Sokoban: RAGEN-compatible rooms, an exact solver (expert policy) and the text env."""

from agentrl.envs.sokoban.env import RAGEN_ROOMS, SokobanEnv, load_rooms
from agentrl.envs.sokoban.room import (
    ACTIONS,
    LEGEND,
    Room,
    RoomGenerationError,
    generate_room,
    render_grid,
    reverse_distances,
)
from agentrl.envs.sokoban.solver import UnsolvableRoomError, expert_actions, solve

__all__ = [
    "ACTIONS",
    "LEGEND",
    "RAGEN_ROOMS",
    "Room",
    "RoomGenerationError",
    "SokobanEnv",
    "UnsolvableRoomError",
    "expert_actions",
    "generate_room",
    "load_rooms",
    "render_grid",
    "reverse_distances",
    "solve",
]
