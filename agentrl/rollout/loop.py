"""The multi-turn rollout loop: every episode is its own asyncio task.

A slow env or a long answer never stalls the other episodes: generation is awaited on the
engine (which batches concurrent requests), and env `reset`/`step` run off the event loop,
in a thread pool or in worker processes. Each episode records a token-exact `Trajectory`
through the chat-template bridge; failures end one episode (`env_error`, `engine_error`),
never the rollout. Every `reset` and `step` return is checked against the `TokenEnv`
contract: the first that breaks it stops the rollout with an `EnvContractError`.

    result = rollout(engine, partial(make, "sokoban"), tokenizer, seeds=[0, 1], group_size=4)
    result.trajectories   # 8 trajectories, group_id 0 and 1
    result.metrics        # rollout/tokens_per_s, rollout/success_rate, ...
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from agentrl.envs.base import TokenEnv
from agentrl.envs.contract import checked_reset, checked_step
from agentrl.rollout.config import RolloutConfig
from agentrl.rollout.env_workers import (
    EnvCallError,
    EnvCallTimeout,
    EnvWorkerDied,
    EnvWorkerStartError,
    env_header,
    return_pool,
    serve,
    take_pool,
)
from agentrl.trajectory.bridge import ChatBridge, EpisodeTokens
from agentrl.trajectory.types import Status, Trajectory, Turn

if TYPE_CHECKING:  # the engine module imports torch; env worker processes stay light
    from agentrl.rollout.engine import Engine, SamplingParams

log = logging.getLogger(__name__)

EnvFactory = Callable[[], TokenEnv]
"""A zero-argument callable that builds a fresh env, e.g. `functools.partial(make, name)`."""

_warned_templates: set[str] = set()


@dataclass
class RolloutResult:
    """The trajectories of one rollout (grouped by seed, in seed order) and its metrics."""

    trajectories: list[Trajectory]
    metrics: dict[str, float] = field(default_factory=dict)
    sampled: bool = True
    """The trajectories are the policy's own samples (False: labels, such as a search's
    solutions, which success-rate and reward metrics leave out)."""


class _Failure(Exception):
    def __init__(self, status: Status, message: str):
        super().__init__(message)
        self.status = status


class _OutOfTime(Exception):
    pass


# -- where env calls run ----------------------------------------------------------------------
_INLINE_STEP_S = 0.001
"""Seconds under which an env step counts as fast enough to run on the event loop."""


class _ThreadEnvs:
    """Envs live in this process; their calls run in a thread pool.

    The pool outlives the rollout (see `_take_thread_pool`), so its threads are already
    running when the next rollout starts its episodes.

    Env steps that are known to be fast run on the event loop itself: after
    `_NUM_PROBE_STEPS` steps in the pool each took less than `inline_s` seconds, later steps
    skip the thread hop (two event-loop wake-ups and a GIL hand-over each way; they cannot
    time out). The first inline step that takes longer sends every later step back to the pool.
    """

    def __init__(self, factory: EnvFactory, num_workers: int, inline_s: float = _INLINE_STEP_S):
        self.factory = factory
        self.num_workers = num_workers
        self.pool = _take_thread_pool(num_workers)
        self.envs: dict[int, TokenEnv] = {}
        self.inline_s = inline_s
        self.num_fast_steps = 0
        self.slow = False
        """True once a step was too slow to run inline."""
        self.num_inline_steps = 0
        self.abandoned = False
        """True once a call was given up while its thread may still run (a timeout): the pool
        is then not reused."""

    @property
    def can_step_inline(self) -> bool:
        """Whether the next env step runs on the event loop (`step_inline`)."""
        return not self.slow and self.num_fast_steps >= _NUM_PROBE_STEPS

    def step_inline(self, eid: int, action: str) -> Any:
        """Run one env step on the calling thread (only when `can_step_inline`)."""
        self.num_inline_steps += 1
        return self._timed_step(eid, action)

    def _timed_step(self, eid: int, action: str) -> Any:
        t0 = time.perf_counter()
        try:
            return self.envs[eid].step(action)
        finally:
            self._observe(time.perf_counter() - t0)

    def _observe(self, seconds: float) -> None:
        if seconds >= self.inline_s:
            self.slow = True
        else:
            self.num_fast_steps += 1

    def _call(self, eid: int, method: str, arg: Any) -> Any:
        if method == "start":
            env = self.envs[eid] = self.factory()
            return env_header(env), env.reset(seed=arg)
        if method == "create":
            env = self.envs[eid] = self.factory()
            return env_header(env)
        if method == "reset":
            return self.envs[eid].reset(seed=arg)
        if method == "step":
            return self.envs[eid].step(arg)
        env = self.envs.pop(eid, None)  # close
        return env.close() if env is not None else None

    async def call(self, eid: int, method: str, arg: Any = None) -> Any:
        if method == "step" and self.can_step_inline:
            return self.step_inline(eid, arg)
        loop = asyncio.get_running_loop()
        timed = method == "step" and not self.slow
        try:
            if timed:
                return await loop.run_in_executor(self.pool, self._timed_step, eid, arg)
            return await loop.run_in_executor(self.pool, self._call, eid, method, arg)
        except asyncio.CancelledError:
            self.abandoned = True
            raise

    def shutdown(self) -> None:
        if self.abandoned:
            _abandoned_pools.append(self.pool)
        _return_thread_pool(self.pool, self.num_workers, reusable=not self.abandoned)


_NUM_PROBE_STEPS = 8
"""Env steps timed in the thread pool before fast ones may run inline."""

_idle_thread_pools: dict[tuple[int, int], ThreadPoolExecutor] = {}
"""One idle env thread pool per (process id, size), kept between rollouts."""
_idle_lock = threading.Lock()
_abandoned_pools: list[ThreadPoolExecutor] = []
"""Thread pools given up with a call that timed out (`env_executor: thread`)."""


def hung_env_threads() -> bool:
    """Whether a thread of this process may still run an env call that timed out: Python's
    exit would wait for it forever (the command exits without waiting instead)."""
    return any(t.is_alive() for pool in _abandoned_pools for t in pool._threads)


def _take_thread_pool(num_workers: int) -> ThreadPoolExecutor:
    """An idle pool of `num_workers` threads left by an earlier rollout, or a new one.

    A pool is used by one rollout at a time; concurrent rollouts get pools of their own.
    The key holds the process id: a forked child never reuses its parent's threads.
    """
    with _idle_lock:
        pool = _idle_thread_pools.pop((os.getpid(), num_workers), None)
    return pool or ThreadPoolExecutor(num_workers, thread_name_prefix="agentrl-env")


def _return_thread_pool(pool: ThreadPoolExecutor, num_workers: int, *, reusable: bool) -> None:
    """Keep `pool` for the next rollout, unless a thread may still run an abandoned call or
    an idle pool of its size is already kept."""
    key = (os.getpid(), num_workers)
    with _idle_lock:
        if reusable and key not in _idle_thread_pools:
            _idle_thread_pools[key] = pool
            return
    pool.shutdown(wait=False, cancel_futures=True)


class _ProcessEnvs:
    """Envs live in worker processes (`agentrl.rollout.env_workers`): a call past its time
    limit kills its worker, so every call is bounded, and no hung call outlives the command."""

    enforces_timeout = True

    def __init__(self, factory: EnvFactory, num_workers: int, timeout: float | None):
        self.pool = take_pool(factory, num_workers)
        self.timeout = timeout

    async def call(self, eid: int, method: str, arg: Any = None) -> Any:
        return await self.pool.call(eid, method, arg, timeout=self.timeout)

    def shutdown(self) -> None:
        return_pool(self.pool)


class _EnvActor:
    """A Ray actor hosting envs; its threads run the calls of different envs at once."""

    def __init__(self, factory: EnvFactory) -> None:
        self.factory = factory
        self.envs: dict[int, TokenEnv] = {}

    def call(self, eid: int, method: str, arg: Any) -> tuple[bool, Any]:
        return serve(self.envs, self.factory, eid, method, arg)


class _RayEnvs:
    """Envs live in a pool of Ray actors (any node with the resources asked for); an
    episode stays on one actor. Ray starts in this process unless it is already running.

    Pools outlive a rollout: the next rollout with the same env factory and pool settings
    (a trainer's next step) reuses the running actors instead of starting new processes.
    `close_env_actors()` ends them; a pool with a dead actor is replaced on its next use.
    """

    def __init__(self, factory: EnvFactory, cfg: RolloutConfig):
        import ray

        actor = ray.remote(_EnvActor).options(
            num_cpus=cfg.env_actor_num_cpus,
            resources=dict(cfg.env_actor_resources) or None,
            max_concurrency=cfg.num_env_workers,
        )
        self.actors = [actor.remote(factory) for _ in range(cfg.num_env_actors)]
        self.broken = False
        """Set when an actor died; the pool is then replaced before the next rollout."""

    @classmethod
    def shared(cls, factory: EnvFactory, cfg: RolloutConfig) -> _RayEnvs:
        """The running pool for `factory` and these settings, started if needed."""
        import ray

        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False)
        key = (
            ray.get_runtime_context().get_job_id(),
            factory,
            cfg.num_env_actors,
            cfg.env_actor_num_cpus,
            tuple(sorted(cfg.env_actor_resources.items())),
            cfg.num_env_workers,
        )
        pool = _ray_env_pools.get(key)
        if pool is None or pool.broken:
            if pool is not None:
                pool.kill()
            pool = _ray_env_pools[key] = cls(factory, cfg)
        return pool

    async def call(self, eid: int, method: str, arg: Any = None) -> Any:
        import ray

        try:
            ok, result = await self.actors[eid % len(self.actors)].call.remote(eid, method, arg)
        except ray.exceptions.RayActorError:
            self.broken = True
            raise
        if not ok:
            raise EnvCallError(result)
        return result

    def shutdown(self) -> None:
        """End of one rollout: the actors keep running for the next one."""

    def kill(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)


_ray_env_pools: dict[tuple[Any, ...], _RayEnvs] = {}


def close_env_actors() -> None:
    """Kill the Ray env actors that rollouts with `env_executor="ray"` left running."""
    while _ray_env_pools:
        _, pool = _ray_env_pools.popitem()
        try:
            pool.kill()
        except Exception as e:  # Ray already shut down: the actors are gone with it
            log.debug("closing env actors: %s", e)


_Envs = _ThreadEnvs | _ProcessEnvs | _RayEnvs


# -- one episode ------------------------------------------------------------------------------
@dataclass
class _Context:
    engine: Engine
    envs: _Envs
    bridge: ChatBridge
    cfg: RolloutConfig
    sampling: SamplingParams
    env_name: str


async def _bounded(
    awaitable: Any, timeout: float | None, deadline: float | None, status: Status, what: str
) -> Any:
    """Await with a per-call timeout and the episode deadline; map failures to a status."""
    now = time.monotonic()
    remaining = None if deadline is None else deadline - now
    limit = min((t for t in (timeout, remaining) if t is not None), default=None)
    if limit is not None and limit <= 0:
        if asyncio.iscoroutine(awaitable):
            awaitable.close()
        raise _OutOfTime
    try:
        return await asyncio.wait_for(awaitable, limit)
    except TimeoutError:
        if remaining is not None and limit == remaining:
            raise _OutOfTime from None
        raise _Failure(status, f"{what} timed out after {timeout:g} s") from None
    except _Failure:
        raise
    except Exception as e:
        raise _failure(status, what, e) from e


def _failure(status: Status, what: str, error: Exception) -> _Failure:
    if isinstance(error, EnvWorkerDied | EnvCallError):  # a worker's message
        return _Failure(status, f"{what} failed: {error}")
    return _Failure(status, f"{what} failed: {type(error).__name__}: {error}")


def _action_invalid(info: dict[str, Any]) -> bool:
    return info.get("valid") is False or info.get("action_valid") is False


async def _run_episode(ctx: _Context, eid: int, seed: int, group_id: int) -> Trajectory:
    from agentrl.rollout.engine import GenerationRequest

    cfg, bridge = ctx.cfg, ctx.bridge
    traj = Trajectory(samples=[], turns=[], env_name=ctx.env_name, seed=seed, group_id=group_id)
    deadline = None if cfg.episode_timeout_s is None else time.monotonic() + cfg.episode_timeout_s
    step_s = cfg.env_step_timeout_s
    env_s = generation_s = 0.0
    parse_failures = 0
    tokens: EpisodeTokens | None = None

    async def env_call(method: str, arg: Any = None) -> Any:
        nonlocal env_s
        t0 = time.monotonic()
        try:
            envs = ctx.envs
            if method == "step" and isinstance(envs, _ThreadEnvs) and envs.can_step_inline:
                # a known-fast step: no task, timer or thread hop
                if deadline is not None and t0 >= deadline:
                    raise _OutOfTime
                try:
                    return envs.step_inline(eid, arg)
                except Exception as e:
                    raise _failure(Status.ENV_ERROR, "env step", e) from e
            coro = ctx.envs.call(eid, method, arg)
            own_limit = getattr(ctx.envs, "enforces_timeout", False)  # and kills what hangs
            call = "reset" if method == "start" else method
            what = f"env {call} (seed {seed})"
            try:
                return await _bounded(
                    coro, None if own_limit else step_s, deadline, Status.ENV_ERROR, what
                )
            except _Failure as e:
                if isinstance(e.__cause__, EnvCallTimeout):
                    raise _Failure(
                        Status.ENV_ERROR,
                        f"env {call} (seed {seed}) timed out after {step_s:g} s; "
                        "its worker process was replaced",
                    ) from None
                raise
        finally:
            env_s += time.monotonic() - t0

    try:
        (system_prompt, env_max_turns, tools, env_class), reset_out = await env_call("start", seed)
        observation, reset_info = checked_reset(
            reset_out, env=env_class, call=f"reset(seed={seed})"
        )
        traj.system_prompt, traj.first_observation = system_prompt, observation
        traj.reset_info = dict(reset_info or {})
        tokens = EpisodeTokens(
            bridge, system_prompt, observation, tools=tools, history_turns=cfg.history_turns
        )
        if not tokens.template_ok and bridge.prefix_preserving:  # only the tool conversation
            _warn_once(bridge, tokens.probe_error, tools=True)
        max_turns = cfg.max_turns or env_max_turns
        stops = ctx.sampling.stop_token_ids + tuple(
            i for i in bridge.stop_token_ids if i not in ctx.sampling.stop_token_ids
        )
        for t in range(max_turns):
            room = cfg.max_context_tokens - len(tokens)
            if room <= 0:
                traj.status, traj.error = Status.TRUNCATED, "context limit"
                break
            params = replace(
                ctx.sampling,
                max_new_tokens=min(ctx.sampling.max_new_tokens, room),
                stop_token_ids=stops,
            )
            request = GenerationRequest(tokens.prompt_ids, params, session_id=f"{group_id}-{eid}")
            t0 = time.monotonic()
            try:
                completions = await _bounded(
                    ctx.engine.generate([request]), None, deadline, Status.ENGINE_ERROR, "generate"
                )
            finally:
                generation_s += time.monotonic() - t0
            completion = completions[0]
            tokens.add_completion(completion.token_ids, completion.logp, t)
            action = bridge.decode(completion.token_ids, skip_special_tokens=True)
            turn = Turn(
                num_sampled=len(completion.token_ids),
                action_text=action,
                finish_reason=completion.finish_reason,
                weight_version=completion.weight_version,
            )
            traj.turns.append(turn)
            observation, reward, terminated, truncated, info = checked_step(
                await env_call("step", action),
                env=env_class,
                call=f"step (turn {t + 1} of the episode with seed {seed})",
            )
            turn.reward, turn.observation = float(reward), observation
            turn.terminated, turn.truncated, turn.info = bool(terminated), bool(truncated), info
            parse_failures += _action_invalid(info)
            if terminated:
                break
            if truncated:
                traj.status, traj.error = Status.TRUNCATED, "env truncated"
                break
            if t == max_turns - 1:
                traj.status, traj.error = Status.TRUNCATED, f"turn limit ({max_turns})"
                break
            ids = tokens.next_ids(observation, completion.token_ids)
            if tokens.next_length(ids) >= cfg.max_context_tokens:
                traj.status, traj.error = Status.TRUNCATED, "context limit"
                break
            tokens.add_observation(observation, ids, t)
    except _Failure as e:
        traj.status, traj.error = e.status, str(e)
    except _OutOfTime:
        traj.status = Status.TRUNCATED
        traj.error = f"episode time limit ({cfg.episode_timeout_s:g} s)"
    finally:
        try:
            await _bounded(ctx.envs.call(eid, "close"), 5.0, None, Status.ENV_ERROR, "env close")
        except (_Failure, _OutOfTime) as e:
            log.debug("episode %d: %s", eid, e)
    if tokens is not None:
        traj.samples = tokens.samples()
        traj.per_turn_samples = tokens.per_turn
    traj.metrics = {
        "generation_s": generation_s,
        "env_s": env_s,
        "num_sampled_tokens": float(traj.num_sampled_tokens),
        "num_tokens": float(sum(len(s) for s in traj.samples)),
        "num_parse_failures": float(parse_failures),
    }
    return traj


# -- the rollout ------------------------------------------------------------------------------
def rollout_metrics(trajs: Sequence[Trajectory], wall_s: float) -> dict[str, float]:
    """Aggregate metrics of a rollout, keyed `rollout/<name>`."""
    n = max(len(trajs), 1)
    turns = sum(t.num_turns for t in trajs)
    sampled = sum(t.num_sampled_tokens for t in trajs)
    count = {s: sum(t.status == s for t in trajs) for s in Status}
    metric = {
        "wall_s": wall_s,
        "generation_s": sum(t.metrics.get("generation_s", 0.0) for t in trajs),
        "env_s": sum(t.metrics.get("env_s", 0.0) for t in trajs),
        "num_episodes": float(len(trajs)),
        "num_sampled_tokens": float(sampled),
        "tokens_per_s": sampled / wall_s if wall_s > 0 else 0.0,
        "turns_per_episode": turns / n,
        "success_rate": sum(t.success for t in trajs) / n,
        "parse_failure_rate": sum(t.metrics.get("num_parse_failures", 0) for t in trajs)
        / max(turns, 1),
        "truncation_rate": count[Status.TRUNCATED] / n,
        "env_error_rate": count[Status.ENV_ERROR] / n,
        "engine_error_rate": count[Status.ENGINE_ERROR] / n,
        "mean_reward": sum(t.total_reward for t in trajs) / n,
        "per_turn_sample_rate": sum(t.per_turn_samples for t in trajs) / n,
    }
    return {f"rollout/{k}": float(v) for k, v in metric.items()}


def _warn_unbounded(reason: str) -> None:
    if reason not in _warned_templates:
        _warned_templates.add(reason)
        warnings.warn(
            f"env calls run in threads, where a hung call cannot be stopped: the env cannot be "
            f"built in a worker process ({reason}); define it in an importable module "
            "(not a lambda or a script's __main__) to bound every call",
            stacklevel=4,
        )


def _warn_once(bridge: ChatBridge, probe_error: str | None, *, tools: bool = False) -> None:
    key = f"{getattr(bridge.tokenizer, 'name_or_path', '')}:{hash(bridge.tokenizer.chat_template)}"
    key += ":tools" if tools else ""
    if key in _warned_templates:
        return
    _warned_templates.add(key)
    what = "with tools and tool messages " if tools else ""
    warnings.warn(
        f"the chat template is not prefix-preserving {what}"
        f"({probe_error}); trajectories are stored as one sample per turn, each with "
        "its full prompt (metric rollout/per_turn_sample_rate)",
        stacklevel=3,
    )


async def arollout(
    engine: Engine,
    env_factory: EnvFactory,
    tokenizer: Any,
    seeds: Sequence[int],
    *,
    group_size: int | None = None,
    cfg: RolloutConfig | None = None,
    sampling: SamplingParams | None = None,
    env_name: str = "",
    bridge: ChatBridge | None = None,
    progress: bool = False,
) -> RolloutResult:
    """Run `group_size` episodes per seed concurrently and return their trajectories.

    Episode `k` of seed `seeds[i]` resets with that seed and gets `group_id = i`. `cfg`
    gives the limits and env executor; `sampling` (default `cfg.sampling`) the sampling
    settings, to which the template's end-of-turn ids are added as stop ids.
    """
    cfg = cfg or RolloutConfig()
    group_size = group_size or cfg.group_size
    sampling = sampling or cfg.sampling.to_params()
    bridge = bridge or ChatBridge(tokenizer)
    if not bridge.prefix_preserving:
        _warn_once(bridge, bridge.probe_error)
    num_workers = min(cfg.num_env_workers, max(1, len(seeds) * group_size))
    envs: _Envs
    chosen = "env_executor" in cfg.model_fields_set  # a user's choice wins over the env's
    if cfg.env_executor == "thread" or (not chosen and _bounds_its_own_calls(env_factory)):
        envs = _ThreadEnvs(env_factory, num_workers)
    elif cfg.env_executor == "process":
        try:
            envs = _ProcessEnvs(env_factory, num_workers, cfg.env_step_timeout_s)
        except EnvWorkerStartError as e:
            _warn_unbounded(str(e))
            envs = _ThreadEnvs(env_factory, num_workers)
    else:
        envs = _RayEnvs.shared(env_factory, cfg)
    ctx = _Context(engine, envs, bridge, cfg, sampling, env_name)
    bar = _progress_bar(len(seeds) * group_size) if progress else None

    async def one(eid: int, seed: int, group_id: int) -> Trajectory:
        traj = await _run_episode(ctx, eid, seed, group_id)
        if bar is not None:
            bar[0].advance(bar[1])
        return traj

    start = time.monotonic()
    try:
        if bar is not None:
            bar[0].start()
        tasks = [
            asyncio.create_task(one(i * group_size + k, int(seed), i))
            for i, seed in enumerate(seeds)
            for k in range(group_size)
        ]
        try:
            trajs = list(await asyncio.gather(*tasks))
        except BaseException:  # e.g. an EnvContractError: end the other episodes first
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
    finally:
        if bar is not None:
            bar[0].stop()
        envs.shutdown()
    return RolloutResult(trajs, rollout_metrics(trajs, time.monotonic() - start))


def _progress_bar(total: int) -> tuple[Any, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    bar = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
    )
    return bar, bar.add_task("episodes", total=total)


def _bounds_its_own_calls(env_factory: EnvFactory) -> bool:
    """Whether the env `env_factory` builds (`functools.partial(make, NAME, ...)`) declares
    `bounds_its_own_calls`: its risky work runs in a sandbox that kills what overruns, so it
    runs in threads, and its sandbox stays in this process, which removes its containers on
    any exit (in a worker process a signal could leave them behind)."""
    import functools

    from agentrl.envs.registry import _resolve, make, spec

    if not (isinstance(env_factory, functools.partial) and env_factory.func is make):
        return False
    try:
        target = spec(env_factory.args[0]).entry_point
        cls = _resolve(target) if isinstance(target, str) else target
    except Exception:  # noqa: BLE001 - building the env reports what is wrong
        return False
    return bool(getattr(cls, "bounds_its_own_calls", False))


def rollout(
    engine: Engine,
    env_factory: EnvFactory,
    tokenizer: Any,
    seeds: Sequence[int],
    **kwargs: Any,
) -> RolloutResult:
    """Synchronous `arollout` (runs its own event loop); same arguments."""
    results: list[RolloutResult] = []

    async def main() -> None:  # returns None: asyncio.run would repr a returned result
        results.append(await arollout(engine, env_factory, tokenizer, seeds, **kwargs))

    asyncio.run(main())
    return results[0]
