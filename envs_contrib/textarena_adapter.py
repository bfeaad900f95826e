"""`TextArenaEnv`: TextArena's single-player games as `TokenEnv`s (extra `textarena`).

Only games that run offline are allowed (`OFFLINE_GAMES`): TextArena's word games (Wordle,
Hangman, WordSearch, SpellingBee, WordLadder, WordChains...) call `nltk.download` when their
module is imported, and TwentyQuestions / GuessWho call a hosted LLM; those are refused.

TextArena draws its randomness from Python's global `random` module. The adapter gives each
env its own `random` state (seeded from `self.np_random`) and swaps it in under a lock for
every TextArena call, so episodes are reproducible and envs in threads do not disturb each
other (nor the caller's `random` state).

Each turn the model's move goes in `<answer>...</answer>` (e.g. `<answer>[1 2 3 4]</answer>`
for Mastermind); without the tag the whole reply is passed on. The observation is the game's
new messages. The reward is 0 until the game ends, then TextArena's final reward (1 for a
win, the fraction completed otherwise). Success = the game's reward is 1 (solved).

>>> env = TextArenaEnv("GuessTheNumber-v0")
>>> obs, info = env.reset(seed=0)
>>> "Guess The Number" in obs
True
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from agentrl.envs.base import Observation, TokenEnv
from agentrl.envs.parsing import parse_answer

_LOCK = threading.Lock()
"""TextArena games share Python's global `random`; one call at a time, with its own state."""


def _digits(k: int, high: int) -> Callable[[np.random.Generator], str]:
    return lambda rng: "[" + " ".join(str(int(x)) for x in rng.integers(1, high + 1, size=k)) + "]"


def _cells(n: int, high: int, extra: str = "") -> Callable[[np.random.Generator], str]:
    def sample(rng: np.random.Generator) -> str:
        parts = [str(int(x)) for x in rng.integers(0 if not extra else 1, high, size=n)]
        if extra:
            parts.append(extra[int(rng.integers(len(extra)))])
        return f"[{' '.join(parts)}]"

    return sample


OFFLINE_GAMES: dict[str, Callable[[np.random.Generator], str]] = {
    "Mastermind": _digits(4, 6),
    "Sudoku": lambda rng: "[" + " ".join(str(int(x)) for x in rng.integers(1, 10, size=3)) + "]",
    "TowerOfHanoi": lambda rng: "[{} {}]".format(*rng.choice(list("ABC"), size=2, replace=False)),
    "GuessTheNumber": lambda rng: f"[{int(rng.integers(1, 21))}]",
    "Minesweeper": _cells(2, 5),
    "LightsOut": _cells(2, 5),
    "FifteenPuzzle": lambda rng: f"[{['up', 'down', 'left', 'right'][int(rng.integers(4))]}]",
    "Crosswords": _cells(2, 6, "abcdefghijklmnopqrstuvwxyz"),
    "PegJump": _cells(2, 15),
    "RushHour": lambda rng: f"[{'ABCDEX'[int(rng.integers(6))]}{'+-'[int(rng.integers(2))]}]",
    "LogicPuzzle": lambda rng: "[x]",
    "Game2048": lambda rng: f"[{['Up', 'Down', 'Left', 'Right'][int(rng.integers(4))]}]",
}
"""Single-player game families checked to run offline, with a random-move sampler each."""

LEFT_OUT: dict[str, str] = {
    "Wordle": "calls nltk.download('words') on import",
    "Hangman": "calls nltk.download('words') on import",
    "WordSearch": "calls nltk.download('words') on import",
    "SpellingBee": "needs the nltk 'words' corpus (downloaded at run time)",
    "WordLadder": "calls nltk.download('words') on import",
    "WordChains": "calls nltk.download('words') on import",
    "TwentyQuestions": "its game master is a hosted LLM (OpenRouter)",
    "GuessWho": "its game master is a hosted LLM (OpenRouter)",
    "Klondike": "its module has a syntax error in textarena 0.7.4",
    "ThreeCardMonte": "raises ValueError on a malformed move (bug in textarena 0.7.4)",
    "Cryptarithm": "raises ValueError on an invalid move (bug in textarena 0.7.4)",
    "Slitherlink": "raises ValueError on an invalid move (bug in textarena 0.7.4)",
}
"""Single-player games left out (offline use impossible, or broken in 0.7.4), and why."""


def _family(game_id: str) -> str:
    return "Game2048" if game_id.startswith("2048") else game_id.split("-v")[0]


class TextArenaEnv(TokenEnv):
    """A TextArena single-player game (Mastermind, Sudoku, Tower of Hanoi...) in text."""

    system_prompt: ClassVar[str] = (
        "You are playing a text game. Read the rules in the first message and answer each "
        "turn with your move in the game's format inside <answer>...</answer>, "
        "e.g. <answer>[1 2 3 4]</answer>."
    )
    max_turns: ClassVar[int] = 20

    def __init__(
        self,
        game_id: str,
        max_turns: int | None = None,
        game_max_turns: int | None = None,
        **game_kwargs: Any,
    ) -> None:
        """Build TextArena's `game_id` without its wrappers.

        Args:
            game_id: a TextArena id such as `Mastermind-v0` or `Sudoku-v0-very-easy`; the
                game's family must be in `OFFLINE_GAMES`.
            max_turns: turns per episode (default: the game's own turn limit, doubled to
                leave room for its one-retry rule on invalid moves, at most 100); the
                adapter truncates after it.
            game_max_turns: the game's own turn limit (its `max_turns`), if not TextArena's.
            game_kwargs: passed to the game's constructor over TextArena's defaults
                (e.g. `code_length` for Mastermind).
        """
        super().__init__()
        family = _family(game_id)
        if family in LEFT_OUT:
            raise ValueError(f"TextArena game {game_id!r} is left out: {LEFT_OUT[family]}")
        if family not in OFFLINE_GAMES:
            raise ValueError(
                f"TextArena game {game_id!r} is not a known offline single-player game; "
                f"supported: {', '.join(sorted(OFFLINE_GAMES))}"
            )
        try:
            import textarena as ta
        except ImportError as e:
            raise ImportError(
                "TextArenaEnv needs the textarena package: pip install 'agentrl[textarena]'"
            ) from e
        raw_id = game_id if game_id.endswith("-raw") else f"{game_id}-raw"
        if raw_id not in ta.envs.registration.ENV_REGISTRY:
            raise ValueError(f"TextArena has no game {game_id!r}")
        self.game_id = game_id
        if game_max_turns is not None:
            game_kwargs["max_turns"] = game_max_turns
        self._sampler = OFFLINE_GAMES[family]
        self._random = random.Random(0)
        self.game = self._call(lambda: ta.make(raw_id, **game_kwargs))
        game_turns = getattr(self.game, "max_turns", None)
        default = min(2 * int(game_turns), 100) if game_turns else 20
        self.max_turns = max_turns or default  # type: ignore[misc]  # per-instance override
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")

    def _call(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` with this env's `random` state in the global `random` module."""
        with _LOCK:
            outer = random.getstate()
            random.setstate(self._random.getstate())
            try:
                return fn()
            finally:
                self._random.setstate(random.getstate())
                random.setstate(outer)

    def _messages(self) -> str:
        _, messages = self._call(self.game.get_observation)
        from textarena import ObservationType

        texts = [str(m).strip() for _, m, kind in messages if kind != ObservationType.PLAYER_ACTION]
        return "\n\n".join(t for t in texts if t)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start a game seeded from `self.np_random`."""
        super().reset(seed=seed)
        game_seed = int(self.np_random.integers(2**31 - 1))
        self._random.seed(game_seed)
        self._call(lambda: self.game.reset(num_players=1, seed=game_seed))
        self._turns = 0
        self._done = False
        return self._messages(), {}

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Pass the move (the `<answer>` content, else the whole reply) to the game."""
        self.require_reset()
        if self._done:
            return "The episode is over; call reset().", 0.0, True, False, {"success": False}
        self._turns += 1
        answer = parse_answer(action)
        move = answer if answer is not None else action
        move = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", "", move)[:2000]
        done, _ = self._call(lambda: self.game.step(action=move))
        text = self._messages()
        invalid = bool(getattr(self.game.state, "error_count", 0))  # reset by a valid move
        info: dict[str, Any] = {"valid": not invalid}
        if done:
            rewards, game_info = self._call(self.game.close)
            reward = float(rewards.get(0, 0.0)) if rewards else 0.0
            reason = str(game_info.get(0, {}).get("reason", "")) if game_info else ""
            self._done = True
            if game_info and game_info.get(0, {}).get("invalid_move"):
                info["valid"] = False
            info.update(success=reward >= 1.0, reason=reason)
            return f"{text}\n\n{reason}".strip(), reward, True, False, info
        if self._turns >= self.max_turns:
            self._done = True
            info["success"] = False
            return f"{text}\n\nOut of turns.".strip(), 0.0, False, True, info
        return text, 0.0, False, False, info

    def sample_action(self, rng: np.random.Generator) -> str:
        """A random move in the game's format."""
        return f"<answer>{self._sampler(rng)}</answer>"


class Mastermind(TextArenaEnv):
    """TextArena Mastermind: find a 4-digit code (digits 1-6) from peg feedback in 10 guesses."""

    def __init__(self, max_turns: int | None = None, **game_kwargs: Any) -> None:
        """Mastermind-v0 with a 10-guess limit; `game_kwargs` go to the game."""
        super().__init__("Mastermind-v0", max_turns, **{"game_max_turns": 10, **game_kwargs})


class Sudoku(TextArenaEnv):
    """TextArena Sudoku (very easy: 75 clues, 6 cells to fill) within 12 moves."""

    def __init__(self, max_turns: int | None = None, **game_kwargs: Any) -> None:
        """Sudoku-v0-very-easy with a 12-move limit; `game_kwargs` go to the game."""
        super().__init__("Sudoku-v0-very-easy", max_turns, **{"game_max_turns": 12, **game_kwargs})


class TowerOfHanoi(TextArenaEnv):
    """TextArena Tower of Hanoi with 3 disks (7 moves needed, 14 allowed)."""

    def __init__(self, max_turns: int | None = None, **game_kwargs: Any) -> None:
        """TowerOfHanoi-v0; `game_kwargs` go to the game."""
        super().__init__("TowerOfHanoi-v0", max_turns, **game_kwargs)


class GuessTheNumber(TextArenaEnv):
    """TextArena Guess The Number: a number in 1..20, 10 guesses."""

    def __init__(self, max_turns: int | None = None, **game_kwargs: Any) -> None:
        """GuessTheNumber-v0; `game_kwargs` go to the game."""
        super().__init__("GuessTheNumber-v0", max_turns, **game_kwargs)


class Minesweeper(TextArenaEnv):
    """TextArena Minesweeper on a 5x5 board with 5 mines, 20 moves."""

    def __init__(self, max_turns: int | None = None, **game_kwargs: Any) -> None:
        """Minesweeper-v0-small with a 20-move limit; `game_kwargs` go to the game."""
        super().__init__("Minesweeper-v0-small", max_turns, **{"game_max_turns": 20, **game_kwargs})


class LightsOut(TextArenaEnv):
    """TextArena Lights Out on a 5x5 grid, 20 presses."""

    def __init__(self, max_turns: int | None = None, **game_kwargs: Any) -> None:
        """LightsOut-v0; `game_kwargs` go to the game."""
        super().__init__("LightsOut-v0", max_turns, **game_kwargs)
