"""Sokoban rooms: a flat-index representation, the RAGEN text render, and room generation.

Cells are numbered `row * width + col`. The outer ring is always wall, so a move never
leaves the grid and the inner loops need no bounds checks.

Generation carves a floor by a random walk, places the targets, then runs a breadth-first
search *backwards* from every solved state (boxes on the targets, player anywhere): the
search depth of a state is exactly its optimal solution length, so every room we hand out
is solvable and its optimal length is known without a separate solve.

>>> room = Room.from_grid(["#####", "#P_O#", "#_X_#", "#####"])
>>> print(room.render())
#####
#P_O#
#_X_#
#####
>>> room.num_boxes, room.is_solved()
(1, False)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET = (
    "#",
    "_",
    "O",
    "X",
    "√",
    "P",
    "S",
)
LEGEND = "# wall, _ floor, O target, X box, √ box on target, P you, S you on target"
ACTIONS = ("Up", "Down", "Left", "Right")
"""Action names, in the order of their ids 0..3."""


class RoomGenerationError(RuntimeError):
    """No room with the asked-for properties was found within the attempt budget."""


@dataclass(frozen=True)
class Room:
    """One Sokoban position: layout (walls, targets) plus boxes and player."""

    height: int
    width: int
    floor: bytes
    """1 where a cell is walkable (floor or target), 0 for a wall; `height * width` entries."""
    targets: frozenset[int]
    boxes: frozenset[int]
    player: int

    @property
    def num_boxes(self) -> int:
        """Number of boxes (equals the number of targets)."""
        return len(self.boxes)

    def deltas(self) -> tuple[int, int, int, int]:
        """Index offsets of Up, Down, Left, Right."""
        return (-self.width, self.width, -1, 1)

    def is_solved(self) -> bool:
        """Every box is on a target."""
        return self.boxes == self.targets

    def render(self) -> str:
        """The grid in RAGEN's symbols, one row a line."""
        return render_grid(
            self.height, self.width, self.floor, self.targets, self.boxes, self.player
        )

    @classmethod
    def from_grid(cls, rows: Sequence[str]) -> Room:
        """Parse a grid in RAGEN's symbols (the inverse of `render`)."""
        height, width = len(rows), len(rows[0]) if rows else 0
        if height < 3 or width < 3 or any(len(r) != width for r in rows):
            raise ValueError(f"grid must be a rectangle of at least 3x3 cells, got {list(rows)}")
        floor = bytearray(height * width)
        targets, boxes, players = set(), set(), []
        for r, row in enumerate(rows):
            for c, ch in enumerate(row):
                i = r * width + c
                if ch not in "#_OX√PS":
                    raise ValueError(f"unknown symbol {ch!r} at row {r}, col {c}; legend: {LEGEND}")
                if ch != WALL:
                    floor[i] = 1
                    if r in (0, height - 1) or c in (0, width - 1):
                        raise ValueError(f"the outer ring must be wall, found {ch!r} at ({r}, {c})")
                if ch in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET):
                    targets.add(i)
                if ch in (BOX, BOX_ON_TARGET):
                    boxes.add(i)
                if ch in (PLAYER, PLAYER_ON_TARGET):
                    players.append(i)
        if len(players) != 1:
            raise ValueError(f"grid needs exactly one player (P or S), found {len(players)}")
        if not boxes or len(boxes) != len(targets):
            raise ValueError(
                f"grid needs as many boxes as targets (>0): {len(boxes)} vs {len(targets)}"
            )
        return cls(height, width, bytes(floor), frozenset(targets), frozenset(boxes), players[0])


def render_grid(
    height: int,
    width: int,
    floor: bytes,
    targets: Iterable[int],
    boxes: Iterable[int],
    player: int,
) -> str:
    """Render a position in RAGEN's symbols (`#_OX√PS`), rows joined by newlines."""
    cells = [FLOOR if f else WALL for f in floor]
    for t in targets:
        cells[t] = TARGET
    for b in boxes:
        cells[b] = BOX_ON_TARGET if cells[b] == TARGET else BOX
    cells[player] = PLAYER_ON_TARGET if cells[player] == TARGET else PLAYER
    return "\n".join("".join(cells[r * width : (r + 1) * width]) for r in range(height))


# Shapes stamped along the random walk that carves the floor (offsets from the walker).
_BRUSHES = (
    ((0, 0),),
    ((0, 0), (0, 1)),
    ((0, 0), (1, 0)),
    ((0, 0), (0, 1), (1, 0)),
    ((0, 0), (0, -1), (0, 1)),
    ((0, 0), (-1, 0), (1, 0)),
)


def _carve_floor(rng: np.random.Generator, height: int, width: int, num_steps: int) -> bytearray:
    """A connected floor made by a random walk that stamps small brushes (RAGEN-style)."""
    floor = bytearray(height * width)
    draws = rng.integers(0, 1 << 30, size=2 * num_steps + 2)
    r = 1 + int(draws[0]) % (height - 2)
    c = 1 + int(draws[1]) % (width - 2)
    direction = 0
    steps = ((-1, 0), (1, 0), (0, -1), (0, 1))
    for k in range(num_steps):
        a, b = int(draws[2 + 2 * k]), int(draws[3 + 2 * k])
        for dr, dc in _BRUSHES[a % len(_BRUSHES)]:
            rr, cc = r + dr, c + dc
            if 0 < rr < height - 1 and 0 < cc < width - 1:
                floor[rr * width + cc] = 1
        if (b >> 2) % 100 < 35:  # change direction with probability 0.35
            direction = b % 4
        dr, dc = steps[direction]
        if 0 < r + dr < height - 1 and 0 < c + dc < width - 1:
            r, c = r + dr, c + dc
    return floor


def reverse_distances(
    floor: bytes, width: int, targets: frozenset[int], max_depth: int, max_states: int = 200_000
) -> dict[tuple[int, frozenset[int]], int]:
    """Optimal solution length of every position within `max_depth` moves of being solved.

    A breadth-first search from all solved positions (boxes on `targets`, player on any free
    cell) that undoes moves: a plain step back, or a step back that pulls the box the player
    had pushed. Keys are `(player, boxes)`; the search stops after `max_states` positions.
    """
    deltas = (-width, width, -1, 1)
    dist: dict[tuple[int, frozenset[int]], int] = {}
    frontier = []
    for p in range(len(floor)):
        if floor[p] and p not in targets:
            key = (p, targets)
            dist[key] = 0
            frontier.append(key)
    depth = 0
    while frontier and depth < max_depth and len(dist) < max_states:
        depth += 1
        nxt = []
        for p, boxes in frontier:
            for d in deltas:
                q = p - d  # where the player stood before moving by d
                if not floor[q] or q in boxes:
                    continue
                key = (q, boxes)
                if key not in dist:
                    dist[key] = depth
                    nxt.append(key)
                if p + d in boxes:  # that move pushed the box now at p+d from p
                    key = (q, boxes - {p + d} | {p})
                    if key not in dist:
                        dist[key] = depth
                        nxt.append(key)
        frontier = nxt
    return dist


def generate_room(
    rng: np.random.Generator,
    *,
    height: int = 6,
    width: int = 6,
    num_boxes: int = 1,
    min_solution_len: int = 1,
    max_solution_len: int = 10,
    difficulty: float | None = None,
    max_attempts: int = 200,
) -> tuple[Room, int]:
    """A random solvable room and its optimal solution length, drawn only from `rng`.

    The optimal length lies in `[min_solution_len, max_solution_len]`. With `difficulty`
    None, the position is drawn uniformly among all positions in that range (short solutions
    are common, as in RAGEN's generator); a `difficulty` in [0, 1] instead asks for the
    solution length at that fraction of the way from the shortest to the longest one this
    layout allows (1.0: the hardest position the layout has within the range).
    """
    if height < 3 or width < 3:
        raise ValueError(f"room must be at least 3x3, got {height}x{width}")
    if not 1 <= min_solution_len <= max_solution_len:
        raise ValueError(
            f"need 1 <= min_solution_len <= max_solution_len, got {min_solution_len}, {max_solution_len}"
        )
    if difficulty is not None and not 0.0 <= difficulty <= 1.0:
        raise ValueError(f"difficulty must be in [0, 1] or None, got {difficulty}")
    num_steps = int(1.7 * (height + width))
    for _ in range(max_attempts):
        floor = _carve_floor(rng, height, width, num_steps)
        cells = [i for i, f in enumerate(floor) if f]
        if len(cells) < 2 * num_boxes + 1:
            continue
        picks = rng.choice(len(cells), size=num_boxes, replace=False)
        targets = frozenset(cells[int(i)] for i in picks)
        dist = reverse_distances(bytes(floor), width, targets, max_solution_len)
        candidates = [(key, d) for key, d in dist.items() if d >= min_solution_len]
        if not candidates:
            continue
        if difficulty is not None:
            lengths = sorted({d for _, d in candidates})
            want = lengths[0] + difficulty * (lengths[-1] - lengths[0])
            best = min(lengths, key=lambda n: (abs(n - want), -n))
            candidates = [(key, d) for key, d in candidates if d == best]
        (player, boxes), length = candidates[int(rng.integers(len(candidates)))]
        return Room(height, width, bytes(floor), targets, boxes, player), length
    raise RoomGenerationError(
        f"no {height}x{width} room with {num_boxes} box(es) and an optimal solution of "
        f"{min_solution_len}..{max_solution_len} moves in {max_attempts} attempts; "
        "widen the solution-length range or enlarge the room"
    )
