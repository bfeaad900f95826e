"""Two-armed bandit: RAGEN reward distributions, reversed names, malformed answers."""

from __future__ import annotations

import numpy as np

from agentrl.envs import check_env
from envs_contrib.bandit import BanditEnv, ReversedBanditEnv


def _pull(env: BanditEnv, arm: str, n: int = 2000) -> list[float]:
    rewards = []
    for seed in range(n):
        env.reset(seed=seed)
        rewards.append(env.step(f"<answer> {arm} </answer>")[1])
    return rewards


def test_arm_rewards_follow_ragen() -> None:
    env = BanditEnv()
    assert set(_pull(env, "Phoenix", 200)) == {0.1}
    risky = _pull(env, "dragon")
    assert set(risky) == {0.0, 1.0}
    assert 0.21 < np.mean(risky) < 0.29
    assert env.best_arm == "Dragon"


def test_success_means_the_higher_mean_arm_and_reversal_swaps_it() -> None:
    env, rev = BanditEnv(), ReversedBanditEnv()
    env.reset(seed=1)
    rev.reset(seed=1)
    assert env.step("<answer>Dragon</answer>")[4]["success"] is True
    assert rev.step("<answer>Dragon</answer>")[4]["success"] is False
    assert set(_pull(rev, "Dragon", 100)) == {0.1}


def test_arm_order_is_shuffled_by_seed() -> None:
    env = BanditEnv()
    orders = {tuple(env.reset(seed=s)[1]["arms"]) for s in range(20)}
    assert orders == {("Phoenix", "Dragon"), ("Dragon", "Phoenix")}


def test_invalid_answer_ends_with_penalty() -> None:
    env = BanditEnv(invalid_penalty=-0.5)
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step("<answer>Unicorn</answer>")
    assert (reward, terminated, info["success"], info["valid"]) == (-0.5, True, False, False)
    assert "Phoenix" in obs and "Dragon" in obs


def test_check_env() -> None:
    assert check_env(BanditEnv).ok
    assert check_env(ReversedBanditEnv).ok


def test_name_fallback_takes_the_arm_named_last_and_only_when_asked() -> None:
    strict, lenient = BanditEnv(), BanditEnv(name_fallback=True)
    for env in (strict, lenient):
        env.reset(seed=0)
    assert strict.step("The phoenix? No, I pick the Dragon.")[4]["valid"] is False
    info = lenient.step("The phoenix? No, I pick the Dragon.")[4]
    assert (info["valid"], info["arm"], info["success"]) == (True, "Dragon", True)
    lenient.reset(seed=0)
    assert lenient.step("Dragonfly or phoenixes")[4]["valid"] is False  # whole words only
    lenient.reset(seed=0)
    assert lenient.step("dragon <answer>Phoenix</answer>")[4]["arm"] == "Phoenix"  # tag first
