"""`SokobanEnv`: RAGEN-compatible Sokoban as a text environment.

Each turn the model answers `<answer>Up || Left</answer>` (up to `max_actions_per_turn`
actions, case-insensitive). Rewards follow RAGEN: -0.1 per action, +1 for a box pushed onto
a target, -1 for a box pushed off one, +10 when every box is on a target. Success means
solved within the episode's action budget (`max_actions`).

A move into a wall, or into a box that cannot be pushed, is a valid action that costs its
-0.1 and leaves the player where it was: `info["blocked"]` counts such moves of the turn and
`info["moved"]` says whether any of them moved the player. The observation shows it only through
the unchanged grid, so observations stay those the shipped models were trained on.

>>> env = SokobanEnv()
>>> obs, info = env.reset(seed=3)
>>> info["optimal_len"] == len(env.expert_actions())
True
>>> actions = " || ".join(env.expert_actions())
>>> obs, reward, terminated, truncated, info = env.step(f"<answer>{actions}</answer>")
>>> terminated, info["success"]
(True, True)
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from agentrl.envs.base import Observation, TokenEnv
from agentrl.envs.parsing import parse_answer
from agentrl.envs.sokoban.room import ACTIONS, LEGEND, Room, generate_room
from agentrl.envs.sokoban.solver import expert_actions, solve

STEP_REWARD = -0.1
BOX_ON_TARGET_REWARD = 1.0
BOX_OFF_TARGET_REWARD = -1.0
SOLVED_REWARD = 10.0

RAGEN_ROOMS = Path(__file__).with_name("ragen_sokoban_rooms.jsonl")
"""RAGEN's 1,024 reference rooms (sets `6x6_1box` and `8x8_2box`), shipped with agentrl."""

_ACTION_IDS = {name.lower(): i for i, name in enumerate(ACTIONS)}
_SPLIT_RE = re.compile(r"\s*\|\|\s*|\s*,\s*|\s+")


@lru_cache(maxsize=8)
def load_rooms(path: str, room_set: str | None = None) -> tuple[tuple[int | None, Room, int], ...]:
    """Rooms from a JSONL file (`grid`, optional `seed`, `set`, `optimal_moves` per line).

    Returns `(seed, room, optimal_len)` triples; `room_set` keeps only lines whose `set`
    matches. A missing `optimal_moves` is computed by the solver.
    """
    file = RAGEN_ROOMS if path == "ragen" else Path(path)
    rooms = []
    with open(file, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                room = Room.from_grid(row["grid"])
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{file}:{lineno}: not a Sokoban room: {e}") from e
            if room_set is not None and row.get("set") != room_set:
                continue
            optimal = row.get("optimal_moves")
            if optimal is None:
                solution = solve(room)
                if solution is None:
                    raise ValueError(f"{file}:{lineno}: room has no solution")
                optimal = len(solution)
            rooms.append((row.get("seed"), room, int(optimal)))
    if not rooms:
        raise ValueError(f"{file}: no rooms" + (f" in set {room_set!r}" if room_set else ""))
    return tuple(rooms)


class SokobanEnv(TokenEnv):
    """Push every box onto a target (RAGEN-compatible render and rewards)."""

    system_prompt: ClassVar[str] = (
        "You are solving Sokoban. Push every box (X) onto a target (O); you are P. "
        "You move Up, Down, Left or Right; walking into a box pushes it if the cell behind "
        "is free. Boxes cannot be pulled. "
        f"Symbols: {LEGEND}. "
        "Answer with actions in order, e.g. <answer>Up || Left</answer>."
    )
    max_turns: ClassVar[int] = 5
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    """`render()` returns the grid as text."""

    def __init__(
        self,
        room_size: int | tuple[int, int] | list[int] = 6,
        num_boxes: int = 1,
        max_actions: int = 10,
        max_actions_per_turn: int = 5,
        max_turns: int | None = None,
        difficulty: float | None = None,
        min_solution_len: int = 1,
        max_solution_len: int | None = None,
        invalid_penalty: float = -0.1,
        rooms_file: str | None = None,
        rooms_set: str | None = None,
        positions: bool = False,
    ) -> None:
        """Configure the rooms and the budgets.

        Args:
            room_size: side of a square room, or `(height, width)`, outer wall included.
            num_boxes: boxes (and targets) per room.
            max_actions: action budget per episode; running out ends the episode (truncated).
            max_actions_per_turn: actions taken from one answer; extra ones are ignored.
            max_turns: turns per episode (default 5, as in RAGEN); the env truncates after it.
            difficulty: None draws rooms uniformly over solution lengths in range; a value in
                [0, 1] asks for the length that fraction of the way from the shortest to the
                longest one each layout allows.
            min_solution_len: shortest optimal solution a generated room may have.
            max_solution_len: longest one (default `max_actions`: every room is winnable).
            invalid_penalty: reward added to a turn whose answer has an unknown action or
                no `<answer>...</answer>`.
            rooms_file: play rooms from a JSONL file (`"ragen"`: RAGEN's reference rooms)
                instead of generating them; `reset(seed=k)` picks the room whose `seed` is k
                when there is one.
            rooms_set: with `rooms_file`, keep only lines whose `set` field matches.
            positions: add a line under the grid that says where the boxes and targets are,
                in rows down or up and columns right or left of the player, so a model need
                not find them in the grid (the LLM recipe's observation).
        """
        super().__init__()
        size = (room_size, room_size) if isinstance(room_size, int) else tuple(room_size)
        if len(size) != 2 or min(size) < 3:
            raise ValueError(f"room_size must be an int >= 3 or (height, width), got {room_size!r}")
        if num_boxes < 1 or max_actions < 1 or max_actions_per_turn < 1:
            raise ValueError("num_boxes, max_actions and max_actions_per_turn must be >= 1")
        self.height, self.width = int(size[0]), int(size[1])
        self.num_boxes = num_boxes
        self.max_actions = max_actions
        self.max_actions_per_turn = max_actions_per_turn
        if max_turns is not None:
            if max_turns < 1:
                raise ValueError(f"max_turns must be >= 1, got {max_turns}")
            self.max_turns = max_turns  # type: ignore[misc]  # per-instance override
        self.difficulty = difficulty
        self.min_solution_len = min_solution_len
        self.max_solution_len = max_actions if max_solution_len is None else max_solution_len
        self.invalid_penalty = float(invalid_penalty)
        self.positions = bool(positions)
        self.rooms = load_rooms(rooms_file, rooms_set) if rooms_file is not None else None
        self._room_by_seed = {s: i for i, (s, _, _) in enumerate(self.rooms or ()) if s is not None}
        self._format_hint = (
            f"Answer with up to {max_actions_per_turn} of Up, Down, Left, Right, "
            "e.g. <answer>Up || Left</answer>."
        )

    # -- episode ----------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Draw a room (from `self.np_random`, or the rooms file) and show it."""
        super().reset(seed=seed)
        if self.rooms is not None:
            if seed is not None and seed in self._room_by_seed:
                index = self._room_by_seed[seed]
            else:
                index = int(self.np_random.integers(len(self.rooms)))
            _, room, self.optimal_len = self.rooms[index]
        else:
            room, self.optimal_len = generate_room(
                self.np_random,
                height=self.height,
                width=self.width,
                num_boxes=self.num_boxes,
                min_solution_len=self.min_solution_len,
                max_solution_len=self.max_solution_len,
                difficulty=self.difficulty,
            )
        self._start = room
        self._floor, self._targets, self._deltas = room.floor, room.targets, room.deltas()
        self._boxes = set(room.boxes)
        self._player = room.player
        self._on_target = len(self._boxes & self._targets)
        self._actions_left = self.max_actions
        self._turns = 0
        self._done = False
        # Status first, grid last: every grid then ends where the answer starts, so a model
        # reads cells at the same distance every turn (the legend is in the system prompt).
        obs = f"{self._status()}\n{self._view()}"
        return obs, {"optimal_len": self.optimal_len, "num_boxes": len(self._boxes)}

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Apply the actions in `<answer>...</answer>`, up to `max_actions_per_turn`."""
        self.require_reset()
        if self._done:
            return (
                "The episode is over; call reset().",
                0.0,
                True,
                False,
                {"success": self._solved(), "valid": False, "actions_taken": 0},
            )
        self._turns += 1
        moves, problem = self._parse(action)
        reward = 0.0 if problem is None else self.invalid_penalty
        taken = blocked = 0
        for a in moves[: min(self.max_actions_per_turn, self._actions_left)]:
            before = self._player
            reward += self._move(self._deltas[a])
            taken += 1
            blocked += self._player == before
            if self._on_target == len(self._boxes):
                break
        self._actions_left -= taken
        solved = self._on_target == len(self._boxes)
        if solved:
            reward += SOLVED_REWARD
        terminated = solved
        truncated = not solved and (self._actions_left <= 0 or self._turns >= self.max_turns)
        self._done = terminated or truncated
        feedback = "" if problem is None else f"{problem} {self._format_hint}\n"
        if solved:
            tail = "Solved!"
        elif truncated:
            tail = "Out of actions." if self._actions_left <= 0 else "Out of turns."
        else:
            tail = f"Actions left: {self._actions_left}."  # the format is in the first turn
        info = {
            "success": solved,
            "valid": problem is None,
            "actions_taken": taken,
            "blocked": blocked,
            "moved": blocked < taken,
            "actions_left": self._actions_left,
            "boxes_on_target": self._on_target,
        }
        return f"{feedback}{tail}\n{self._view()}", round(reward, 6), terminated, truncated, info

    # -- helpers ----------------------------------------------------------------------------

    def _view(self) -> str:
        """The grid, and under it the positions line when `positions` is on.

        >>> env = SokobanEnv(positions=True)
        >>> print(env.reset(seed=5)[0].splitlines()[-1])
        Boxes at 2 down 1 right. Targets at 3 down 1 right.
        """
        if not self.positions:
            return self.render()
        pr, pc = divmod(self._player, self.width)

        def where(cells: Iterable[int]) -> str:
            out = []
            for c in sorted(cells):
                dr, dc = c // self.width - pr, c % self.width - pc
                rows = f"{abs(dr)} {'down' if dr > 0 else 'up'}" if dr else ""
                cols = f"{abs(dc)} {'right' if dc > 0 else 'left'}" if dc else ""
                out.append(" ".join(x for x in (rows, cols) if x) or "here")
            return ", ".join(out)

        on = self._boxes & self._targets
        parts = []
        if self._boxes - on:
            parts.append(f"Boxes at {where(self._boxes - on)}.")
        if self._targets - on:
            parts.append(f"Targets at {where(self._targets - on)}.")
        if on:
            parts.append(f"Boxes on targets at {where(on)}.")
        return f"{self.render()}\n{' '.join(parts)}"

    def _status(self) -> str:
        return f"Actions left: {self._actions_left}. {self._format_hint}"

    def _solved(self) -> bool:
        return self._on_target == len(self._boxes)

    def _parse(self, action: str) -> tuple[list[int], str | None]:
        """Action ids up to the first unknown word, and what was wrong (None if nothing)."""
        answer = parse_answer(action)
        if answer is None:
            return [], "No <answer>...</answer> found."
        moves = []
        for word in _SPLIT_RE.split(answer.strip()):
            if not word:
                continue
            a = _ACTION_IDS.get(word.lower())
            if a is None:
                shown = word if len(word) <= 20 else word[:20] + "..."
                return moves, f"Unknown action {shown!r}."
            moves.append(a)
        if not moves:
            return [], "Empty answer."
        return moves, None

    def _move(self, d: int) -> float:
        """Move the player by `d`, pushing a box if there is one; the reward of that action."""
        t = self._player + d
        if not self._floor[t]:
            return STEP_REWARD
        boxes = self._boxes
        if t not in boxes:
            self._player = t
            return STEP_REWARD
        u = t + d
        if not self._floor[u] or u in boxes:
            return STEP_REWARD
        boxes.remove(t)
        boxes.add(u)
        self._player = t
        change = (u in self._targets) - (t in self._targets)
        self._on_target += change
        if change > 0:
            return STEP_REWARD + BOX_ON_TARGET_REWARD
        if change < 0:
            return STEP_REWARD + BOX_OFF_TARGET_REWARD
        return STEP_REWARD

    # -- public views -----------------------------------------------------------------------

    @property
    def room(self) -> Room:
        """The current position as an immutable `Room`."""
        self.require_reset()
        start = self._start
        return Room(
            start.height,
            start.width,
            start.floor,
            start.targets,
            frozenset(self._boxes),
            self._player,
        )

    def render(self) -> str:
        """The current grid in RAGEN's symbols."""
        self.require_reset()
        s = self._start
        cells = list(_base_cells(s.floor, s.targets))
        for b in self._boxes:
            cells[b] = "√" if cells[b] == "O" else "X"
        p = self._player
        cells[p] = "S" if cells[p] == "O" else "P"
        w = s.width
        return "\n".join(["".join(cells[i : i + w]) for i in range(0, len(cells), w)])

    def expert_actions(self, max_actions: int | None = None) -> list[str]:
        """Optimal next actions from the current position (an expert policy)."""
        return expert_actions(self.room, max_actions=max_actions)

    def candidate_answers(self) -> list[str]:
        """One answer per move: `<answer>Up</answer>`, ... (expert iteration's search)."""
        return [f"<answer>{a}</answer>" for a in ACTIONS]

    def state_key(self) -> tuple[frozenset[int], int]:
        """Boxes and player: the position, whatever the actions left (search)."""
        self.require_reset()
        return frozenset(self._boxes), self._player

    def clone(self) -> SokobanEnv:
        """An independent copy, mid-episode, at about half the cost of `copy.deepcopy`: the
        room's layout and the settings are immutable and shared; the boxes and the random
        generator are copied."""
        new = copy.copy(self)
        if self._has_reset:
            new._boxes = set(self._boxes)
        if self._np_random is not None:
            new._np_random = copy.deepcopy(self._np_random)
        return new

    def sample_action(self, rng: np.random.Generator) -> str:
        """A well-formed random answer: 1..`max_actions_per_turn` uniform actions."""
        n = int(rng.integers(1, self.max_actions_per_turn + 1))
        return (
            "<answer>" + " || ".join(ACTIONS[int(i)] for i in rng.integers(4, size=n)) + "</answer>"
        )


@lru_cache(maxsize=4096)
def _base_cells(floor: bytes, targets: frozenset[int]) -> tuple[str, ...]:
    """Walls, floor and targets of a layout (cached: a layout renders on every step)."""
    cells = ["_" if f else "#" for f in floor]
    for t in targets:
        cells[t] = "O"
    return tuple(cells)
