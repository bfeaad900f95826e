"""Experts: policies that know the answer, used to write supervised (SFT) trajectories.

An expert is a callable `(env, max_actions) -> str` that returns the assistant's answer text
for the env's *current* state, in the env's answer format (e.g. `<answer>Up || Left</answer>`).
`max_actions` caps the actions of one answer (None: the env's own per-turn limit).

`solver` works for every env that exposes an exact policy: an `expert_answer(max_actions)`
method (full answer text) or an `expert_actions(max_actions)` method (a list of action words,
written as `<answer>A || B</answer>`). `random` plays uniformly random well-formed answers:
SFT on it teaches the format, not the task. Register other experts by name; an env's package
that registers its experts when it is imported needs nothing more, since `get_expert(name,
env)` imports the env's module before it looks the name up (docs/guide/custom-env.md,
section 7):

>>> register_expert("always-up", lambda env, max_actions: "<answer>Up</answer>")
>>> get_expert("always-up")(None, None)
'<answer>Up</answer>'
>>> {"always-up", "random", "solver"} <= set(experts())
True
"""

from __future__ import annotations

from typing import Any

from agentrl.rollout.expert import Expert, NoExpertError

__all__ = ["Expert", "NoExpertError", "experts", "get_expert", "register_expert"]

_EXPERTS: dict[str, Expert] = {}


def register_expert(name: str, expert: Expert) -> None:
    """Make `expert` available as `agentrl sft --expert NAME` (replaces an existing one)."""
    _EXPERTS[name] = expert


def get_expert(name: str, env: str | None = None) -> Expert:
    """The expert registered as `name`; the error lists the known ones.

    When `name` is not registered yet and `env` (a registered env name or a
    `module.path:Class` string) is given, the env's module is imported first: an expert that
    the env's package registers on import is then found, as `agentrl sft --expert NAME` and
    `warm_start.expert: NAME` find it (the custom-env guide, section 7).
    """
    if name not in _EXPERTS and env is not None:
        _import_env_module(env)
    try:
        return _EXPERTS[name]
    except KeyError:
        known = ", ".join(sorted(_EXPERTS))
        raise NoExpertError(f"unknown expert {name!r}; known experts: {known}") from None


def _import_env_module(env: str) -> None:
    """Import the module that defines the env `env` (its package's `__init__` runs too)."""
    from agentrl.envs.registry import _resolve, spec

    entry_point = spec(env).entry_point
    if isinstance(entry_point, str):
        _resolve(entry_point)


def experts() -> dict[str, Expert]:
    """Every registered expert by name."""
    return dict(_EXPERTS)


def format_actions(actions: list[str]) -> str:
    """Action words as one answer in the RAGEN format.

    >>> format_actions(["Up", "Left"])
    '<answer>Up || Left</answer>'
    """
    return "<answer>" + " || ".join(actions) + "</answer>"


def solver_expert(env: Any, max_actions: int | None = None) -> str:
    """The env's exact policy: `env.expert_answer(max_actions)` if it has one, else
    `env.expert_actions(max_actions)` written with `format_actions`.

    `max_actions` defaults to `env.max_actions_per_turn` (when the env has one).
    """
    inner = getattr(env, "unwrapped", env)
    per_turn = getattr(inner, "max_actions_per_turn", None)
    limit = max_actions if max_actions is not None else per_turn
    if per_turn is not None and limit is not None:
        limit = min(limit, per_turn)
    if hasattr(inner, "expert_answer"):
        return str(inner.expert_answer(limit))
    if hasattr(inner, "expert_actions"):
        actions = list(inner.expert_actions(max_actions=limit))
        if not actions:
            raise NoExpertError(f"{type(inner).__name__}.expert_actions returned no action")
        return format_actions(actions)
    raise NoExpertError(
        f"env {type(inner).__name__} has no expert_answer(max_actions) or "
        "expert_actions(max_actions) method, so expert 'solver' cannot play it"
    )


register_expert("solver", solver_expert)


def random_expert(env: Any, max_actions: int | None = None) -> str:
    """A uniformly random well-formed answer: one of `env.candidate_answers()` (Sokoban: one
    move each) when the env lists them, else `env.sample_action`. It draws from the env's own
    generator (`env.np_random`, seeded by `reset(seed=...)`), so an episode's moves depend only
    on its seed. SFT on it teaches the answer format but not the task: the format-only warm
    start (`agentrl sft --expert random`). `max_actions` is not used (candidate answers hold
    one action each).
    """
    inner = getattr(env, "unwrapped", env)
    rng = inner.np_random
    choices = list(inner.candidate_answers())
    if choices:
        return choices[int(rng.integers(len(choices)))]
    return str(inner.sample_action(rng))


register_expert("random", random_expert)
