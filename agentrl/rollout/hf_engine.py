"""HFEngine: transformers on CPU or GPU, batched sampling with a KV cache and left padding.

Concurrent `generate` calls (one per episode task) put their requests on one queue; a worker
thread gathers them into batches (up to `max_batch_size`, waiting at most `batch_window_s`
for more), runs the model, and resolves each caller's futures on the caller's event loop.
The event loop never blocks on the model.

Each row has its own sampling settings, stop ids and random generator (seeded per request),
and rows that finish leave the batch (their KV cache rows are dropped), so a long answer only
costs its own row. The reported logprob of a sampled id is `log_softmax(raw logits)[id]`:
the model's own distribution at temperature 1, before top-k/top-p (what the trainer computes
teacher-forced). See `Completion.logp`.
"""

from __future__ import annotations

import asyncio
import queue
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from agentrl.rollout.engine import Completion, GenerationRequest, SamplingParams

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@dataclass
class _Job:
    """One queued request and where its answer goes."""

    request: GenerationRequest
    future: asyncio.Future[Completion]
    loop: asyncio.AbstractEventLoop

    def resolve(self, result: Completion | BaseException) -> None:
        def _set() -> None:
            if self.future.done():  # the caller was cancelled meanwhile
                return
            if isinstance(result, BaseException):
                self.future.set_exception(result)
            else:
                self.future.set_result(result)

        try:
            self.loop.call_soon_threadsafe(_set)
        except RuntimeError:  # the caller's event loop is closed; nobody is waiting
            pass


def filter_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Temperature, top-k and top-p applied to one row of logits [V] (for sampling only)."""
    x = logits / params.temperature
    if 0 < params.top_k < x.shape[-1]:
        kth = torch.topk(x, params.top_k).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_x, order = torch.sort(x, descending=True)
        probs = torch.softmax(sorted_x, dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs
        drop = mass_before >= params.top_p  # keeps the smallest prefix holding top_p mass
        x = x.masked_fill(drop.scatter(0, order, drop), float("-inf"))
    return x


class HFEngine:
    """A transformers model behind the `Engine` protocol (in-process; see `RayEngine`)."""

    def __init__(
        self,
        model: str | PreTrainedModel,
        *,
        dtype: str | torch.dtype = "auto",
        device: str = "cpu",
        max_batch_size: int = 32,
        batch_window_s: float = 0.005,
        stop_token_ids: Sequence[int] | None = None,
        num_threads: int | None = None,
        weight_version: int = 0,
    ) -> None:
        """Load `model` (name, path or a loaded model) and start the batching worker thread.

        `stop_token_ids` is the default for requests that give none (else the model's eos ids);
        `num_threads` sets torch's intra-op threads (None leaves the process setting).
        """
        from agentrl.rollout.models import load_model

        if num_threads is not None:
            torch.set_num_threads(num_threads)
        if isinstance(model, str):
            model = load_model(model, dtype=dtype, device=device)
        self.model = model.eval()
        self.device = torch.device(device)
        self.max_batch_size = max_batch_size
        self.batch_window_s = batch_window_s
        self.weight_version = weight_version
        self.max_context = int(getattr(model.config, "max_position_embeddings", 1 << 30))
        self.default_stop_ids = tuple(stop_token_ids or _eos_ids(model))
        self.pad_id = int(self.default_stop_ids[0]) if self.default_stop_ids else 0
        self.stats = {"batches": 0, "requests": 0, "sampled_tokens": 0, "model_s": 0.0}
        """Counters since start: batches run, requests served, ids sampled, seconds in the model."""
        self._lock = threading.Lock()  # held while a batch runs or weights load
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._closed = False
        self._worker = threading.Thread(target=self._run, name="HFEngine-worker", daemon=True)
        self._worker.start()

    # -- Engine protocol -------------------------------------------------------------------

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Complete every request; calls from concurrent tasks share batches."""
        if self._closed:
            raise RuntimeError("HFEngine is closed")
        loop = asyncio.get_running_loop()
        futures = []
        for request in requests:
            future: asyncio.Future[Completion] = loop.create_future()
            self._queue.put(_Job(request, future, loop))
            futures.append(future)
        return list(await asyncio.gather(*futures))

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy `state_dict` into the model in place (waits for the running batch)."""
        with self._lock:
            load_state_dict_checked(self.model, state_dict)
            self.weight_version = version

    def close(self) -> None:
        """Stop the worker thread; queued requests fail with an error."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._worker.join(timeout=60)

    # -- worker thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            jobs = self._next_batch()
            if jobs is None:
                break
            try:
                with self._lock, torch.inference_mode():
                    t0 = time.perf_counter()
                    results = self._generate_batch([job.request for job in jobs])
                    self.stats["model_s"] += time.perf_counter() - t0
                self.stats["batches"] += 1
                self.stats["requests"] += len(jobs)
                self.stats["sampled_tokens"] += sum(len(r.token_ids) for r in results)
            except Exception as e:  # fail this batch's callers, keep serving
                results = [e] * len(jobs)
            for job, result in zip(jobs, results, strict=True):
                job.resolve(result)
        while not self._queue.empty():  # fail whatever arrived after close
            job = self._queue.get_nowait()
            if job is not None:
                job.resolve(RuntimeError("HFEngine is closed"))

    def _next_batch(self) -> list[_Job] | None:
        """Block for one job, then gather more for up to `batch_window_s`."""
        first = self._queue.get()
        if first is None:
            return None
        jobs = [first]
        deadline = time.monotonic() + self.batch_window_s
        while len(jobs) < self.max_batch_size:
            timeout = deadline - time.monotonic()
            try:
                job = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                self._queue.put(None)  # handle close after this batch
                break
            jobs.append(job)
        return jobs

    def _generate_batch(self, requests: list[GenerationRequest]) -> list[Completion]:
        """Sample every request to completion with one shared, shrinking KV cache."""
        from transformers import DynamicCache

        n = len(requests)
        for r in requests:
            if not r.prompt_ids:
                raise ValueError("a GenerationRequest needs at least one prompt id")
        budgets = [
            min(r.params.max_new_tokens, self.max_context - len(r.prompt_ids)) for r in requests
        ]
        if min(budgets) < 1:
            raise ValueError(
                f"prompt of {max(len(r.prompt_ids) for r in requests)} ids leaves no room "
                f"in the model's context ({self.max_context})"
            )
        stop_ids = [
            set() if r.params.ignore_eos else set(r.params.stop_token_ids or self.default_stop_ids)
            for r in requests
        ]
        generators = []
        for r in requests:
            g = torch.Generator(device=self.device)
            g.manual_seed(r.params.seed if r.params.seed is not None else secrets.randbits(63))
            generators.append(g)

        width = max(len(r.prompt_ids) for r in requests)
        input_ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((n, width), dtype=torch.long)
        for i, r in enumerate(requests):  # left padding
            input_ids[i, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
            attention_mask[i, width - len(r.prompt_ids) :] = 1
        input_ids = input_ids.to(self.device)
        attention_mask = attention_mask.to(self.device)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)

        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_logp: list[list[float]] = [[] for _ in range(n)]
        reasons = ["length"] * n
        active = list(range(n))  # request index of each row still in the batch
        cache = DynamicCache(config=self.model.config)
        while active:
            logits = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=cache,
                use_cache=True,
            ).logits[:, -1, :]  # [B, V]
            logits = logits.float()
            logp = torch.log_softmax(logits, dim=-1)  # raw distribution, temperature 1
            next_ids = []
            keep = []
            for row, i in enumerate(active):
                params = requests[i].params
                if params.temperature == 0:
                    token = int(torch.argmax(logits[row]))
                else:
                    probs = torch.softmax(filter_logits(logits[row], params), dim=-1)
                    token = int(torch.multinomial(probs, 1, generator=generators[i]))
                out_ids[i].append(token)
                out_logp[i].append(float(logp[row, token]))
                if token in stop_ids[i]:
                    reasons[i] = "stop"
                elif len(out_ids[i]) < budgets[i]:
                    keep.append(row)
                    next_ids.append(token)
            if len(keep) < len(active):
                if not keep:
                    break
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                attention_mask = attention_mask[index]
                position_ids = position_ids[index]
                active = [active[row] for row in keep]
            input_ids = torch.tensor(next_ids, device=self.device).unsqueeze(1)  # [B, 1]
            attention_mask = torch.cat(
                [attention_mask, attention_mask.new_ones((len(active), 1))], 1
            )
            position_ids = position_ids[:, -1:] + 1
        return [
            Completion(out_ids[i], out_logp[i], reasons[i], self.weight_version) for i in range(n)
        ]


def _eos_ids(model: Any) -> list[int]:
    """The model's eos ids from its generation config (an int or a list there)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    if eos is None:
        return []
    return [int(e) for e in (eos if isinstance(eos, list | tuple) else [eos])]


def load_state_dict_checked(model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor]) -> None:
    """`load_state_dict` that allows only tied weights to be missing, and no unknown keys."""
    missing, unexpected = model.load_state_dict(dict(state_dict), strict=False)
    if unexpected:
        raise KeyError(f"update_weights: unknown parameter names {sorted(unexpected)[:5]}")
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    missing = sorted(set(missing) - tied)
    if missing:
        raise KeyError(f"update_weights: missing parameters {missing[:5]}")
