"""Env worker processes bound every env call: a hung call kills and replaces its worker, the
envs that shared it are rebuilt by replay, and no process outlives the pool."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from agentrl.envs.guess_number import GuessNumber
from agentrl.rollout import env_workers
from agentrl.rollout.config import RolloutConfig
from agentrl.rollout.loop import rollout
from agentrl.rollout.testing import ScriptedEngine
from agentrl.trajectory.testing import build_tokenizer, plain_vocab_ids
from agentrl.trajectory.types import Status

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/broken_envs.py
import broken_envs  # noqa: E402

TOK = build_tokenizer("chatml")


def _rollout(env, seeds=range(10), **cfg):  # type: ignore[no-untyped-def]
    cfg = {"env_executor": "process", "env_step_timeout_s": 1.0, "num_env_workers": 4, **cfg}
    engine = ScriptedEngine(plain_vocab_ids(TOK), seed=0)
    return rollout(engine, env, TOK, list(seeds), group_size=2, cfg=RolloutConfig(**cfg))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def _pool_pids() -> list[int]:
    pids = []
    for pool in env_workers._idle.values():
        pids += [pool.zygote.proc.pid, *(w.pid for w in pool.workers)]
    return pids


def test_a_hung_step_becomes_an_env_error_naming_seed_call_and_limit() -> None:
    start = time.monotonic()
    result = _rollout(broken_envs.HangsInStep)
    took = time.monotonic() - start
    failed = {t.seed for t in result.trajectories if t.status == Status.ENV_ERROR}
    assert failed == {0, 5}
    error = next(t.error for t in result.trajectories if t.seed == 5)
    assert error.startswith("env step (seed 5) timed out after 1 s")
    # the envs that shared a replaced worker were replayed and ended normally
    others = [t for t in result.trajectories if t.seed not in (0, 5)]
    assert all(t.status != Status.ENV_ERROR and t.num_turns > 0 for t in others)
    assert took < 15, took


def test_a_hung_reset_and_a_raising_reset() -> None:
    hung = _rollout(broken_envs.HangsInReset, seeds=[0, 1])
    assert [t.error for t in hung.trajectories if t.seed == 0] == [
        "env reset (seed 0) timed out after 1 s; its worker process was replaced"
    ] * 2
    raised = _rollout(broken_envs.ResetRaises, seeds=[0, 1])
    assert {t.error for t in raised.trajectories if t.seed == 1} == {
        "env reset (seed 1) failed: ValueError: no room for seed 1"
    }


def test_a_worker_that_dies_is_replaced() -> None:
    result = _rollout(broken_envs.ExitsInStep, seeds=[0, 1, 2])
    assert {t.error for t in result.trajectories if t.seed == 0} == {
        "env step (seed 0) failed: its worker process died"
    }
    assert all(t.status != Status.ENV_ERROR for t in result.trajectories if t.seed != 0)


def test_pools_are_reused_and_end_with_no_process_left() -> None:
    env_workers.close_pools()
    _rollout(GuessNumber, seeds=[0, 1])
    first = _pool_pids()
    _rollout(GuessNumber, seeds=[0, 1])
    assert _pool_pids() == first and all(_alive(p) for p in first)
    _rollout(broken_envs.HangsInStep, seeds=[0])
    pids = _pool_pids()
    env_workers.close_pools()
    time.sleep(0.2)
    assert not [p for p in pids if _alive(p)]


def test_an_env_that_cannot_reach_a_worker_runs_in_threads_with_a_warning() -> None:
    with pytest.warns(UserWarning, match="a hung call cannot be stopped.*lambda"):
        result = _rollout(lambda: GuessNumber(), seeds=[0])
    assert all(t.status != Status.ENV_ERROR for t in result.trajectories)


def test_worker_processes_ignore_ctrl_c() -> None:
    import signal

    env_workers.close_pools()
    _rollout(GuessNumber, seeds=[0])
    (pool,) = env_workers._idle.values()
    for pid in _pool_pids():
        os.kill(pid, signal.SIGINT)
    time.sleep(0.3)
    assert all(_alive(p) for p in _pool_pids())
    env_workers.close_pools()
