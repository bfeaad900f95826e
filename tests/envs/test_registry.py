"""Registry: classes, factories, `module:Class` strings, entry points, unknown names."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from agentrl.envs import EnvSpec, TokenEnv, UnknownEnvError, make, register, registry, spec
from agentrl.envs.guess_number import GuessNumber

reg = importlib.import_module(
    "agentrl.envs.registry"
)  # the module (the package exports a function)


@pytest.fixture(autouse=True)
def _restore_registry():
    registry()  # load built-ins and entry points before taking the snapshot
    saved = dict(reg._REGISTRY)
    yield
    reg._REGISTRY.clear()
    reg._REGISTRY.update(saved)
    reg._load_state = "loaded"


def test_builtins_listed_with_sources() -> None:
    known = registry()
    for name in ("sokoban", "sokoban-8x8-2box", "sokoban-10x10-3box", "guess-number"):
        assert name in known
        assert known[name].source == "agentrl"
        assert known[name].description
    assert list(known) == sorted(known)


def test_register_class_with_defaults_overridden_by_make() -> None:
    register("test-guess", GuessNumber, high=5)
    env = make("test-guess")
    assert isinstance(env, GuessNumber) and env.high == 5
    assert make("test-guess", high=9).high == 9
    assert spec("test-guess").source == "user"
    assert spec("test-guess").description.startswith("Find a hidden integer")


def test_register_factory() -> None:
    calls = []

    def factory(**kw: object) -> TokenEnv:
        calls.append(kw)
        return GuessNumber(high=3)

    register("test-factory", factory, flag=True)
    assert make("test-factory").high == 3
    assert calls == [{"flag": True}]


def test_string_entry_point_is_lazy_and_module_colon_class_works() -> None:
    register("test-lazy", "agentrl.envs.guess_number:GuessNumber", summary="lazy one")
    assert spec("test-lazy").description == "lazy one"
    assert isinstance(make("test-lazy"), GuessNumber)
    env = make("agentrl.envs.guess_number:GuessNumber", high=7)
    assert env.high == 7


def test_bad_entry_points_name_the_problem() -> None:
    with pytest.raises(ImportError, match="no_such_module"):
        make("no_such_module:Env")
    with pytest.raises(ImportError, match="has no attribute 'Nope'"):
        make("agentrl.envs.guess_number:Nope")
    register("test-bad", "agentrl.envs.guess_number")
    with pytest.raises(ValueError, match="module.path:ClassName"):
        make("test-bad")
    register("test-not-env", dict)
    with pytest.raises(TypeError, match="not a TokenEnv"):
        make("test-not-env")
    with pytest.raises(ValueError, match="no ':'"):
        register("a:b", GuessNumber)


def test_unknown_name_lists_known_and_close_matches() -> None:
    with pytest.raises(UnknownEnvError) as err:
        make("sokobon")
    text = str(err.value)
    assert "Did you mean: sokoban" in text
    assert "guess-number" in text  # the known names are listed
    with pytest.raises(KeyError):  # UnknownEnvError is a KeyError
        spec("zzzz-nothing-like-it")


def test_requires_field() -> None:
    register("test-docker", GuessNumber, requires="docker")
    assert spec("test-docker").requires == ("docker",)
    assert EnvSpec("x", GuessNumber).requires == ()


def test_entry_point_group_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = EntryPoint(
        name="plugin-guess",
        value="agentrl.envs.guess_number:GuessNumber",
        group=reg.ENTRY_POINT_GROUP,
    )

    def fake_entry_points(*, group: str) -> list[EntryPoint]:
        return [ep] if group == reg.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(reg, "entry_points", fake_entry_points)
    monkeypatch.setattr(reg, "_load_state", "unloaded")
    known = registry()
    assert "plugin-guess" in known and "sokoban" in known
    assert known["plugin-guess"].source == "entry point"
    assert isinstance(make("plugin-guess"), GuessNumber)


def test_user_registration_overrides_builtin_and_entry_points_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    register("sokoban", GuessNumber)
    assert spec("sokoban").entry_point is GuessNumber
    ep = EntryPoint(name="sokoban", value="envs_contrib.bandit:BanditEnv", group="agentrl.envs")
    monkeypatch.setattr(reg, "entry_points", lambda *, group: [ep])
    monkeypatch.setattr(reg, "_load_state", "unloaded")
    assert spec("sokoban").entry_point is GuessNumber  # an entry point never replaces it
    assert "sokoban-8x8-2box" in registry()


def test_the_registry_imports_no_env() -> None:
    """The built-ins register from the package (`agentrl/envs/builtin.py`), not the registry."""
    tree = ast.parse(Path(reg.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    envs = {m for m in imported if m and m.startswith("agentrl.envs")}
    assert envs == {"agentrl.envs.base"}
    assert 'import_module("agentrl' not in Path(reg.__file__).read_text()


def test_make_in_fresh_threads_sees_the_builtins() -> None:
    """Threads racing on the first `make` of a fresh process all see the built-ins."""
    code = """
import importlib, threading
barrier = threading.Barrier(8)
errors = []
def first_use():
    barrier.wait()
    try:
        importlib.import_module("agentrl.envs").make("sokoban")
    except BaseException as e:
        errors.append(e)
threads = [threading.Thread(target=first_use) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
assert errors == [], errors
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
