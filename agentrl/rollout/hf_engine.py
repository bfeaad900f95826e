"""HFEngine: transformers on CPU or GPU, continuous batching with a KV cache and left padding.

Concurrent `generate` calls (one per episode task) put their requests on one queue; a worker
thread runs the model and resolves each caller's futures on the caller's event loop, so the
event loop never blocks on the model.

Batching is continuous: when the engine is idle, the first request starts a batch together
with whatever arrives within `batch_window_s`; while a batch runs, requests that arrive are
admitted between two decode steps (their prompts run as one prefill, and their KV cache rows
join the running cache, padded on the left), and rows that finish leave at once (their cache
rows are dropped). So an episode whose env answered a little later than the others starts
at the next step instead of waiting for the whole batch, and a long answer only costs its
own row. `update_weights` stops admitting, lets the running rows finish, then loads: each
completion comes from one weight version.

Each row has its own sampling settings, stop ids and random stream (seeded per request);
sampling is one batched pass per step (`sample_rows`): batched top-k/top-p masks, then one
uniform draw per row from its stream and an inverse-CDF lookup, so a row's ids depend only
on its seed, never on which other rows share its batch.
The reported logprob of a sampled id is `log_softmax(raw logits)[id]`: the model's own
distribution at temperature 1, before top-k/top-p (what the trainer computes teacher-forced).
See `Completion.logp`.
"""

from __future__ import annotations

import asyncio
import queue
import random
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from agentrl._kvcache import full_attention_cache, shared_prefix_batch
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
        """Set the caller's future to `result` (from the worker thread)."""
        resolve_all([(self, result)])

    def set(self, result: Completion | BaseException) -> None:
        """On the caller's event loop: set the future unless the caller gave up."""
        if self.future.done():  # the caller was cancelled meanwhile
            return
        if isinstance(result, BaseException):
            self.future.set_exception(result)
        else:
            self.future.set_result(result)


def resolve_all(results: Sequence[tuple[_Job, Completion | BaseException]]) -> None:
    """Resolve many jobs with one wake-up per event loop (not one per job: each wake-up is a
    self-pipe write that makes the loop thread contend for the GIL)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Job, Completion | BaseException]]] = {}
    for job, result in results:
        by_loop.setdefault(job.loop, []).append((job, result))

    def _set_all(items: list[tuple[_Job, Completion | BaseException]]) -> None:
        for job, result in items:
            job.set(result)

    for loop, items in by_loop.items():
        try:
            loop.call_soon_threadsafe(_set_all, items)
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


@dataclass(frozen=True)
class RowSampler:
    """One row's sampling settings and its own random stream (seeded per request).

    Each sampled id costs exactly one uniform draw from `rng` (none at temperature 0), so a
    request's ids depend only on its seed and its logits, never on the other rows.
    """

    temperature: float
    """0 is greedy."""
    top_k: int
    """Keep the k highest logits (0 or >= vocab: all)."""
    top_p: float
    """Keep the smallest set of ids holding this much probability (1: all)."""
    rng: random.Random
    """The row's uniform stream."""

    @classmethod
    def from_params(cls, params: SamplingParams, seed: int) -> RowSampler:
        """The sampler for `params`, its stream seeded with `seed`."""
        return cls(params.temperature, params.top_k, params.top_p, random.Random(seed))


def sample_rows(
    logits: torch.Tensor, samplers: Sequence[RowSampler]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one id per row of `logits` [B, V] (float) in one batched pass.

    Temperature, top-k and top-p (the same rules as `filter_logits`) are applied as batched
    masks; each row draws one uniform u from its own stream and takes the id where the
    cumulative probability first exceeds u (inverse CDF), so ids with zero probability are
    never picked. Returns the ids [B] (long) and their logprobs [B] under the raw
    temperature-1 distribution `log_softmax(logits)` (what a teacher-forced pass computes).
    """
    n, vocab = logits.shape
    logp = torch.log_softmax(logits, dim=-1)  # raw distribution, temperature 1
    greedy = [s.temperature == 0 for s in samplers]
    if all(greedy):
        ids = logits.argmax(-1)
        return ids, logp.gather(1, ids.unsqueeze(1)).squeeze(1)
    temps = [s.temperature if s.temperature > 0 else 1.0 for s in samplers]
    x = logits
    if any(t != 1.0 for t in temps):
        x = logits / torch.tensor(temps, dtype=logits.dtype, device=logits.device).unsqueeze(1)
    top_k = [s.top_k if 0 < s.top_k < vocab else 0 for s in samplers]
    top_p = [s.top_p if s.top_p < 1.0 else float("inf") for s in samplers]
    order = None
    if any(top_k) or any(p != float("inf") for p in top_p):
        x, order = torch.sort(x, dim=-1, descending=True)
        x = _mask_sorted(x, top_k, top_p)
    cdf = torch.cumsum(torch.softmax(x, dim=-1), dim=-1)
    total = cdf[:, -1:].contiguous()
    u = [0.0 if g else s.rng.random() for s, g in zip(samplers, greedy, strict=True)]
    target = torch.tensor(u, dtype=cdf.dtype, device=cdf.device).unsqueeze(1) * total
    pick = torch.searchsorted(cdf, target, right=True)
    # u * total can round up to total: stay on the last id that holds probability
    pick = torch.minimum(pick, torch.searchsorted(cdf, total))
    if order is not None:
        pick = order.gather(1, pick)
    ids = pick.squeeze(1)
    if any(greedy):
        ids = torch.where(torch.tensor(greedy, device=logits.device), logits.argmax(-1), ids)
    return ids, logp.gather(1, ids.unsqueeze(1)).squeeze(1)


def _mask_sorted(x: torch.Tensor, top_k: list[int], top_p: list[float]) -> torch.Tensor:
    """Top-k then top-p masks on logits sorted in descending order per row [B, V]
    (`top_k` 0 and `top_p` inf leave a row unmasked)."""
    k = torch.tensor(top_k, device=x.device)
    if any(top_k):
        kth = x.gather(1, (k - 1).clamp(min=0).unsqueeze(1))
        kth = kth.masked_fill((k == 0).unsqueeze(1), float("-inf"))
        x = x.masked_fill(x < kth, float("-inf"))
    if any(p != float("inf") for p in top_p):
        probs = torch.softmax(x, dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs
        limit = torch.tensor(top_p, dtype=x.dtype, device=x.device).unsqueeze(1)
        x = x.masked_fill(mass_before >= limit, float("-inf"))  # smallest prefix with top_p
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
        min_shared_prefix: int = 16,
    ) -> None:
        """Load `model` (name, path or a loaded model) and start the batching worker thread.

        `stop_token_ids` is the default for requests that give none (else the model's eos ids);
        `num_threads` sets torch's intra-op threads (None leaves the process setting).
        `min_shared_prefix`: when the prompts prefilled together begin with at least this many
        equal ids (a system prompt), that prefix runs once and its keys and values are shared
        by every row (0: never).
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
        self.min_shared_prefix = min_shared_prefix
        self.stats = {
            "batches": 0,
            "forward_calls": 0,
            "requests": 0,
            "sampled_tokens": 0,
            "shared_prefix_ids": 0,
            "model_s": 0.0,
        }
        """Counters since start: request groups admitted (one prefill each), model forward
        calls (prefills + decode steps), requests served, ids sampled, prompt ids whose prefill
        a shared prefix saved, seconds in the model."""
        self._lock = threading.Lock()  # held while a decode step runs or weights load
        self._idle = threading.Condition()  # guards _busy and _pausing
        self._busy = False  # a batch is running
        self._pausing = 0  # update_weights calls waiting for the running batch to finish
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
        """Copy `state_dict` into the model in place. It waits for the running batch to finish
        (no new request joins it meanwhile), so each completion comes from one version."""
        with self._idle:
            self._pausing += 1
            while self._busy:
                self._idle.wait()
        try:
            with self._lock:
                load_state_dict_checked(self.model, state_dict)
                self.weight_version = version
        finally:
            with self._idle:
                self._pausing -= 1
                self._idle.notify_all()

    def close(self) -> None:
        """Stop the worker thread; queued requests fail with an error."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._worker.join(timeout=60)

    # -- worker thread: continuous batching ----------------------------------------------

    def _run(self) -> None:
        """Serve the queue until `close`: admit new requests into the running batch between
        decode steps, so a request that arrives mid-batch starts at the next step instead of
        waiting for the whole batch to finish."""
        batch: _Batch | None = None
        stopping = False
        while True:
            if batch is None:
                if stopping:
                    break
                jobs = self._next_batch()
                if jobs is None:
                    break
            else:
                jobs, stopping = self._admissible(batch, stopping)
            try:
                with self._lock, torch.inference_mode():
                    t0 = time.perf_counter()
                    batch = self._step(batch, jobs)
                    self.stats["model_s"] += time.perf_counter() - t0
            except Exception as e:  # fail the callers in this batch, keep serving
                for job in [r.job for r in batch.rows] if batch is not None else []:
                    job.resolve(e)
                for job in jobs:
                    job.resolve(e)
                batch = None
            if batch is None:
                with self._idle:
                    self._busy = False
                    self._idle.notify_all()
        while not self._queue.empty():  # fail whatever arrived after close
            job = self._queue.get_nowait()
            if job is not None:
                job.resolve(RuntimeError("HFEngine is closed"))

    def _next_batch(self) -> list[_Job] | None:
        """Idle: block for one job, then gather more for up to `batch_window_s`."""
        first = self._queue.get()
        if first is None:
            return None
        with self._idle:  # weights are loading: start no batch until they are in
            while self._pausing:
                self._idle.wait()
            self._busy = True
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

    def _admissible(self, batch: _Batch, stopping: bool) -> tuple[list[_Job], bool]:
        """Running: the queued jobs that fit into the batch now (none while weights wait to
        load, while closing, or when the model's cache cannot be merged)."""
        jobs: list[_Job] = []
        if stopping or self._pausing or not batch.mergeable:
            return jobs, stopping
        while len(batch.rows) + len(jobs) < self.max_batch_size:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
        return jobs, stopping

    def _step(self, batch: _Batch | None, jobs: list[_Job]) -> _Batch | None:
        """One decode step of the running rows, then prefill and merge `jobs`; finished rows
        are resolved and leave. Returns the batch still running (None when empty)."""
        if batch is not None:
            self._decode(batch)
            batch = self._retire(batch)
        rows = []
        for job in jobs:
            try:
                rows.append(self._new_row(job))
            except ValueError as e:  # a bad request fails alone
                job.resolve(e)
        if rows:
            self.stats["batches"] += 1
            self.stats["requests"] += len(rows)
            new = self._retire(self._prefill(rows))
            if new is not None:
                batch = new if batch is None else batch.merge(new)
        return batch

    def _new_row(self, job: _Job) -> _Row:
        """A row for `job`: its token budget, stop ids and seeded generator."""
        request = job.request
        if not request.prompt_ids:
            raise ValueError("a GenerationRequest needs at least one prompt id")
        params = request.params
        budget = min(params.max_new_tokens, self.max_context - len(request.prompt_ids))
        if budget < 1:
            raise ValueError(
                f"prompt of {len(request.prompt_ids)} ids leaves no room "
                f"in the model's context ({self.max_context})"
            )
        stop_ids = (
            set() if params.ignore_eos else set(params.stop_token_ids or self.default_stop_ids)
        )
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        return _Row(job, budget, stop_ids, RowSampler.from_params(params, seed))

    def _prefill(self, rows: list[_Row]) -> _Batch:
        """Run the prompts of `rows` and sample each row's first id.

        The prompts' common prefix, when long enough, runs once and its cache is repeated
        for every row; each row's rest follows it, left-padded, so a row's ids are
        `[prefix, pads, rest]` with the pads masked (the decode steps and `merge` only read
        the attention mask). Otherwise the whole prompts run left-padded."""
        n = len(rows)
        cache, shared, input_ids, attention_mask, position_ids = shared_prefix_batch(
            self.model,
            [r.job.request.prompt_ids for r in rows],
            keep=1,  # every row runs at least its last id
            min_shared=self.min_shared_prefix,
            pad_id=self.pad_id,
            device=self.device,
        )
        if shared:
            self.stats["forward_calls"] += 1
            self.stats["shared_prefix_ids"] += shared * (n - 1)
        batch = _Batch(rows, cache, attention_mask, position_ids[:, -1:], input_ids)
        self._forward_and_sample(batch, position_ids)
        return batch

    def _decode(self, batch: _Batch) -> None:
        """Feed every row its last sampled id and sample the next one."""
        batch.attention_mask = torch.cat(
            [batch.attention_mask, batch.attention_mask.new_ones((len(batch.rows), 1))], 1
        )
        batch.position_ids = batch.position_ids + 1
        self._forward_and_sample(batch, batch.position_ids)

    def _forward_and_sample(self, batch: _Batch, position_ids: torch.Tensor) -> None:
        logits = self.model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=position_ids,
            past_key_values=batch.cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1, :]  # [B, V]
        self.stats["forward_calls"] += 1
        ids, logps = sample_rows(logits.float(), [r.sampler for r in batch.rows])
        tokens = ids.tolist()
        for row, token, lp in zip(batch.rows, tokens, logps.tolist(), strict=True):
            row.out_ids.append(token)
            row.out_logp.append(lp)
            if token in row.stop_ids:
                row.reason = "stop"
        batch.input_ids = ids.unsqueeze(1)  # [B, 1]
        self.stats["sampled_tokens"] += len(tokens)

    def _retire(self, batch: _Batch) -> _Batch | None:
        """Resolve rows that stopped, hit their budget or whose caller gave up; drop them."""
        keep = []
        done: list[tuple[_Job, Completion | BaseException]] = []
        for i, row in enumerate(batch.rows):
            if row.job.future.cancelled():  # the caller timed out or was cancelled
                continue
            if row.reason == "stop" or len(row.out_ids) >= row.budget:
                completion = Completion(row.out_ids, row.out_logp, row.reason, self.weight_version)
                done.append((row.job, completion))
                continue
            keep.append(i)
        if done:
            resolve_all(done)
        if not keep:
            return None
        if len(keep) < len(batch.rows):
            batch.select(keep)
        return batch


@dataclass
class _Row:
    """One request being sampled in the running batch."""

    job: _Job
    budget: int = 0
    stop_ids: set[int] = field(default_factory=set)
    sampler: RowSampler = field(default_factory=lambda: RowSampler(1.0, 0, 1.0, random.Random()))
    out_ids: list[int] = field(default_factory=list)
    out_logp: list[float] = field(default_factory=list)
    reason: str = "length"


@dataclass
class _Batch:
    """The running batch: its rows, their shared KV cache, left-padded attention mask
    [B, W], the next position id of each row [B, 1] and the ids to feed next [B, 1]."""

    rows: list[_Row]
    cache: Any
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    input_ids: torch.Tensor

    @property
    def mergeable(self) -> bool:
        """Whether new rows can join: plain dynamic cache layers only (sliding-window or
        quantized layers keep a different layout; their rows wait for the next batch)."""
        return full_attention_cache(self.cache)

    def select(self, keep: list[int]) -> None:
        """Keep rows `keep`; cut the left columns that only padded rows now gone."""
        index = torch.tensor(keep, device=self.attention_mask.device)
        self.rows = [self.rows[i] for i in keep]
        self.cache.batch_select_indices(index)
        self.attention_mask = self.attention_mask[index]
        self.position_ids = self.position_ids[index]
        self.input_ids = self.input_ids[index]
        first = int(self.attention_mask.any(0).int().argmax())
        if first > 0 and self.mergeable:
            self.attention_mask = self.attention_mask[:, first:]
            for layer in self.cache.layers:
                layer.keys = layer.keys[:, :, first:]
                layer.values = layer.values[:, :, first:]

    def merge(self, other: _Batch) -> _Batch:
        """Append `other`'s rows; the narrower cache and mask are padded on the left."""
        width = max(self.attention_mask.shape[1], other.attention_mask.shape[1])
        for mine, theirs in zip(self.cache.layers, other.cache.layers, strict=True):
            mine.keys = torch.cat(
                [_pad_left(mine.keys, width, 2), _pad_left(theirs.keys, width, 2)]
            )
            mine.values = torch.cat(
                [_pad_left(mine.values, width, 2), _pad_left(theirs.values, width, 2)]
            )
        self.attention_mask = torch.cat(
            [_pad_left(self.attention_mask, width, 1), _pad_left(other.attention_mask, width, 1)]
        )
        self.position_ids = torch.cat([self.position_ids, other.position_ids])
        self.input_ids = torch.cat([self.input_ids, other.input_ids])
        self.rows = self.rows + other.rows
        return self


def _pad_left(x: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """`x` with zeros prepended along `dim` up to `width`."""
    missing = width - x.shape[dim]
    if missing <= 0:
        return x
    shape = list(x.shape)
    shape[dim] = missing
    return torch.cat([x.new_zeros(shape), x], dim)


def _eos_ids(model: Any) -> list[int]:
    """The model's eos ids from its generation config (an int or a list there)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    if eos is None:
        return []
    return [int(e) for e in (eos if isinstance(eos, list | tuple) else [eos])]


def load_state_dict_checked(model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor]) -> None:
    """`load_state_dict` of some or all weights (a LoRA run sends only the layers its adapters
    change; the others keep their values); unknown names are an error."""
    _, unexpected = model.load_state_dict(dict(state_dict), strict=False)
    if unexpected:
        raise KeyError(f"update_weights: unknown parameter names {sorted(unexpected)[:5]}")
