"""The rollout loop with `env_executor="ray"`: envs hosted in a pool of Ray actors.

One loopback Ray instance (2 CPUs) for the module; the engine is the scripted fake, so no
model loads. Env actors run in their own processes: the test env reports its process id.
"""

from __future__ import annotations

import functools
import os
import sys

import pytest

from agentrl.rollout import loop
from agentrl.rollout.config import RolloutConfig
from agentrl.rollout.engine import SamplingParams
from agentrl.rollout.loop import close_env_actors, rollout
from agentrl.rollout.testing import ScriptedEngine
from agentrl.trajectory.bridge import ChatBridge
from agentrl.trajectory.testing import ScriptedEnv, build_tokenizer, plain_vocab_ids
from agentrl.trajectory.types import Status

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray]


class PidEnv(ScriptedEnv):
    """ScriptedEnv that says in each step's info which process ran the step."""

    def step(self, action: str):  # type: ignore[no-untyped-def]
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "pid": os.getpid()}


@pytest.fixture(scope="module")
def ray_local(ray_local):
    """The shared loopback Ray; this module's classes travel by value to the actors."""
    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray_local
    close_env_actors()


def _rollout(executor: str, env_factory, seeds=range(8)):  # type: ignore[no-untyped-def]
    tok = build_tokenizer("chatml")
    bridge = ChatBridge(tok)
    cfg = RolloutConfig(
        max_context_tokens=4096,
        env_executor=executor,  # type: ignore[arg-type]
        num_env_actors=2,
        env_actor_num_cpus=0.25,
        num_env_workers=4,
    )
    engine = ScriptedEngine(plain_vocab_ids(tok), seed=0)
    sampling = SamplingParams(max_new_tokens=8, stop_token_ids=bridge.stop_token_ids)
    return rollout(
        engine, env_factory, tok, list(seeds), group_size=1, cfg=cfg, sampling=sampling,
        bridge=bridge,
    )  # fmt: skip


def test_envs_run_in_a_pool_of_ray_actors(ray_local) -> None:
    factory = functools.partial(PidEnv, min_steps=2, max_steps=5)
    on_ray = _rollout("ray", factory)
    in_threads = _rollout("thread", factory)
    pids = []
    for traj in on_ray.trajectories:
        assert traj.status == Status.OK, traj.error
        episode_pids = {turn.info["pid"] for turn in traj.turns}
        assert len(episode_pids) == 1  # an episode stays on one actor
        pids += episode_pids
    assert os.getpid() not in pids and len(set(pids)) == 2  # both actors, none in the driver
    # The env's own behaviour does not depend on where it runs.
    assert [t.num_turns for t in on_ray.trajectories] == [
        t.num_turns for t in in_threads.trajectories
    ]
    assert [t.total_reward for t in on_ray.trajectories] == [
        t.total_reward for t in in_threads.trajectories
    ]
    assert on_ray.metrics["rollout/success_rate"] == 1.0


def test_an_env_that_raises_in_an_actor_ends_only_its_episode(ray_local) -> None:
    factory = functools.partial(PidEnv, min_steps=1, max_steps=4, fail_on_step=2)
    result = _rollout("ray", factory, seeds=range(6))
    statuses = [t.status for t in result.trajectories]
    assert Status.ENV_ERROR in statuses
    for traj in result.trajectories:
        if traj.status == Status.ENV_ERROR:
            assert "scripted env failure on step 2" in (traj.error or "")
            assert traj.num_turns == 2  # the turn before the failure is kept
        else:
            assert traj.status == Status.OK and traj.num_turns == 1


def _pids(result) -> set[int]:  # type: ignore[no-untyped-def]
    return {turn.info["pid"] for traj in result.trajectories for turn in traj.turns}


def test_the_actor_pool_outlives_a_rollout(ray_local) -> None:
    """A trainer's next step reuses the running env actors; a dead actor is replaced."""
    factory = functools.partial(PidEnv, min_steps=1, max_steps=3)
    first = _pids(_rollout("ray", factory, seeds=range(4)))
    assert _pids(_rollout("ray", factory, seeds=range(4, 8))) == first
    (pool,) = [p for key, p in loop._ray_env_pools.items() if key[1] is factory]
    ray.kill(pool.actors[0])
    hit = _rollout("ray", factory, seeds=range(4))  # episodes 0 and 2 were on the dead actor
    statuses = [t.status for t in hit.trajectories]
    assert statuses == [Status.ENV_ERROR, Status.OK, Status.ENV_ERROR, Status.OK]
    fresh = _pids(_rollout("ray", factory, seeds=range(4)))
    assert len(fresh) == 2 and fresh != first
    close_env_actors()
    assert not loop._ray_env_pools
