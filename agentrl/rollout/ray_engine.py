"""RayEngine: N replicas of any engine as Ray actors, behind the same `Engine` protocol.

- Requests are balanced across replicas by in-flight count; all requests of one episode
  (`session_id`) go to the replica that served its first turn, so its prefix cache helps.
- `update_weights` puts the state dict in Ray's object store once and every replica loads it;
  it fails with `TimeoutError` naming the replicas that did not answer in time.
- A replica that dies is replaced (same resources), given the latest weights, and the requests it had in flight are sent again.
- `address=None` starts Ray in this process (`ray.init()`) unless it is already running;
  `address="host:port"` (or `"auto"`) joins an existing cluster.

Token authentication: a cluster started with `RAY_AUTH_MODE=token` needs the same
`RAY_AUTH_MODE` and `RAY_AUTH_TOKEN` in the driver's environment before `RayEngine` connects.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from agentrl.rollout.engine import Completion, Engine, GenerationRequest
from agentrl.rollout.engine_registry import engine_entry

if TYPE_CHECKING:
    from agentrl.rollout.config import EngineConfig


@dataclass(frozen=True)
class EngineSpec:
    """A picklable recipe for one engine replica: which engine, which model, its options."""

    kind: str
    """The engine's registered name (`hf`: HFEngine, `vllm`: VLLMEngine; see
    `agentrl.rollout.engine_registry`) or `module.path:Class`."""
    model: str
    """Model name: alias, local path or Hugging Face id (resolved on the replica's node)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the engine's constructor."""

    def build(self) -> Engine:
        """Create the engine in this process."""
        return engine_entry(self.kind).build(self.model, **self.kwargs)


class _EngineActor:
    """The Ray actor around one engine (async actor: many generate calls run at once)."""

    def __init__(self, factory: Callable[[], Engine], num_threads: int | None) -> None:
        if num_threads is not None:
            os.environ["OMP_NUM_THREADS"] = str(num_threads)
            torch.set_num_threads(num_threads)
        self.engine = factory()

    async def generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        return await self.engine.generate(requests)

    async def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> int:
        await asyncio.to_thread(self.engine.update_weights, state_dict, version)
        return version

    async def info(self) -> dict[str, Any]:
        import ray

        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "weight_version": self.engine.weight_version,
        }

    async def close(self) -> None:
        await asyncio.to_thread(self.engine.close)


@dataclass
class _Replica:
    actor: Any
    index: int
    generation: int = 0
    """How many times this slot was (re)started; tells a stale failure from a fresh one."""
    in_flight: int = 0


class RayEngine:
    """N engine replicas on Ray, load-balanced, sticky per episode, restarted when they die."""

    def __init__(
        self,
        engine: EngineSpec | Callable[[], Engine],
        *,
        num_replicas: int = 2,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        address: str | None = None,
        num_threads: int | None = 1,
        update_timeout_s: float = 300.0,
        start_timeout_s: float = 600.0,
        max_retries: int = 2,
        max_sessions: int = 100_000,
    ) -> None:
        """Start `num_replicas` actors, each building `engine` (an `EngineSpec` or a picklable
        factory) with `num_cpus`/`num_gpus`, placed by Ray's scheduler."""
        import ray

        if not ray.is_initialized():
            if address is None:
                ray.init(include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        self._factory = engine.build if isinstance(engine, EngineSpec) else engine
        self.num_replicas = num_replicas
        self.update_timeout_s = update_timeout_s
        self.start_timeout_s = start_timeout_s
        self.max_retries = max_retries
        self.weight_version = 0
        self.restarts = 0
        """Replicas replaced after dying, since start."""
        self._options: dict[str, Any] = {
            "num_cpus": num_cpus,
            "num_gpus": num_gpus,
            "max_concurrency": 1000,
        }
        self._num_threads = num_threads
        self._weights: tuple[Any, int] | None = None  # latest (ObjectRef, version)
        self._sessions: OrderedDict[str, int] = OrderedDict()
        self._max_sessions = max_sessions
        self._restart_lock = threading.Lock()
        actors = [self._new_actor(i) for i in range(num_replicas)]
        ray.get([a.info.remote() for a in actors], timeout=start_timeout_s)  # built and ready
        self._replicas = [_Replica(a, i) for i, a in enumerate(actors)]

    # -- Engine protocol -------------------------------------------------------------------

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Send each request to its episode's replica (or the least busy one), in parallel."""
        groups: dict[int, list[int]] = {}
        for position, request in enumerate(requests):
            groups.setdefault(self._route(request, groups), []).append(position)
        results: list[Completion | None] = [None] * len(requests)

        async def run(index: int, positions: list[int]) -> None:
            done = await self._generate_on(index, [requests[p] for p in positions])
            for p, completion in zip(positions, done, strict=True):
                results[p] = completion

        await asyncio.gather(*(run(i, ps) for i, ps in groups.items()))
        return [r for r in results if r is not None]

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Broadcast new weights to every replica through the object store; wait for all."""
        import ray

        cpu = {name: t.detach().to("cpu") for name, t in state_dict.items()}
        ref = ray.put(cpu)
        self._weights = (ref, version)  # restarted replicas load these
        pending = {r.actor.update_weights.remote(ref, version): r for r in self._replicas}
        deadline = time.monotonic() + self.update_timeout_s
        while pending:
            ready, _ = ray.wait(
                list(pending),
                num_returns=len(pending),
                timeout=max(0.0, deadline - time.monotonic()),
            )
            if not ready:
                names = sorted(r.index for r in pending.values())
                raise TimeoutError(
                    f"update_weights(version={version}): replicas {names} did not finish "
                    f"within {self.update_timeout_s} s"
                )
            for obj in ready:
                replica = pending.pop(obj)
                try:
                    ray.get(obj)
                except ray.exceptions.RayActorError:
                    self._restart(replica)  # the new actor loads `ref` while starting
        self.weight_version = version

    def close(self) -> None:
        """Close every replica's engine and kill the actors (Ray itself keeps running)."""
        import ray

        for replica in self._replicas:
            try:
                ray.get(replica.actor.close.remote(), timeout=60)
            except Exception:  # already dead or stuck: kill it anyway
                pass
            ray.kill(replica.actor)

    # -- introspection ---------------------------------------------------------------------

    def replica_info(self) -> list[dict[str, Any]]:
        """Node id, process id and weight version of each replica."""
        import ray

        return ray.get([r.actor.info.remote() for r in self._replicas], timeout=60)

    def actor(self, index: int) -> Any:
        """The Ray actor handle of replica `index` (e.g. to kill it in a test)."""
        return self._replicas[index].actor

    # -- internals -------------------------------------------------------------------------

    def _route(self, request: GenerationRequest, pending: Mapping[int, list[int]]) -> int:
        """The episode's replica, else the one with the fewest requests in flight + pending."""
        key = request.session_id
        if key is not None and key in self._sessions:
            self._sessions.move_to_end(key)
            return self._sessions[key]
        index = min(
            self._replicas, key=lambda r: (r.in_flight + len(pending.get(r.index, ())), r.index)
        ).index
        if key is not None:
            self._sessions[key] = index
            if len(self._sessions) > self._max_sessions:
                self._sessions.popitem(last=False)
        return index

    async def _generate_on(self, index: int, requests: list[GenerationRequest]) -> list[Completion]:
        import ray

        for attempt in range(self.max_retries + 1):
            replica = self._replicas[index]
            replica.in_flight += len(requests)
            try:
                return await replica.actor.generate.remote(requests)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                if attempt == self.max_retries:
                    raise
                await asyncio.to_thread(self._restart, replica)
            finally:
                replica.in_flight -= len(requests)
        raise AssertionError("unreachable")

    def _new_actor(self, index: int) -> Any:
        import ray

        cls = ray.remote(_EngineActor).options(name=None, **self._options)
        return cls.remote(self._factory, self._num_threads)

    def _restart(self, dead: _Replica) -> None:
        """Replace a dead replica (once, however many callers saw it die)."""
        import ray

        with self._restart_lock:
            current = self._replicas[dead.index]
            if current.generation != dead.generation:
                return  # someone else already replaced it
            try:
                ray.kill(current.actor)
            except Exception:
                pass
            actor = self._new_actor(dead.index)
            ray.get(actor.info.remote(), timeout=self.start_timeout_s)
            if self._weights is not None:
                ref, version = self._weights
                ray.get(actor.update_weights.remote(ref, version), timeout=self.update_timeout_s)
            self._replicas[dead.index] = _Replica(actor, dead.index, dead.generation + 1)
            self.restarts += 1


def engine_from_config(
    model: str, cfg: EngineConfig, *, dtype: str = "auto", num_cpus_per_replica: float = 1.0
) -> Engine:
    """The engine `cfg.name` names in the engine registry (`hf`, `vllm`, or one registered by
    `register_engine`) for `model`, in-process or as Ray replicas, each replica reserving
    `num_cpus_per_replica` CPUs (and `cfg.num_gpus_per_replica` GPUs)."""
    if cfg.device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    else:
        device = cfg.device
    options = engine_entry(cfg.name).options(cfg, dtype=dtype, device=device)
    spec = EngineSpec(cfg.name, model, options)
    if not cfg.ray:
        return spec.build()
    return RayEngine(
        spec,
        num_replicas=cfg.num_replicas,
        num_cpus=num_cpus_per_replica,
        num_gpus=cfg.num_gpus_per_replica,
        address=cfg.ray_address,
        update_timeout_s=cfg.update_timeout_s,
    )
