"""`GymTextEnv`: any Gymnasium env with discrete actions as a `TokenEnv`.

The observation text comes from a formatter (built in for FrozenLake, Taxi, CliffWalking and
Blackjack, or given by the user), else from the env's `ansi` render (escape codes stripped)
plus the raw observation. Actions are names (per-env tables for the known envs, else the
action numbers) in `<answer>...</answer>`, several per turn separated by `||` when allowed.
The wrapped env is seeded through its own `reset(seed=...)` with a seed drawn from
`self.np_random`, so the same seed gives the same episode.

    make("gym:Taxi-v3")                        # the registry's gym: prefix builds this class
    GymTextEnv("CliffWalking-v1", max_turns=20)
    GymTextEnv("MyEnv-v0", formatter="mypkg.fmt:describe", action_names=["Stay", "Go"])

>>> env = GymTextEnv("FrozenLake-v1", is_slippery=False, max_actions_per_turn=6)
>>> obs, info = env.reset(seed=0)
>>> print(obs.splitlines()[0])
P___
>>> env.step("<answer>Right || Right || Down || Down || Down || Right</answer>")[1:4]
(1.0, True, False)
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from agentrl.envs.base import Observation, TokenEnv
from envs_contrib._grid import parse_named_actions

Formatter = Callable[[gym.Env, Any], str]
"""`formatter(env, observation) -> text`; `env` is the unwrapped Gymnasium env."""

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def _frozenlake_text(env: gym.Env, obs: Any) -> str:
    desc = [[c.decode() for c in row] for row in env.desc]
    r, c = divmod(int(obs), len(desc[0]))
    cell = desc[r][c]
    grid = [["_" if ch in "SF" else {"H": "O"}.get(ch, ch) for ch in row] for row in desc]
    grid[r][c] = {"H": "X", "G": "√"}.get(cell, "P")
    legend = "P you, _ ice, O hole, G goal, X you in a hole, √ you on the goal"
    return "\n".join("".join(row) for row in grid) + f"\nSymbols: {legend}."


def _taxi_text(env: gym.Env, obs: Any) -> str:
    taxi_row, taxi_col, pass_idx, dest_idx = env.decode(int(obs))
    lines = [[ch.decode() for ch in row] for row in env.desc]
    names = "RGYB"
    lines[1 + taxi_row][2 * taxi_col + 1] = "T"
    where = "in the taxi" if pass_idx == 4 else f"at {names[pass_idx]}"
    return (
        "\n".join("".join(row) for row in lines)
        + f"\nT is the taxi (row {taxi_row}, column {taxi_col}). The passenger is {where}; "
        f"the destination is {names[dest_idx]}. '|' is a wall."
    )


def _cliff_text(env: gym.Env, obs: Any) -> str:
    h, w = env.shape
    r, c = divmod(int(obs), w)
    grid = [["_"] * w for _ in range(h)]
    for cc in range(1, w - 1):
        grid[h - 1][cc] = "C"
    grid[h - 1][w - 1] = "G"
    grid[r][c] = "P"
    legend = "P you, _ safe, C cliff (-100, back to start), G goal; each move costs -1"
    return "\n".join("".join(row) for row in grid) + f"\nSymbols: {legend}."


def _blackjack_text(env: gym.Env, obs: Any) -> str:
    player, dealer, usable_ace = obs
    ace = "yes" if usable_ace else "no"
    return f"Your hand sums to {player} (usable ace: {ace}). The dealer shows {dealer}."


@dataclass(frozen=True)
class KnownEnv:
    """What the adapter knows about one Gymnasium env family."""

    action_names: tuple[str, ...]
    """Names of the discrete actions, in action-id order."""
    formatter: Formatter
    """Observation text."""
    task: str
    """One sentence for the system prompt."""
    max_turns: int
    """Default turns per episode."""
    max_actions_per_turn: int
    """Default actions per answer."""
    success: Callable[[bool, float], bool]
    """`success(terminated, episode_return)`."""


KNOWN_ENVS: dict[str, KnownEnv] = {
    "FrozenLake": KnownEnv(
        ("Left", "Down", "Right", "Up"),
        _frozenlake_text,
        "Walk over the frozen lake to the goal G without falling into a hole O.",
        5,
        5,
        lambda terminated, ret: terminated and ret > 0,
    ),
    "FrozenLake8x8": KnownEnv(
        ("Left", "Down", "Right", "Up"),
        _frozenlake_text,
        "Walk over the frozen lake to the goal G without falling into a hole O.",
        10,
        5,
        lambda terminated, ret: terminated and ret > 0,
    ),
    "Taxi": KnownEnv(
        ("South", "North", "East", "West", "Pickup", "Dropoff"),
        _taxi_text,
        "Drive the taxi to the passenger, pick them up and drop them off at the destination "
        "(+20; -1 per move; -10 for an illegal pickup or dropoff).",
        10,
        5,
        lambda terminated, ret: terminated,
    ),
    "CliffWalking": KnownEnv(
        ("Up", "Right", "Down", "Left"),
        _cliff_text,
        "Walk to the goal G without stepping off the cliff C.",
        10,
        5,
        lambda terminated, ret: terminated,
    ),
    "Blackjack": KnownEnv(
        ("Stick", "Hit"),
        _blackjack_text,
        "Play blackjack against the dealer: get closer to 21 than the dealer without going "
        "over. Hit draws a card; Stick ends your turn.",
        6,
        1,
        lambda terminated, ret: ret > 0,
    ),
}
"""Action names, formatters and defaults per env family (the id without `-vN`)."""


def _family(env_id: str) -> str:
    return re.sub(r"-v\d+$", "", env_id.split("/")[-1])


def _resolve_formatter(formatter: Formatter | str) -> Formatter:
    if callable(formatter):
        return formatter
    from agentrl.envs.registry import _resolve

    target = _resolve(formatter)
    if not callable(target):
        raise TypeError(f"formatter {formatter!r} is not callable")
    return target


def make_gym(env_id: str, **kwargs: Any) -> gym.Env:
    """`gym.make(env_id)`, moving a deprecated version (`Taxi-v3`) to the newest one with a warning."""
    try:
        return gym.make(env_id, **kwargs)
    except gym.error.DeprecatedEnv:
        family = env_id.rsplit("-v", 1)[0]
        versions = [
            int(spec.version)
            for spec in gym.registry.values()
            if spec.version is not None
            and f"{spec.namespace + '/' if spec.namespace else ''}{spec.name}" == family
        ]
        if not versions:
            raise
        newer = f"{family}-v{max(versions)}"
        warnings.warn(
            f"{env_id} is deprecated in gymnasium {gym.__version__}; using {newer}", stacklevel=2
        )
        return gym.make(newer, **kwargs)


class GymTextEnv(TokenEnv):
    """A Gymnasium env with discrete actions, played in text (`gym:ENV_ID`)."""

    system_prompt: ClassVar[str] = "You are playing a Gymnasium environment."
    max_turns: ClassVar[int] = 10
    ends_within_max_turns: ClassVar[bool] = True

    def __init__(
        self,
        env_id: str,
        formatter: Formatter | str | None = None,
        action_names: Sequence[str] | None = None,
        max_turns: int | None = None,
        max_actions_per_turn: int | None = None,
        invalid_penalty: float = -0.1,
        **env_kwargs: Any,
    ) -> None:
        """Wrap `gym.make(env_id, **env_kwargs)`.

        Args:
            env_id: a registered Gymnasium id, e.g. `FrozenLake-v1`, `Taxi-v3`, `Blackjack-v1`.
            formatter: `formatter(unwrapped_env, observation) -> str`, or `"module:function"`;
                default: the built-in one for known envs, else the ansi render.
            action_names: names of the actions in id order; default: the built-in table for
                known envs, else the numbers `0..n-1`.
            max_turns: turns per episode; the env truncates after it.
            max_actions_per_turn: actions taken from one answer (separated by `||`).
            invalid_penalty: reward of a turn whose answer has an unknown action or no
                `<answer>...</answer>`.
            env_kwargs: passed to `gym.make` (e.g. `is_slippery=False`).
        """
        super().__init__()
        known = KNOWN_ENVS.get(_family(env_id))
        render_mode = env_kwargs.pop("render_mode", None)
        self.env_id = env_id
        self.env = make_gym(env_id, render_mode=render_mode, **env_kwargs)
        text_given = formatter is not None or known is not None
        if (
            render_mode is None
            and not text_given
            and "ansi" in self.env.metadata.get("render_modes", ())
        ):
            self.env.close()  # rebuild with the text render, which the fallback formatter uses
            self.env = make_gym(env_id, render_mode="ansi", **env_kwargs)
        space = self.env.action_space
        if not isinstance(space, gym.spaces.Discrete):
            raise ValueError(
                f"{env_id} has action space {space}; GymTextEnv needs a Discrete action space"
            )
        self._start = int(space.start)
        n = int(space.n)
        if action_names is None:
            action_names = known.action_names if known else [str(self._start + i) for i in range(n)]
        if len(action_names) != n:
            raise ValueError(f"{env_id} has {n} actions but {len(action_names)} names were given")
        self.action_names = tuple(str(a) for a in action_names)
        self._action_ids = {" ".join(a.lower().split()): i for i, a in enumerate(self.action_names)}
        if len(self._action_ids) != n:
            raise ValueError(f"action names must be distinct (ignoring case): {action_names}")
        self._split_words = all(" " not in a for a in self.action_names)
        if formatter is not None:
            self.formatter: Formatter | None = _resolve_formatter(formatter)
        else:
            self.formatter = known.formatter if known else None
        self.max_turns = max_turns or (known.max_turns if known else 10)  # type: ignore[misc]
        self.max_actions_per_turn = max_actions_per_turn or (
            known.max_actions_per_turn if known else 1
        )
        if self.max_turns < 1 or self.max_actions_per_turn < 1:
            raise ValueError("max_turns and max_actions_per_turn must be >= 1")
        self._success = known.success if known else (lambda terminated, ret: terminated and ret > 0)
        self.invalid_penalty = float(invalid_penalty)
        task = known.task if known else f"You are playing the Gymnasium environment {env_id}."
        example = " || ".join(self.action_names[: min(2, self.max_actions_per_turn)])
        self.system_prompt = (  # type: ignore[misc]  # per-instance override
            f"{task} Actions: {', '.join(self.action_names)}. Answer with "
            + (
                f"up to {self.max_actions_per_turn} actions in order, "
                if self.max_actions_per_turn > 1
                else "one action, "
            )
            + f"e.g. <answer>{example}</answer>."
        )

    # -- episode ----------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Reset the wrapped env with a seed drawn from `self.np_random`."""
        super().reset(seed=seed)
        inner_seed = int(self.np_random.integers(2**31 - 1))
        obs, info = self.env.reset(seed=inner_seed, options=options)
        self._obs = obs
        self._turns = 0
        self._return = 0.0
        self._done = False
        return f"{self._text(obs)}\n{self._hint()}", {"gym_info": _plain(info)}

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Apply the named actions in `<answer>...</answer>` to the wrapped env."""
        self.require_reset()
        if self._done:
            info = {"success": False, "valid": False, "actions_taken": 0}
            return "The episode is over; call reset().", 0.0, True, False, info
        self._turns += 1
        ids, problem = parse_named_actions(action, self._action_ids, split_words=self._split_words)
        reward = 0.0 if problem is None else self.invalid_penalty
        terminated = truncated = False
        taken = 0
        gym_info: dict[str, Any] = {}
        for a in ids[: self.max_actions_per_turn]:
            obs, r, terminated, truncated, gym_info = self.env.step(self._start + a)
            self._obs = obs
            reward += float(r)
            self._return += float(r)
            taken += 1
            if terminated or truncated:
                break
        terminated, truncated = bool(terminated), bool(truncated)
        if not (terminated or truncated) and self._turns >= self.max_turns:
            truncated = True
        self._done = terminated or truncated
        success = bool(self._success(terminated, self._return))
        feedback = (
            "" if problem is None else f"{problem} Actions: {', '.join(self.action_names)}.\n"
        )
        tail = f"The episode is over (return {self._return:g})." if self._done else self._hint()
        info = {
            "success": success,
            "valid": problem is None,
            "actions_taken": taken,
            "gym_info": _plain(gym_info),
        }
        text = f"{feedback}{self._text(self._obs)}\n{tail}"
        return text, round(reward, 6), terminated, truncated, info

    # -- helpers ----------------------------------------------------------------------------

    def _text(self, obs: Any) -> str:
        if self.formatter is not None:
            return str(self.formatter(self.env.unwrapped, obs))
        if self.env.render_mode == "ansi":
            rendered = _ANSI_RE.sub("", str(self.env.render())).strip("\n")
            return f"{rendered}\nObservation: {_plain(obs)}"
        return f"Observation: {_plain(obs)}"

    def _hint(self) -> str:
        left = self.max_turns - self._turns
        return f"Turns left: {left}. Actions: {', '.join(self.action_names)}."

    def sample_action(self, rng: np.random.Generator) -> str:
        """1..`max_actions_per_turn` uniformly drawn action names."""
        n = int(rng.integers(1, self.max_actions_per_turn + 1))
        names = [self.action_names[int(i)] for i in rng.integers(len(self.action_names), size=n)]
        return f"<answer>{' || '.join(names)}</answer>"

    def close(self) -> None:
        """Close the wrapped env."""
        self.env.close()


def _plain(value: Any) -> Any:
    """numpy scalars/arrays inside obs and info made into plain Python values."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


class GymFrozenLake(GymTextEnv):
    """Gymnasium's FrozenLake-v1 (fixed 4x4 map, slippery) through the Gymnasium adapter."""

    def __init__(self, **kwargs: Any) -> None:
        """`GymTextEnv("FrozenLake-v1", **kwargs)`."""
        super().__init__("FrozenLake-v1", **kwargs)


class GymTaxi(GymTextEnv):
    """Gymnasium's Taxi (v3 rules; v4 in gymnasium 1.4) through the Gymnasium adapter."""

    def __init__(self, **kwargs: Any) -> None:
        """`GymTextEnv("Taxi-v4", **kwargs)`."""
        super().__init__("Taxi-v4", **kwargs)


class GymCliffWalking(GymTextEnv):
    """Gymnasium's CliffWalking-v1 through the Gymnasium adapter."""

    def __init__(self, **kwargs: Any) -> None:
        """`GymTextEnv("CliffWalking-v1", **kwargs)`."""
        super().__init__("CliffWalking-v1", **kwargs)


class GymBlackjack(GymTextEnv):
    """Gymnasium's Blackjack-v1 through the Gymnasium adapter."""

    def __init__(self, **kwargs: Any) -> None:
        """`GymTextEnv("Blackjack-v1", **kwargs)`."""
        super().__init__("Blackjack-v1", **kwargs)
