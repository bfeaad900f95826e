"""Where env calls run: the thread executor runs known-fast steps inline on the event loop,
and its pool serves the next rollout too."""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
from typing import Any, ClassVar

from agentrl.envs.base import TokenEnv
from agentrl.rollout import loop as loop_module
from agentrl.rollout.config import RolloutConfig
from agentrl.rollout.loop import _NUM_PROBE_STEPS, _ThreadEnvs, rollout
from agentrl.rollout.testing import ScriptedEngine
from agentrl.trajectory.testing import ScriptedEnv, build_tokenizer, plain_vocab_ids
from agentrl.trajectory.types import Status


class ThreadRecordingEnv(TokenEnv):
    """Records which thread ran each step; steps sleep `slow_s` from step `slow_from` on."""

    system_prompt = "Say anything."
    max_turns = 100

    def __init__(self, slow_from: int | None = None, slow_s: float = 0.06) -> None:
        super().__init__()
        self.slow_from, self.slow_s = slow_from, slow_s
        self.threads: list[int] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
        super().reset(seed=seed)
        return "go", {}

    def step(self, action: str):  # type: ignore[no-untyped-def]
        self.threads.append(threading.get_ident())
        if self.slow_from is not None and len(self.threads) >= self.slow_from:
            time.sleep(self.slow_s)
        return "ok", 0.0, False, False, {}


def _steps(envs: _ThreadEnvs, num_steps: int) -> tuple[list[int], int]:
    """Run `num_steps` steps of one env; return the thread of each and the loop's thread."""

    async def main() -> int:
        await envs.call(0, "create")
        await envs.call(0, "reset", 0)
        for _ in range(num_steps):
            assert (await envs.call(0, "step", "a"))[0] == "ok"
        return threading.get_ident()

    try:
        loop_thread = asyncio.run(main())
        return envs.envs[0].threads, loop_thread  # type: ignore[attr-defined]
    finally:
        envs.shutdown()


def test_fast_steps_run_inline_after_the_probe() -> None:
    envs = _ThreadEnvs(ThreadRecordingEnv, 2, inline_s=0.03)
    threads, loop_thread = _steps(envs, _NUM_PROBE_STEPS + 4)
    assert loop_thread not in threads[:_NUM_PROBE_STEPS]  # probed in the pool
    assert threads[_NUM_PROBE_STEPS:] == [loop_thread] * 4
    assert envs.num_inline_steps == 4 and not envs.slow


def test_slow_steps_stay_in_the_pool() -> None:
    envs = _ThreadEnvs(lambda: ThreadRecordingEnv(slow_from=1), 2, inline_s=0.03)
    threads, loop_thread = _steps(envs, _NUM_PROBE_STEPS + 2)
    assert loop_thread not in threads and envs.slow and envs.num_inline_steps == 0


def test_a_slow_inline_step_sends_later_steps_back_to_the_pool() -> None:
    slow_from = _NUM_PROBE_STEPS + 3
    envs = _ThreadEnvs(lambda: ThreadRecordingEnv(slow_from=slow_from), 2, inline_s=0.03)
    threads, loop_thread = _steps(envs, slow_from + 3)
    assert threads[_NUM_PROBE_STEPS:slow_from] == [loop_thread] * 3  # incl. the slow one
    assert loop_thread not in threads[slow_from:]
    assert envs.slow


class ThreadLogEnv(ScriptedEnv):
    """Records the thread of each reset, step and close (class-wide)."""

    threads: ClassVar[set[int]] = set()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
        ThreadLogEnv.threads.add(threading.get_ident())
        return super().reset(seed=seed, options=options)

    def step(self, action: str):  # type: ignore[no-untyped-def]
        ThreadLogEnv.threads.add(threading.get_ident())
        return super().step(action)

    def close(self) -> None:
        ThreadLogEnv.threads.add(threading.get_ident())
        super().close()


def _rollout_threads(num_workers: int, **cfg: Any) -> tuple[set[int], Any]:
    tok = build_tokenizer("chatml")
    ThreadLogEnv.threads.clear()
    env = functools.partial(ThreadLogEnv, min_steps=2, max_steps=2, **cfg.pop("env", {}))
    result = rollout(
        ScriptedEngine(plain_vocab_ids(tok), seed=0), env, tok, [0, 1, 2], group_size=2,
        cfg=RolloutConfig(env_executor="thread", num_env_workers=num_workers, **cfg),
    )  # fmt: skip
    return ThreadLogEnv.threads - {threading.get_ident()}, result


def test_the_thread_pool_is_reused_by_the_next_rollout() -> None:
    first, _ = _rollout_threads(3)
    pool = loop_module._idle_thread_pools[(os.getpid(), 3)]
    second, _ = _rollout_threads(3)
    workers = {t.ident for t in pool._threads}
    assert first and first <= workers and second <= workers  # the same threads, none new
    assert loop_module._idle_thread_pools[(os.getpid(), 3)] is pool


def test_a_pool_with_an_abandoned_call_is_not_reused() -> None:
    """A timed-out step may still hold its thread: the next rollout gets a new pool."""
    _, result = _rollout_threads(5, env={"latency_s": (0.3, 0.3)}, env_step_timeout_s=0.05)
    assert all(t.status == Status.ENV_ERROR for t in result.trajectories)
    assert (os.getpid(), 5) not in loop_module._idle_thread_pools
    _rollout_threads(5)
    assert (os.getpid(), 5) in loop_module._idle_thread_pools
