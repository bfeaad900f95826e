"""Where env calls run: the thread executor runs known-fast steps inline on the event loop."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from agentrl.envs.base import TokenEnv
from agentrl.rollout.loop import _NUM_PROBE_STEPS, _ThreadEnvs


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


def test_inline_off() -> None:
    envs = _ThreadEnvs(ThreadRecordingEnv, 2, inline_s=None)
    threads, loop_thread = _steps(envs, _NUM_PROBE_STEPS + 4)
    assert loop_thread not in threads and envs.num_inline_steps == 0
