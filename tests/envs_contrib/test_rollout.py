"""A few rollout steps of every contrib env against the tiny model (HF engine, CPU)."""

from __future__ import annotations

import functools

import pytest

from agentrl.envs import make
from agentrl.rollout.config import RolloutConfig
from agentrl.rollout.engine import SamplingParams
from agentrl.rollout.loop import rollout

ENVS = [
    "frozenlake",
    "bandit",
    "bandit-reversed",
    "countdown-ragen",
    "gym:Taxi-v3",
    "gym-cliffwalking",
    "gym-blackjack",
]
try:
    import textarena  # noqa: F401

    ENVS += ["textarena-mastermind", "textarena-tower-of-hanoi"]
except ImportError:  # the extra is not installed: those envs cannot be built
    pass


@pytest.fixture(scope="module")
def tiny_engine(tiny_model_path):
    from agentrl.rollout.hf_engine import HFEngine
    from agentrl.rollout.models import load_tokenizer

    engine = HFEngine(str(tiny_model_path), num_threads=1)
    yield engine, load_tokenizer(str(tiny_model_path))
    engine.close()


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
def test_tiny_model_rollout_of_each_env(tiny_engine) -> None:
    engine, tokenizer = tiny_engine
    cfg = RolloutConfig(group_size=2, max_turns=2, max_context_tokens=2048, num_env_workers=2)
    sampling = SamplingParams(max_new_tokens=8, seed=0)
    for name in ENVS:
        result = rollout(
            engine, functools.partial(make, name), tokenizer, [0], cfg=cfg, sampling=sampling,
            env_name=name,
        )  # fmt: skip
        assert len(result.trajectories) == 2, name
        for traj in result.trajectories:
            assert traj.status in ("ok", "truncated"), (name, traj.status)
            assert 1 <= len(traj.turns) <= 2, name
            assert traj.num_sampled_tokens > 0, name
        assert "rollout/success_rate" in result.metrics, (name, result.metrics)
