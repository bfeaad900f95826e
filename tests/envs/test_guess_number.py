"""GuessNumber, the tiny example env."""

from __future__ import annotations

from agentrl.envs import make


def test_binary_search_wins_and_rewards() -> None:
    env = make("guess-number")
    env.reset(seed=5)
    lo, hi = 1, 100
    for _ in range(env.max_turns):
        mid = (lo + hi) // 2
        obs, reward, terminated, truncated, info = env.step(f"<answer>{mid}</answer>")
        if terminated:
            assert obs == "Correct!" and reward == 1.0 and info["success"] is True
            break
        assert reward == 0.0 and not truncated
        lo, hi = (mid + 1, hi) if obs == "higher" else (lo, mid - 1)
    else:
        raise AssertionError("binary search did not finish in 8 guesses")


def test_invalid_and_out_of_turns() -> None:
    env = make("guess-number", high=1000)
    env.reset(seed=0)
    results = [env.step("no number") for _ in range(env.max_turns)]
    assert all(r[1] == -0.1 and r[4]["valid"] is False for r in results)
    assert [r[3] for r in results] == [False] * 7 + [True]
    assert results[-1][4]["success"] is False


def test_default_clone_is_independent() -> None:
    """`TokenEnv.clone`'s default (a deep copy): turns played in the clone leave the source."""
    env = make("guess-number", high=1000)
    env.reset(seed=0)
    env.step("<answer>500</answer>")
    clone = env.clone()
    assert clone is not env
    assert [clone.step("no number")[3] for _ in range(7)] == [False] * 6 + [True]
    assert env.step("no number")[3] is False  # the source has 6 turns left, not 0
