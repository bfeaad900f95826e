"""Env registry: `register(name, entry_point, **defaults)` and `make(name, **kwargs)`.

Names come from three places: `register` calls in agentrl and user code, installed
packages through the entry-point group `agentrl.envs`, and `module.path:Class` strings
accepted wherever a name is.

The registry imports no env: the built-ins register themselves when the `agentrl.envs`
package is imported (`agentrl/envs/builtin.py`, as Gymnasium's `envs/__init__` does), and so
do the entry points (`load_entry_points`). A later `register` call wins over an earlier one,
and an entry point never replaces a name registered in code.

Every name is also registered with Gymnasium under the `agentrl/` namespace, so
`gymnasium.make("agentrl/sokoban")` builds the env once `agentrl.envs` is imported (a name
that is not a valid Gymnasium id, say with a space, is left out of Gymnasium's registry).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

import gymnasium

from agentrl.envs.base import TokenEnv

ENTRY_POINT_GROUP = "agentrl.envs"

GYMNASIUM_NAMESPACE = "agentrl"
"""Gymnasium ids of agentrl envs are `agentrl/NAME`."""

EntryPoint = type[TokenEnv] | Callable[..., TokenEnv] | str


@dataclass
class EnvSpec:
    """A registered env: how to build it and with which default arguments."""

    name: str
    entry_point: EntryPoint
    defaults: dict[str, Any] = field(default_factory=dict)
    source: str = "agentrl"
    """Where the registration came from: `agentrl`, a package name, or `user`."""
    requires: tuple[str, ...] = ()
    """Services the env needs at run time, e.g. `("docker",)`; tests skip it only without them."""
    summary: str = ""
    """One-line description; when empty, the first docstring line of the entry point."""
    requires_unless: dict[str, Any] = field(default_factory=dict)
    """Arguments under which the env needs none of `requires`, e.g. `{"tool": False}`."""

    def services(self, kwargs: dict[str, Any] | None = None) -> tuple[str, ...]:
        """The services `make(name, **kwargs)` needs: `requires`, or none when `kwargs`
        holds one of the `requires_unless` arguments.

        >>> s = EnvSpec("x", "m:C", requires=("docker",), requires_unless={"tool": False})
        >>> s.services(), s.services({"tool": False}), s.services({"tool": True})
        (('docker',), (), ('docker',))
        """
        kwargs = kwargs or {}
        for key, value in self.requires_unless.items():
            if key in kwargs and kwargs[key] == value:
                return ()
        return self.requires

    @property
    def description(self) -> str:
        """`summary`, else the entry point's first docstring line (imports a string entry point)."""
        if self.summary:
            return self.summary
        target = (
            _resolve(self.entry_point) if isinstance(self.entry_point, str) else self.entry_point
        )
        doc = (getattr(target, "__doc__", None) or "").strip()
        return doc.splitlines()[0] if doc else ""


class UnknownEnvError(KeyError):
    """No env is registered under this name."""

    def __str__(self) -> str:
        return str(self.args[0])


_REGISTRY: dict[str, EnvSpec] = {}
_load_state = "unloaded"
_load_lock = threading.RLock()


def register(
    name: str,
    entry_point: EntryPoint,
    *,
    source: str = "user",
    requires: tuple[str, ...] = (),
    requires_unless: dict[str, Any] | None = None,
    summary: str = "",
    **defaults: Any,
) -> None:
    """Register `entry_point` (a class, a factory or `"module:Class"`) under `name`.

    Keyword arguments become defaults that `make(name, **kwargs)` can override. `requires`
    names services the env needs (`("docker",)`), and `requires_unless` the arguments under
    which it needs none (`{"tool": False}`); `summary` is the line `agentrl envs list`
    shows (without it, listing imports the entry point to read its docstring).
    """
    if not name or ":" in name:
        raise ValueError(f"env name {name!r} must be non-empty and contain no ':'")
    if isinstance(requires, str):
        requires = (requires,)
    _REGISTRY[name] = EnvSpec(
        name,
        entry_point,
        defaults=dict(defaults),
        source=source,
        requires=tuple(requires),
        summary=summary,
        requires_unless=dict(requires_unless or {}),
    )
    _register_with_gymnasium(name)


def _register_with_gymnasium(name: str) -> None:
    """Register `agentrl/NAME` with Gymnasium; its entry point calls `make(NAME)` when built,
    so it follows later `register` calls for NAME."""
    env_id = f"{GYMNASIUM_NAMESPACE}/{name}"
    gymnasium.registry.pop(env_id, None)  # a later register wins, without Gymnasium's warning
    try:
        gymnasium.register(env_id, entry_point=functools.partial(_make_for_gymnasium, name))
    except gymnasium.error.Error:  # not a valid Gymnasium id: agentrl's registry still has it
        pass


def _make_for_gymnasium(name: str, *, render_mode: str | None = None, **kwargs: Any) -> TokenEnv:
    """`gymnasium.make("agentrl/NAME", **kwargs)`: `make(NAME, **kwargs)`, with Gymnasium's
    `render_mode` (one of the env's `metadata["render_modes"]`) set on the env."""
    env = make(name, **kwargs)
    env.render_mode = render_mode
    return env


def _resolve(target: str) -> Any:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"entry point {target!r} must look like 'module.path:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(f"cannot import module {module_name!r} for env {target!r}: {e}") from e
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportError(f"module {module_name!r} has no attribute {attr!r}") from None
    return obj


def load_entry_points() -> None:
    """Register the entry points of the group `agentrl.envs` once, safely across threads.

    Another thread waits until loading is over; `register` calls made by the loading itself
    (same thread) return at once.
    """
    global _load_state
    if _load_state == "loaded":
        return
    with _load_lock:
        if _load_state != "unloaded":
            return
        _load_state = "loading"
        try:
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                if ep.name in _REGISTRY:
                    continue
                dist = ep.dist.name if ep.dist is not None else "entry point"
                register(ep.name, ep.value, source=dist)
        except BaseException:
            _load_state = "unloaded"
            raise
        _load_state = "loaded"


def registry() -> dict[str, EnvSpec]:
    """All known envs by name (built-ins, entry points, user registrations)."""
    load_entry_points()
    return dict(sorted(_REGISTRY.items()))


PREFIX_SCHEMES: dict[str, tuple[str, str]] = {
    "gym": ("envs_contrib.gym_adapter:GymTextEnv", "env_id"),
    "textarena": ("envs_contrib.textarena_adapter:TextArenaEnv", "game_id"),
}
"""`prefix:ID` names: `gym:Taxi-v3` builds the entry point with `env_id="Taxi-v3"`."""


def spec(name: str) -> EnvSpec:
    """The spec for `name`, a `gym:ID` / `textarena:ID` name, or a `module.path:Class` string."""
    prefix, sep, rest = name.partition(":")
    if sep and prefix in PREFIX_SCHEMES and rest:
        entry_point, arg = PREFIX_SCHEMES[prefix]
        return EnvSpec(name, entry_point, {arg: rest}, source=prefix)
    if ":" in name:
        return EnvSpec(name, name, {}, source=name.partition(":")[0])
    known = registry()
    if name not in known:
        raise UnknownEnvError(unknown_env_message(name, known))
    return known[name]


def unknown_env_message(name: str, known: Iterable[str]) -> str:
    """The error for an unknown env `name`: the nearest known names (difflib), then every
    known name, none left out.

    >>> known = ["guess-number", "sokoban", "sokoban-8x8-2box", "sokoban-ragen-6x6"]
    >>> print(unknown_env_message("sokobn", known))
    unknown env 'sokobn'. Did you mean: sokoban, sokoban-8x8-2box, sokoban-ragen-6x6?
    Known envs (4): guess-number, sokoban, sokoban-8x8-2box, sokoban-ragen-6x6.
    A class can also be given as 'module.path:ClassName'.
    """
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return (
        f"unknown env {name!r}.{hint}\n"
        f"Known envs ({len(known)}): {', '.join(known) or '(none)'}.\n"
        "A class can also be given as 'module.path:ClassName'."
    )


def make(name: str, **kwargs: Any) -> TokenEnv:
    """Build the env registered as `name` (or `module.path:Class`) with `kwargs` over its defaults."""
    env_spec = spec(name)
    target = env_spec.entry_point
    if isinstance(target, str):
        target = _resolve(target)
    env = target(**{**env_spec.defaults, **kwargs})
    if not isinstance(env, TokenEnv):
        raise TypeError(f"env {name!r} built a {type(env).__name__}, not a TokenEnv subclass")
    return env


def env_name(env: str | EntryPoint) -> str:
    """The name under which `env` is built: a name as it is; a class or function that can be
    imported by its module path as `module.path:Name` (so a run folder names it for any later
    process); any other class or factory (one defined in a script or notebook, or in a
    function; a `functools.partial`; a lambda, as `env`) registered under its own name (`-2`,
    `-3`... where that is taken), which this process knows.

    >>> from agentrl.envs.guess_number import GuessNumber
    >>> env_name("sokoban"), env_name(GuessNumber)
    ('sokoban', 'agentrl.envs.guess_number:GuessNumber')
    """
    if isinstance(env, str):
        return env
    if not callable(env):
        raise TypeError(f"env must be a name, a TokenEnv subclass or a factory, not {env!r}")
    module, qualname = getattr(env, "__module__", None), getattr(env, "__qualname__", "")
    if module and module != "__main__" and qualname and "<" not in qualname:
        path = f"{module}:{qualname}"
        try:
            if _resolve(path) is env:
                return path
        except ImportError:
            pass
    wrapped = getattr(env, "func", None)  # a functools.partial is named after its function
    base = getattr(env, "__name__", None) or getattr(wrapped, "__name__", None) or "env"
    base = base if base != "<lambda>" else "env"
    name, n = base, 1
    while name in _REGISTRY and _REGISTRY[name].entry_point is not env:
        n += 1
        name = f"{base}-{n}"
    if name not in _REGISTRY:
        register(name, env)
    return name
