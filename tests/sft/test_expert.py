"""The expert registry and the solver expert."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentrl.envs import make
from agentrl.envs.parsing import parse_actions
from agentrl.sft.expert import (
    NoExpertError,
    experts,
    format_actions,
    get_expert,
    register_expert,
    solver_expert,
)


def test_solver_expert_answers_in_env_format_and_solves() -> None:
    env = make("sokoban")
    env.reset(seed=11)
    for _ in range(env.max_turns):
        answer = solver_expert(env)
        assert answer.startswith("<answer>") and answer.endswith("</answer>")
        assert 1 <= len(parse_actions(answer)) <= env.max_actions_per_turn
        _, _, terminated, truncated, info = env.step(answer)
        if terminated or truncated:
            break
    assert info["success"]


def test_solver_expert_caps_actions_per_turn() -> None:
    env = make("sokoban")
    env.reset(seed=4)
    assert len(parse_actions(solver_expert(env, 1))) == 1
    assert len(parse_actions(solver_expert(env, 99))) <= env.max_actions_per_turn


def test_registry_is_extensible_and_errors_name_known_experts() -> None:
    register_expert("test-always-left", lambda env, n: format_actions(["Left"]))
    assert "test-always-left" in experts()
    assert get_expert("test-always-left")(None, None) == "<answer>Left</answer>"
    with pytest.raises(NoExpertError, match="solver"):
        get_expert("nope")


def test_an_env_package_that_registers_its_expert_on_import_is_found_by_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "pkg_with_expert"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from agentrl.sft import register_expert\n"
        "register_expert('test-pkg-expert', lambda env, n: '<answer>7</answer>')\n"
    )
    (package / "env.py").write_text("from agentrl.envs.guess_number import GuessNumber\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(NoExpertError, match="unknown expert 'test-pkg-expert'"):
        get_expert("test-pkg-expert")  # nothing imported the package yet
    assert "pkg_with_expert" not in sys.modules
    expert = get_expert("test-pkg-expert", "pkg_with_expert.env:GuessNumber")
    assert expert(None, None) == "<answer>7</answer>"
    with pytest.raises(NoExpertError, match="known experts: .*solver"):
        get_expert("still-unknown", "guess-number")  # a known env, an unknown expert


def test_solver_expert_refuses_env_without_expert_method() -> None:
    env = make("guess-number")
    env.reset(seed=0)
    with pytest.raises(NoExpertError, match="expert_actions"):
        solver_expert(env)


def test_random_expert_plays_every_move_reproducibly_from_the_seed() -> None:
    from collections import Counter

    from agentrl.sft.expert import random_expert

    def episode(seed: int) -> list[str]:
        env = make("sokoban", max_turns=10)
        env.reset(seed=seed)
        answers = []
        for _ in range(env.max_turns):
            answers.append(random_expert(env))
            _, _, terminated, truncated, _ = env.step(answers[-1])
            if terminated or truncated:
                break
        return answers

    assert episode(3) == episode(3)  # the env's seed fixes the moves
    counts = Counter(a for seed in range(40) for a in episode(seed))
    # one move per answer, all four moves, none much more often than the others
    assert set(counts) == {f"<answer>{m}</answer>" for m in ("Up", "Down", "Left", "Right")}
    assert max(counts.values()) < 1.5 * min(counts.values())
    assert get_expert("random") is random_expert
