"""An exact Sokoban solver (A* over player moves) that doubles as an expert policy.

Every move costs 1, pushes included, matching the env's action budget. The heuristic (sum
over boxes of the grid distance to the nearest target) never overestimates and changes by at
most 1 per move, so the first solution A* finds is optimal.

>>> from agentrl.envs.sokoban.room import Room
>>> room = Room.from_grid(["######", "#P_XO#", "######"])
>>> solve(room)
['Right', 'Right']
>>> expert_actions(room, max_actions=1)
['Right']
"""

from __future__ import annotations

import heapq
import itertools

from agentrl.envs.sokoban.room import ACTIONS, Room


class UnsolvableRoomError(ValueError):
    """The room has no solution (or none within the search budget)."""


def _target_distances(room: Room) -> list[int]:
    """Grid distance (through floor, ignoring boxes) from every cell to its nearest target."""
    far = 1 << 20
    dist = [far] * len(room.floor)
    frontier = list(room.targets)
    for t in frontier:
        dist[t] = 0
    deltas = room.deltas()
    while frontier:
        nxt = []
        for c in frontier:
            for d in deltas:
                n = c + d
                if room.floor[n] and dist[n] == far:
                    dist[n] = dist[c] + 1
                    nxt.append(n)
        frontier = nxt
    return dist


def solve(room: Room, *, max_states: int = 2_000_000) -> list[str] | None:
    """An optimal action list (`"Up"`, ...) that solves `room`; `[]` if solved, None if unsolvable.

    Raises `UnsolvableRoomError` when the search visits `max_states` positions without
    finishing (a large room with many boxes).
    """
    if room.is_solved():
        return []
    floor, targets, deltas = room.floor, room.targets, room.deltas()
    box_dist = _target_distances(room)

    def h(boxes: frozenset[int]) -> int:
        return sum(box_dist[b] for b in boxes)

    start = (room.player, room.boxes)
    if h(room.boxes) >= 1 << 20:
        return None  # a box can never reach any target
    parent: dict[tuple[int, frozenset[int]], tuple[tuple[int, frozenset[int]], int] | None] = {
        start: None
    }
    g_of = {start: 0}
    tie = itertools.count()
    heap = [(h(room.boxes), next(tie), start)]
    while heap:
        _, _, state = heapq.heappop(heap)
        player, boxes = state
        g = g_of[state]
        if boxes == targets:
            actions = []
            while (link := parent[state]) is not None:
                state, action = link
                actions.append(ACTIONS[action])
            return actions[::-1]
        for action, d in enumerate(deltas):
            t = player + d
            if not floor[t]:
                continue
            if t in boxes:
                u = t + d
                if not floor[u] or u in boxes or box_dist[u] >= 1 << 20:
                    continue
                new = (t, boxes - {t} | {u})
            else:
                new = (t, boxes)
            old = g_of.get(new)
            if old is not None and old <= g + 1:
                continue
            g_of[new] = g + 1
            parent[new] = (state, action)
            heapq.heappush(heap, (g + 1 + h(new[1]), next(tie), new))
        if len(g_of) > max_states:
            raise UnsolvableRoomError(f"search gave up after {max_states} positions")
    return None


def expert_actions(room: Room, *, max_actions: int | None = None) -> list[str]:
    """The next optimal action(s) from `room` (an expert policy); `[]` if solved or unsolvable."""
    actions = solve(room) or []
    return actions if max_actions is None else actions[:max_actions]
