"""`FrozenLakeEnv`: RAGEN-comparable text FrozenLake.

Random maps like RAGEN's: each cell is frozen with probability `p`, start and goal are
distinct random cells, and a map is redrawn until the goal is reachable from the start.
Render symbols (RAGEN): `P` player, `_` frozen, `O` hole, `G` goal, `X` player in a hole,
`√` player on the goal. Reward 1 for reaching the goal, 0 otherwise, `invalid_penalty` for a
turn whose answer is malformed. Success = the player stands on the goal. On slippery ice an
action moves in the intended direction or either perpendicular one, 1/3 each (Gymnasium's rule).

>>> env = FrozenLakeEnv(is_slippery=False)
>>> obs, info = env.reset(seed=0)
>>> path = " || ".join(info["shortest_path"])
>>> obs, reward, terminated, truncated, info = env.step(f"<answer>{path}</answer>")
>>> reward, terminated, info["success"]
(1.0, True, True)
"""

from __future__ import annotations

from collections import deque
from typing import Any, ClassVar

import numpy as np

from agentrl.envs.base import Observation, TokenEnv
from envs_contrib._grid import parse_named_actions

ACTIONS = ("Left", "Down", "Right", "Up")
"""Action names in Gymnasium's order (0 Left, 1 Down, 2 Right, 3 Up)."""
_MOVES = ((0, -1), (1, 0), (0, 1), (-1, 0))
_ACTION_IDS = {name.lower(): i for i, name in enumerate(ACTIONS)}
LEGEND = "P player, _ frozen ice, O hole, G goal, X player in a hole, √ player on the goal"


def _shortest_path(board: list[str], start: tuple[int, int]) -> list[str] | None:
    """Action names of a shortest hole-free path from `start` to the goal (BFS), or None."""
    h, w = len(board), len(board[0])
    prev: dict[tuple[int, int], tuple[tuple[int, int], int] | None] = {start: None}
    queue = deque([start])
    while queue:
        r, c = queue.popleft()
        if board[r][c] == "G":
            path = []
            node: tuple[int, int] = (r, c)
            while prev[node] is not None:
                node, a = prev[node]  # type: ignore[misc]
                path.append(ACTIONS[a])
            return path[::-1]
        for a, (dr, dc) in enumerate(_MOVES):
            nr, nc = r + dr, c + dc
            if 0 <= nr < h and 0 <= nc < w and (nr, nc) not in prev and board[nr][nc] != "H":
                prev[(nr, nc)] = ((r, c), a)
                queue.append((nr, nc))
    return None


def generate_map(rng: np.random.Generator, size: int = 4, p: float = 0.8) -> list[str]:
    """A random `size` x `size` map (`S` start, `F` frozen, `H` hole, `G` goal) with a path."""
    if size < 2:
        raise ValueError(f"size must be >= 2, got {size}")
    if not 0.0 < p <= 1.0:
        raise ValueError(f"p (probability a cell is frozen) must be in (0, 1], got {p}")
    while True:
        board = np.where(rng.random((size, size)) < p, "F", "H")
        start = tuple(int(x) for x in rng.integers(size, size=2))
        goal = tuple(int(x) for x in rng.integers(size, size=2))
        if start == goal:
            continue
        board[start] = "S"
        board[goal] = "G"
        rows = ["".join(row) for row in board]
        if _shortest_path(rows, start) is not None:  # type: ignore[arg-type]
            return rows


class FrozenLakeEnv(TokenEnv):
    """Walk across frozen ice to the goal without falling into a hole (RAGEN's FrozenLake)."""

    system_prompt: ClassVar[str] = (
        "You are solving the FrozenLake puzzle. Walk from your position (P) to the goal (G) "
        "without stepping into a hole (O). You move Left, Down, Right or Up; on slippery ice "
        "you may slide in an unintended direction. "
        f"Symbols: {LEGEND}. "
        "Answer with actions in order, e.g. <answer>Left || Up</answer>."
    )
    max_turns: ClassVar[int] = 5

    def __init__(
        self,
        size: int = 4,
        p: float = 0.8,
        is_slippery: bool = True,
        max_actions: int = 10,
        max_actions_per_turn: int = 5,
        max_turns: int | None = None,
        invalid_penalty: float = -0.1,
        desc: list[str] | None = None,
    ) -> None:
        """Configure the maps and the budgets.

        Args:
            size: side of the square map (RAGEN: 4).
            p: probability that a generated cell is frozen (the rest are holes; RAGEN: 0.8).
            is_slippery: slide like Gymnasium's FrozenLake (RAGEN's default: True).
            max_actions: action budget per episode (RAGEN: 10); running out truncates.
            max_actions_per_turn: actions taken from one answer; extra ones are ignored.
            max_turns: turns per episode (default 5); the env truncates after it.
            invalid_penalty: reward of a turn whose answer has an unknown action or no
                `<answer>...</answer>`.
            desc: a fixed map (rows of `S`, `F`, `H`, `G`) instead of random ones.
        """
        super().__init__()
        if max_actions < 1 or max_actions_per_turn < 1:
            raise ValueError("max_actions and max_actions_per_turn must be >= 1")
        if desc is not None:
            rows = [str(r) for r in desc]
            if len({len(r) for r in rows}) != 1 or set("".join(rows)) - set("SFHG"):
                raise ValueError(f"desc must be equal-length rows of S, F, H, G; got {desc!r}")
            if "".join(rows).count("S") != 1 or "".join(rows).count("G") < 1:
                raise ValueError("desc needs exactly one S and at least one G")
            desc = rows
        else:
            generate_map(np.random.default_rng(0), size, p)  # validates size and p early
        self.size, self.p, self.desc = size, p, desc
        self.is_slippery = is_slippery
        self.max_actions = max_actions
        self.max_actions_per_turn = max_actions_per_turn
        if max_turns is not None:
            if max_turns < 1:
                raise ValueError(f"max_turns must be >= 1, got {max_turns}")
            self.max_turns = max_turns  # type: ignore[misc]  # per-instance override
        self.invalid_penalty = float(invalid_penalty)
        self._format_hint = (
            f"Answer with up to {max_actions_per_turn} of Left, Down, Right, Up, "
            "e.g. <answer>Left || Up</answer>."
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Draw a map from `self.np_random` (or use `desc`) and show it."""
        super().reset(seed=seed)
        self.board = (
            self.desc if self.desc is not None else generate_map(self.np_random, self.size, self.p)
        )
        flat = "".join(self.board)
        w = len(self.board[0])
        self.pos = divmod(flat.index("S"), w)
        self._actions_left = self.max_actions
        self._turns = 0
        self._done = False
        path = _shortest_path(self.board, self.pos)
        obs = f"{self.render()}\nSymbols: {LEGEND}.\n{self._status()}"
        return obs, {"shortest_path": path or [], "optimal_len": len(path) if path else -1}

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Apply the actions in `<answer>...</answer>`, up to `max_actions_per_turn`."""
        self.require_reset()
        if self._done:
            info = {"success": self._cell() == "G", "valid": False, "actions_taken": 0}
            return "The episode is over; call reset().", 0.0, True, False, info
        self._turns += 1
        moves, problem = parse_named_actions(action, _ACTION_IDS)
        reward = 0.0 if problem is None else self.invalid_penalty
        taken = 0
        for a in moves[: min(self.max_actions_per_turn, self._actions_left)]:
            self._move(a)
            taken += 1
            if self._cell() in "HG":
                break
        self._actions_left -= taken
        cell = self._cell()
        success = cell == "G"
        reward += 1.0 if success else 0.0
        terminated = cell in "HG"
        truncated = not terminated and (self._actions_left <= 0 or self._turns >= self.max_turns)
        self._done = terminated or truncated
        feedback = "" if problem is None else f"{problem} {self._format_hint}\n"
        if success:
            tail = "You reached the goal!"
        elif cell == "H":
            tail = "You fell into a hole."
        elif truncated:
            tail = "Out of actions." if self._actions_left <= 0 else "Out of turns."
        else:
            tail = self._status()
        info = {
            "success": success,
            "valid": problem is None,
            "actions_taken": taken,
            "actions_left": self._actions_left,
        }
        return f"{feedback}{self.render()}\n{tail}", round(reward, 6), terminated, truncated, info

    def _cell(self) -> str:
        return self.board[self.pos[0]][self.pos[1]]

    def _move(self, a: int) -> None:
        if self.is_slippery:
            a = (a + int(self.np_random.integers(-1, 2))) % 4  # intended or perpendicular, 1/3
        dr, dc = _MOVES[a]
        r = min(max(self.pos[0] + dr, 0), len(self.board) - 1)
        c = min(max(self.pos[1] + dc, 0), len(self.board[0]) - 1)
        self.pos = (r, c)

    def _status(self) -> str:
        return f"Actions left: {self._actions_left}. {self._format_hint}"

    def render(self) -> str:
        """The map in RAGEN's symbols."""
        self.require_reset()
        symbols = {"S": "_", "F": "_", "H": "O", "G": "G"}
        rows = [[symbols[ch] for ch in row] for row in self.board]
        r, c = self.pos
        rows[r][c] = {"H": "X", "G": "√"}.get(self.board[r][c], "P")
        return "\n".join("".join(row) for row in rows)

    def sample_action(self, rng: np.random.Generator) -> str:
        """A well-formed random answer: 1..`max_actions_per_turn` uniform actions."""
        n = int(rng.integers(1, self.max_actions_per_turn + 1))
        names = " || ".join(ACTIONS[int(i)] for i in rng.integers(4, size=n))
        return f"<answer>{names}</answer>"


class NonSlipperyFrozenLakeEnv(FrozenLakeEnv):
    """FrozenLake without slipping: every action moves where it says."""

    def __init__(self, **kwargs: Any) -> None:
        """`FrozenLakeEnv(is_slippery=False, **kwargs)`."""
        super().__init__(**{"is_slippery": False, **kwargs})
