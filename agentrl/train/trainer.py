"""The training loop: rollout -> filter -> score -> advantages -> update -> sync -> metrics.

`Trainer.train_step` reads like the algorithm; each stage is a method (or a pure function
in `agentrl.algos`) that can be tested on its own.
"""

from __future__ import annotations

import concurrent.futures
import functools
import inspect
import logging
import random
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl.algos.estimate import compute_advantages
from agentrl.algos.filters import filter_stats, starpo_s_filter
from agentrl.algos.losses import (
    aggregate,
    count_tokens_and_seqs,
    count_trajs,
    entropy_from_logits,
    explained_variance,
    kl_loss,
    kl_penalty,
    policy_loss,
    token_logprobs_from_logits,
    value_loss,
)
from agentrl.config import TrainConfig
from agentrl.rollout.engine import SamplingParams
from agentrl.rollout.engines import GreedyCache, SeededEngine, build_engine
from agentrl.rollout.loop import RolloutResult, rollout
from agentrl.runtime._ranks import (
    barrier,
    broadcast_object,
    gather_objects,
    max_over_ranks,
    shard_rows,
)
from agentrl.runtime.backend import resolve_device
from agentrl.runtime.batch import (
    TrainBatch,
    concat_batches,
    micro_batches,
    mini_batches,
    to_batch,
)
from agentrl.runtime.metrics import (
    ABSOLUTE_SIGNALS,
    CollapseDetector,
    MetricsLogger,
    trajectory_stats,
)
from agentrl.runtime.prefix import shared_prefix_logits
from agentrl.train import branch
from agentrl.train.backends import backend_for_run as make_backend
from agentrl.train.checkpoint import (
    TrainerState,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from agentrl.train.critic import build_critic, fit_value_head, token_values
from agentrl.train.search import SEARCH_KEY, is_search, sample_labels
from agentrl.trajectory.bridge import ChatBridge
from agentrl.trajectory.types import Trajectory

log = logging.getLogger(__name__)


class StageTimer:
    """Wall-clock seconds per named stage: `with timer("update"): ...`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start


def trained_positions(loss_mask: torch.Tensor) -> torch.Tensor:
    """Sorted positions `t >= 1` where some row trains on token `t` (`[K]`, long)."""
    return loss_mask[:, 1:].bool().any(0).nonzero().squeeze(-1) + 1


def token_logprobs(
    model: torch.nn.Module,
    batch: TrainBatch,
    *,
    temperature: float = 1.0,
    positions: torch.Tensor | None = None,
    share_prefix: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(logp, logits)`: logprob of each id given the ids before it under the logits divided
    by `temperature`, `[B, T]`, and those scaled logits, `[B, K, V]`.

    With `positions` (`[K]`, from `trained_positions`), only the logits that predict those
    tokens are computed (the model's `logits_to_keep`), and `logp` is 0 elsewhere; without,
    every position 1..T-1 is scored (`K = T - 1`). `share_prefix` (with `positions`, for a
    model that is not wrapped by a distributed backend) computes the prefix all rows share once
    (`agentrl.runtime.prefix`).
    """
    if positions is None:
        positions = torch.arange(1, batch.input_ids.shape[1], device=batch.input_ids.device)
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        logits = out.logits[:, :-1]
    elif share_prefix:
        logits = shared_prefix_logits(model, batch.input_ids, batch.attention_mask, positions - 1)
    else:
        logits = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            logits_to_keep=positions - 1,
        ).logits
    if temperature != 1.0:
        logits = logits / temperature
    logp_kept = token_logprobs_from_logits(logits, batch.input_ids[:, positions])  # [B, K]
    return spread(logp_kept, positions, batch.input_ids.shape[1]), logits


def spread(values: torch.Tensor, positions: torch.Tensor, length: int) -> torch.Tensor:
    """`[B, K]` values at `positions` -> `[B, length]`, 0 elsewhere."""
    out = values.new_zeros(values.shape[0], length)
    out[:, positions] = values
    return out


def _weighted_mean(records: list[tuple[float, dict[str, float]]]) -> dict[str, float]:
    """Mean of each stat over micro-batches, weighted by their trained tokens."""
    total = sum(w for w, _ in records) or 1.0
    keys = {k for _, r in records for k in r}
    return {k: sum(w * r.get(k, 0.0) for w, r in records) / total for k in keys}


class Trainer:
    """Owns the policy (and critic, reference, engine) of one run and steps it.

    Build it with a resolved `TrainConfig` and a run directory; `train()` runs the remaining
    steps, `train_step()` runs one. With `resume=True` the latest checkpoint in `run_dir` is
    restored (weights, optimizer, scheduler, RNG, step, env seed cursor).

    Under a multi-rank backend (`fsdp2`, `deepspeed`, launched by torchrun) every rank builds
    a `Trainer` and calls `train_step` in step: rank 0 alone holds the engine, rolls out and
    broadcasts the trajectories; each rank scores and trains its share of the rows, padded to
    the same number of micro-batches; only rank 0 writes metrics and trajectories.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: Path,
        *,
        resume: bool = False,
        engine: Any | None = None,
    ) -> None:
        from agentrl.envs import make
        from agentrl.rollout.models import load_model, load_tokenizer, resolve_model

        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.env_factory = functools.partial(make, cfg.env.name, **cfg.env.kwargs)
        _check_env(cfg.env.name, cfg.env.kwargs)  # a bad kwarg fails now, before model work
        _check_branches(cfg)
        if cfg.trainer.num_threads:
            torch.set_num_threads(cfg.trainer.num_threads)
        _seed_everything(cfg.seed)
        self.generator = torch.Generator().manual_seed(cfg.seed)
        """Shuffles mini-batches; saved in checkpoints."""

        self.model_path = resolve_model(cfg.model.name)
        self.tokenizer = load_tokenizer(str(self.model_path))
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id or 0
        device = resolve_device(cfg.trainer.device)
        algo = cfg.algo

        policy_model = load_model(str(self.model_path), dtype="float32")
        forward_args = inspect.signature(policy_model.forward).parameters
        self._logits_to_keep = "logits_to_keep" in forward_args
        """Score only the positions of trained tokens (skips the LM head on prompts)."""
        self._share_prefix = self._logits_to_keep and cfg.trainer.backend == "local"
        """Compute the prefix every row of a micro-batch shares once (the system prompt of
        per-turn samples). Only for the plain model: FSDP2 and DeepSpeed wrap its forward."""
        critic_model = build_critic(policy_model) if algo.use_critic else None
        num_optimizer_steps = cfg.trainer.num_steps * algo.ppo_epochs * algo.num_mini_batches
        self.policy = make_backend(
            cfg, policy_model, lr=cfg.optim.lr, num_optimizer_steps=num_optimizer_steps
        )
        self.critic = (
            make_backend(
                cfg,
                critic_model,
                lr=cfg.optim.critic_lr,
                num_optimizer_steps=num_optimizer_steps,
                role="critic",
            )
            if critic_model is not None
            else None
        )
        self.rank = self.policy.rank
        """This process's rank; rank 0 owns the engine and writes the run directory."""
        self.world_size = self.policy.world_size
        self.reference = None
        if algo.use_reference:
            self.reference = load_model(str(self.model_path), dtype=cfg.model.dtype, device=device)
            self.reference.requires_grad_(False)

        sampling_temperature = cfg.rollout.sampling.temperature
        self.temperature = sampling_temperature if sampling_temperature > 0 else 1.0
        """The trainer scores tokens at the sampling temperature (on-policy ratios). Engines
        report raw (temperature 1) logprobs, so the sampler correction (TIS) and the
        `actor/sampler_logp_diff` metric apply only when sampling at temperature 1."""
        self.state = TrainerState()
        self.resumed_from: Path | None = None
        if resume:
            checkpoint = latest_checkpoint(self.run_dir)
            if checkpoint is None:
                raise FileNotFoundError(
                    f"--resume: {self.run_dir} has no checkpoint to resume from"
                )
            self.state = load_checkpoint(
                checkpoint, policy=self.policy, critic=self.critic, generator=self.generator
            )
            self.resumed_from = checkpoint
        self.engine: SeededEngine | None = None
        """The rollout engine; rank 0 only (the other ranks receive its trajectories)."""
        if self.rank == 0:
            self.engine = SeededEngine(
                engine if engine is not None else build_engine(cfg, self.model_path)
            )
        self._branch_engine = GreedyCache(self.engine) if self.engine is not None else None
        """The engine branches play on with: greedy continuations that reach a state (prompt)
        another continuation already played from are not generated again."""
        self._synced_step = self.state.step
        if resume:
            self.sync_weights(force=True)
        self.logger: MetricsLogger | None = None
        if self.rank == 0:
            self.logger = MetricsLogger(
                self.run_dir,
                cfg.logging,
                run_name=self.run_dir.name,
                config=cfg.model_dump(mode="json"),
            )
            if resume:
                self.logger.truncate_after(self.state.step)
        self.collapse = CollapseDetector(cfg.logging.collapse)
        self.collapse.load_state(self.state.collapse_history)
        self._last_checkpoint_s: float | None = None
        self._pending: concurrent.futures.Future[RolloutResult] | None = None
        self._prefetcher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rollout")
        self._label_replay: deque[TrainBatch] = deque(maxlen=cfg.trainer.label_replay_steps or 1)
        """The labelled rows of the last `trainer.label_replay_steps` steps (`state-best`)."""

    # -- the step -----------------------------------------------------------------------------
    def train_step(self) -> dict[str, float]:
        """One training step; returns (and logs) its metrics."""
        algo = self.cfg.algo
        timer = StageTimer()
        step = self.state.step + 1
        with timer("rollout"):
            result = broadcast_object(self.next_rollout(step))  # rank 0's rollout, everywhere
        trajs = result.trajectories
        self.save_trajectories(step, trajs)
        sampled = [t for t in trajs if not branch.is_branch(t) and not is_search(t)]  # sampled
        metrics = trajectory_stats(sampled) | result.metrics
        self._update_replay(sampled)
        trainable = [t for t in trajs if t.status.trainable]
        if self._trains_branches_only:
            trainable = [t for t in trainable if branch.is_branch(t)]  # episodes chose states
        if trainable:
            returns = [t.total_reward for t in sampled if t.status.trainable]
            self.state = replace(
                self.state, return_stats=_welford(self.state.return_stats, returns)
            )
            keep, filter_metrics = self.filter(trainable)
            if algo.estimator == "rft":  # rejection sampling: imitate the successes only
                keep = [k and t.success for t, k in zip(trainable, keep, strict=True)]
                filter_metrics["filter/keep_frac"] = sum(keep) / len(keep)
            trainable = [t for t, k in zip(trainable, keep, strict=True) if k]
        if trainable:
            batch = to_batch(trainable, pad_id=self.pad_id)
            if step == 1 and self.critic_warmup_steps:
                with timer("critic_fit"):
                    self.fit_value_head(batch)
            if self._credit_before_scoring:  # score only the rows the update will train
                metrics |= self.advantages(batch)
                metrics |= self.sample_search_labels(step, trainable, batch)
                with timer("score"):
                    metrics |= self.score(batch, rows=self._credited_rows(batch))
            else:
                with timer("score"):
                    metrics |= self.score(batch)  # old_logp, ref_logp, old_values
                metrics |= self.advantages(batch)  # batch.advantages, value_targets [B, T]
                metrics |= self.sample_search_labels(step, trainable, batch)
            if algo.estimator == "state-best":  # the loss is the mean over the labelled rows
                keep = self._credited_rows(batch).tolist()
                if self._trains_branches_only:
                    forced = set(self._forced_rows(trainable, batch))  # the answers tried, not
                    keep = [r for r in keep if r in forced]  # the continuations' samples
                batch = batch.rows(keep)
            if batch.num_rows and algo.estimator != "rft":  # imitation: no importance weight
                with timer("forced_logp"):
                    self._fill_forced_logp(trainable, batch)
            if self.cfg.trainer.label_replay_steps:
                with timer("label_replay"):
                    batch, replay_metrics = self._with_label_replay(batch)
                metrics |= replay_metrics
            if batch.num_rows:
                with timer("update"):
                    metrics |= self.update(batch, train_policy=step > self.critic_warmup_steps)
            else:
                log.info("step %d: no state had answers that returned differently; no update", step)
                metrics["throughput/train_tokens"] = 0.0
            metrics |= filter_metrics
            num_train_tokens = int(metrics["throughput/train_tokens"])
        else:
            log.warning(
                "step %d: no trainable trajectory (all env/engine errors, or rft kept none); "
                "no update",
                step,
            )
            num_train_tokens = 0
        unchanged = self._synced_step == self.state.step and not trainable
        self.state = replace(self.state, step=step, seed_cursor=step * self.cfg.trainer.num_groups)
        if unchanged:  # no update: the engine's weights are still current
            self._synced_step = step
        if not self.cfg.trainer.async_rollout:
            with timer("sync"):
                self.sync_weights()
        metrics |= self._throughput(timer, trajs, num_train_tokens)
        metrics |= self._collapse_check(step, metrics)
        if self.cfg.eval.every and step % self.cfg.eval.every == 0 and self.engine is not None:
            with timer("eval"):
                metrics |= self.evaluate()
        metrics |= {f"time/{k}": v for k, v in timer.seconds.items()}
        metrics["time/step"] = sum(timer.seconds.values())
        if self._last_checkpoint_s is not None:
            metrics["time/last_checkpoint"], self._last_checkpoint_s = self._last_checkpoint_s, None
        metrics["weight_version"] = float(self.state.weight_version)
        if self.logger is not None:  # before the checkpoint: a resume keeps this line
            self.logger.log(step, metrics)
        every = self.cfg.checkpoint.every
        if (every and step % every == 0) or step == self.cfg.trainer.num_steps:
            start = time.perf_counter()
            self.save_checkpoint()
            self._last_checkpoint_s = time.perf_counter() - start
        return metrics

    # -- stages -------------------------------------------------------------------------------
    def train_seeds(self, step: int) -> list[int]:
        """Env seeds of step `step` (1-based), in `[trainer.first_seed, eval.seed_offset)`:
        disjoint from the warm start's expert seeds and from the validation seeds."""
        n = self.cfg.trainer.num_groups
        first, stop = self.cfg.trainer.first_seed, self.cfg.eval.seed_offset
        base = self.cfg.seed * 7919 + (step - 1) * n
        num_replay = min(
            round(self.cfg.trainer.replay_mixed_frac * n), len(self.state.replay_seeds)
        )
        fresh = [first + (base + i) % (stop - first) for i in range(n - num_replay)]
        return self.state.replay_seeds[:num_replay] + fresh

    def _update_replay(self, trajs: list[Trajectory]) -> None:
        """Advance the curriculum's queue of seeds to replay (`trainer.replay_mixed_frac`)."""
        if self.cfg.trainer.replay_mixed_frac:
            queue = replay_queue(
                self.state.replay_seeds, trajs, max_len=4 * self.cfg.trainer.num_groups
            )
            self.state = replace(self.state, replay_seeds=queue)

    def sampling(
        self, step: int, *, temperature: float | None = None, seed_salt: int = 0
    ) -> SamplingParams:
        """The engine's sampling params for `step`; the seed is derived from (run seed, step)
        and `SeededEngine` derives one per episode and turn from it."""
        sampling_cfg = self.cfg.rollout.sampling
        if temperature is not None:
            sampling_cfg = sampling_cfg.model_copy(update={"temperature": temperature})
        base = sampling_cfg.seed if sampling_cfg.seed is not None else self.cfg.seed
        params = sampling_cfg.to_params()
        return replace(params, seed=(base * 1_000_003 + step * 7_919 + seed_salt) % 2**31)

    def rollout(self, step: int) -> RolloutResult | None:
        """Roll out `num_groups` seeds x `group_size` episodes with the engine's weights
        (None on ranks without an engine: they receive rank 0's rollout)."""
        if self.engine is None:
            return None
        if self.cfg.trainer.search_beam:
            return self.search(step)
        result = rollout(
            self.engine,
            self.env_factory,
            self.tokenizer,
            self.train_seeds(step),
            group_size=self.cfg.rollout.group_size,
            cfg=self.cfg.rollout,
            sampling=self.sampling(step),
            env_name=self.cfg.env.name,
            bridge=self.bridge,
        )
        if self.cfg.trainer.branch_states:
            result = self.with_branches(step, result)
        return result

    def step_rng(self, step: int) -> random.Random:
        """The step's own random draws (which states branch, which easy rooms a focused search
        keeps): fixed by `seed` and `step`, so a resumed run draws the same."""
        return random.Random(self.cfg.seed * 1_000_003 + step)

    def search(self, step: int) -> RolloutResult:
        """Expert iteration (`trainer.search_beam`, `agentrl.train.search`): the solutions a
        beam search guided by the current policy finds in this step's rooms."""
        from agentrl.train.search import timed_search

        max_depth = self.cfg.rollout.max_turns or self.env_factory().max_turns
        trajs, metrics = timed_search(
            self.env_factory,
            self.bridge,
            self.policy.model,
            self.train_seeds(step),
            beam_width=self.cfg.trainer.search_beam,
            max_depth=max_depth,
            env_name=self.cfg.env.name,
            max_context_tokens=self.cfg.rollout.max_context_tokens,
            easy_keep=self.cfg.trainer.search_easy_keep,
            rng=self.step_rng(step),
        )
        return RolloutResult(trajs, metrics)

    def sample_search_labels(
        self, step: int, trajs: list[Trajectory], batch: TrainBatch
    ) -> dict[str, float]:
        """`trainer.search_label_tau`: keep a share of the search's answers, weighted so that
        the loss's expectation is unchanged (`agentrl.train.search.sample_labels`)."""
        tau = self.cfg.trainer.search_label_tau
        if not tau:
            return {}
        answer_logp = [
            trajs[int(t)].reset_info.get(SEARCH_KEY, {}).get("answer_logp") for t in batch.traj_ids
        ]
        return sample_labels(
            batch.advantages,
            batch.loss_mask,
            batch.turn_ids,
            answer_logp,
            tau=tau,
            rng=random.Random(f"labels/{self.cfg.seed}/{step}"),
        )

    def with_branches(self, step: int, result: RolloutResult) -> RolloutResult:
        """`result` plus its all-action branches (`trainer.branch_states`, `agentrl.train.branch`):
        at up to that many of the states its episodes visited, every answer the env offers
        that no visit gave, each followed by the policy to the end of the episode."""
        start = time.perf_counter()
        cache = self._branch_engine
        cache.hits = cache.misses = 0
        base = result.trajectories
        rng = self.step_rng(step)
        branches, skipped = branch.choose_branches(
            base,
            self.env_factory,
            max_states=self.cfg.trainer.branch_states,
            rng=rng,
            failed_first=self.cfg.trainer.branch_failed_first,
            all_answers=self.cfg.trainer.branch_answers == "all",
        )
        limit = self.cfg.rollout.max_turns or self.env_factory().max_turns
        going = [b for b in branches if branch.continues(b, limit)]
        continuations = iter(
            rollout(
                self._branch_engine,
                branch.branch_env_factory(self.env_factory, base, going, limit),
                self.tokenizer,
                list(range(len(going))),
                group_size=1,
                cfg=self.cfg.rollout,
                sampling=self.sampling(
                    step, temperature=self.cfg.trainer.branch_temperature, seed_salt=1
                ),
                env_name=self.cfg.env.name,
                bridge=self.bridge,
            ).trajectories
            if going
            else []
        )
        extra = [
            branch.branch_trajectory(
                base[b.base],
                b,
                next(continuations) if branch.continues(b, limit) else None,
                self.bridge,
                turn_limit=limit,
            )
            for b in branches
        ]
        n = max(len(extra), 1)
        metrics = {
            "branch/greedy_cache_hits": float(cache.hits),
            "branch/greedy_cache_misses": float(cache.misses),
            "branch/num_branches": float(len(extra)),
            "branch/num_states": float(len({(b.base, b.turn) for b in branches})),
            "branch/skipped_states": float(skipped),
            "branch/success_rate": sum(t.success for t in extra) / n,
            "branch/num_sampled_tokens": float(sum(t.num_sampled_tokens for t in extra)),
            "branch/wall_s": time.perf_counter() - start,
        }
        return RolloutResult(base + extra, result.metrics | metrics)

    @torch.no_grad()
    def _fill_forced_logp(self, trajs: list[Trajectory], batch: TrainBatch) -> None:
        """Give the forced answers among `batch`'s rows (built from `trajs`) the policy's own
        logprob as their sampler logprob: their importance weight is then 1 (the all-action
        update, `agentrl.train.branch`). Only rows the update trains are scored (a branch's
        forced answer is the turn-0 row of a branch trajectory); saved trajectories keep 0
        there, as the answer was not sampled."""
        skips = self._skips_rows_without_credit and batch.advantages is not None
        trains = set(self._credited_rows(batch).tolist()) if skips else None
        forced = [r for r in self._forced_rows(trajs, batch) if trains is None or r in trains]
        self._set_sampler_logp(batch, forced)

    @torch.no_grad()
    def _set_sampler_logp(self, batch: TrainBatch, forced: list[int]) -> None:
        """Set the sampler logprob of `batch`'s rows `forced` to the policy's own logprob."""
        if not forced:
            return
        if batch.old_logp is not None:  # scored with these weights already: no second forward
            for row in forced:
                batch.sampler_logp[row] = batch.old_logp[row] * batch.loss_mask[row]
            return
        rows = batch.rows(forced)
        rows.row_index = torch.arange(len(forced))
        for part in micro_batches(rows, self.cfg.trainer.micro_batch_tokens):
            part_dev = _to(part, self.policy.device)
            logp, _ = token_logprobs(self.policy.model, part_dev, temperature=self.temperature)
            width = logp.shape[1]
            for k, r in enumerate(part.row_index.tolist()):
                row = forced[r]
                mask = batch.loss_mask[row, :width]
                batch.sampler_logp[row, :width] = logp[k].to(mask.device, mask.dtype) * mask

    def _with_label_replay(self, batch: TrainBatch) -> tuple[TrainBatch, dict[str, float]]:
        """`batch` (this step's labelled rows) plus the labelled rows of the last
        `trainer.label_replay_steps` steps, which are re-scored with the current weights
        (`old_logp`, and the sampler logprob of a forced answer) so their ratio starts at 1;
        this step's rows join the buffer."""
        old = [b for b in self._label_replay if b.num_rows]
        # re-scored when replayed; a step without labels takes its place too
        self._label_replay.append(replace(batch, old_logp=None))
        if not old:
            return batch, {"replay/label_rows": 0.0}
        replayed = concat_batches(old, pad_id=self.pad_id)
        self.score(replayed)
        if replayed.old_logp is not None:  # the same weights: no second forward
            replayed.sampler_logp = replayed.old_logp * replayed.loss_mask
        else:
            self._set_sampler_logp(replayed, list(range(replayed.num_rows)))
        parts = [batch, replayed] if batch.num_rows else [replayed]
        return concat_batches(parts, pad_id=self.pad_id), {
            "replay/label_rows": float(replayed.num_rows)
        }

    @staticmethod
    def _forced_rows(trajs: list[Trajectory], batch: TrainBatch) -> list[int]:
        """The rows of `batch` (built from `trajs`) that hold an answer the policy did not
        sample: a branch's forced answer (the turn-0 row of a branch trajectory) and every row
        of a search's solution (`trainer.search_beam`)."""
        first_turn = ((batch.turn_ids == 0) & batch.loss_mask.bool()).any(dim=1)
        return [
            r
            for r in range(batch.num_rows)
            if is_search(trajs[int(batch.traj_ids[r])])  # every answer of a search's solution
            or (first_turn[r] and branch.is_branch(trajs[int(batch.traj_ids[r])]))
        ]

    @functools.cached_property
    def bridge(self) -> ChatBridge:
        """One chat-template bridge for the run: its template probe and first-prompt cache
        carry over from step to step."""
        return ChatBridge(self.tokenizer)

    def next_rollout(self, step: int) -> RolloutResult | None:
        """This step's trajectories. Synchronous mode rolls out now. Async mode takes the
        rollout prefetched during the previous update (weights one version old), then syncs
        the newest weights and starts prefetching the next step's rollout."""
        if not self.cfg.trainer.async_rollout:
            return self.rollout(step)
        result = self._pending.result() if self._pending is not None else self.rollout(step)
        self._pending = None
        self.sync_weights()
        if step < self.cfg.trainer.num_steps:
            self._pending = self._prefetcher.submit(self.rollout, step + 1)
        return result

    def filter(self, trajs: list[Trajectory]) -> tuple[list[bool], dict[str, float]]:
        """StarPO-S: keep the groups with the highest in-group reward std (when configured).

        Returns the keep flag of each trajectory and the filter metrics.
        """
        returns = torch.tensor([t.total_reward for t in trajs])  # [N]
        group_ids = torch.tensor([t.group_id for t in trajs])  # [N]
        if self.cfg.algo.use_filter:
            keep = starpo_s_filter(
                returns,
                group_ids,
                self.cfg.algo.filter_keep_ratio,
                min_std=self.cfg.algo.filter_min_std,
            )
        else:
            keep = torch.ones(len(trajs), dtype=torch.bool)
        stats = filter_stats(returns, group_ids, keep)
        metrics = {
            "reward/in_group_std": stats["group_std_before"],
            "reward/in_group_std_after_filter": stats["group_std_after"],
            "filter/keep_frac": stats["keep_frac"],
            "filter/num_groups_kept": stats.get("num_groups_after", 0.0),
        }
        return keep.tolist(), metrics

    @torch.no_grad()
    def _positions(self, batch: TrainBatch) -> torch.Tensor | None:
        """Positions to score (`trained_positions`), or None (all) when the model's forward
        has no `logits_to_keep`."""
        return trained_positions(batch.loss_mask) if self._logits_to_keep else None

    @property
    def critic_warmup_steps(self) -> int:
        """Steps that train only the critic (`algo.critic_warmup_steps`; 0 without a critic)."""
        return self.cfg.algo.critic_warmup_steps if self.critic is not None else 0

    @property
    def single_update(self) -> bool:
        """One optimizer step per rollout and no KL in the reward: the update's own forward
        sees the pre-update weights, so `old_logp` is its detached logp and scoring skips
        the policy forward (as TRL and verl do). Imitation (`rft`) needs no `old_logp` in
        any mini-batch: it trains the plain NLL."""
        a = self.cfg.algo
        kl_in_reward = a.use_reference and a.kl_in_reward
        one_step = a.ppo_epochs == 1 and a.num_mini_batches == 1
        return (one_step or a.estimator == "rft") and not kl_in_reward

    @property
    def _skips_rows_without_credit(self) -> bool:
        """The loss has no term besides the policy loss (no entropy bonus, no KL loss, no
        critic): a row whose advantages are all 0 adds nothing to it or to its gradient."""
        a = self.cfg.algo
        return a.entropy_coef == 0 and not a.use_kl_loss and self.critic is None

    @property
    def _trains_branches_only(self) -> bool:
        """Every answer is branched in each drawn state (`trainer.branch_answers: all`): the
        step's episodes only choose the states, the branches are trained."""
        t = self.cfg.trainer
        return bool(t.branch_states) and t.branch_answers == "all"

    @property
    def _credit_before_scoring(self) -> bool:
        """The advantages need nothing the scoring pass computes (no critic values, no KL in
        the reward) and rows without credit are not trained: the advantages come first and
        only the credited rows are scored."""
        a = self.cfg.algo
        kl_in_reward = a.use_reference and a.kl_in_reward
        return self._skips_rows_without_credit and not kl_in_reward

    @staticmethod
    def _credited_rows(batch: TrainBatch) -> torch.Tensor:
        """Indices of the rows with a non-zero advantage on some trained token."""
        credited = ((batch.advantages != 0) & batch.loss_mask.bool()).any(dim=1)
        return credited.nonzero().squeeze(-1)

    @torch.no_grad()
    def score(self, batch: TrainBatch, *, rows: torch.Tensor | None = None) -> dict[str, float]:
        """Fill `old_logp` (unless `single_update`), `ref_logp` and `old_values` with the
        weights before the update; with `rows`, only those rows are scored (0 elsewhere)."""
        device = self.policy.device
        old_logp, ref_logp, old_values = [], [], []
        batch.row_index = torch.arange(batch.num_rows)
        scored = batch if rows is None else batch.rows(rows)  # keeps each row's row_index
        parts = micro_batches(self._local_rows(scored), self.cfg.trainer.micro_batch_tokens)
        num_idle = max_over_ranks(len(parts)) - len(parts)  # agreed before any forward
        for part in parts:
            part_dev = _to(part, device)
            if not self.single_update:
                logp, _ = token_logprobs(
                    self.policy.model,
                    part_dev,
                    temperature=self.temperature,
                    positions=self._positions(part_dev),
                    share_prefix=self._share_prefix,
                )
                old_logp.append(logp.float().cpu())
            if self.reference is not None:
                logp, _ = token_logprobs(
                    self.reference,
                    part_dev,
                    temperature=self.temperature,
                    positions=self._positions(part_dev),
                    share_prefix=self._share_prefix,
                )
                ref_logp.append(logp.float().cpu())
            if self.critic is not None:
                old_values.append(self._values(part_dev).cpu())
        for _ in range(num_idle):  # the same collectives on every rank
            idle = _to(batch.rows([0]), device)
            if not self.single_update:
                self.policy.model(input_ids=idle.input_ids, attention_mask=idle.attention_mask)
            if self.critic is not None:
                token_values(self.critic.model, idle.input_ids, idle.attention_mask)
        # micro_batches reorders rows; scatter the results back into batch order.
        gather = functools.partial(self._gather_rows, batch, parts)
        batch.old_logp = None if self.single_update else gather(old_logp)
        batch.ref_logp = gather(ref_logp) if self.reference is not None else None
        batch.old_values = gather(old_values) if self.critic is not None else None
        return {}

    def _local_rows(self, batch: TrainBatch) -> TrainBatch:
        """This rank's share of `batch` (all of it on one process)."""
        if self.world_size == 1:
            return batch
        return batch.rows(shard_rows(batch.num_rows, self.rank, self.world_size))

    def _gather_rows(
        self, batch: TrainBatch, parts: list[TrainBatch], values: list[torch.Tensor]
    ) -> torch.Tensor:
        """Per-micro-batch results of every rank, back at their rows of `batch` (`[B, T]`)."""
        out = _scatter_rows(batch, parts, values)
        if self.world_size > 1:  # each row was scored by one rank; the others hold zeros
            out = self.policy.all_reduce_sum(out)
        return out

    def advantages(self, batch: TrainBatch) -> dict[str, float]:
        """Fill `batch.advantages` `[B, T]` (0 off the trained tokens) and
        `batch.value_targets` (critic targets, or None); return the advantage metrics and the
        critic's explained variance over the whole batch (rollout-time values)."""
        metrics: dict[str, float] = {}
        if self.cfg.algo.normalize_rewards:
            metrics["reward/norm_scale"] = _running_std(self.state.return_stats)
        result = compute_advantages(
            self.cfg.algo,
            loss_mask=batch.loss_mask,
            turn_rewards=self._turn_rewards(batch),
            turn_ids=batch.turn_ids,
            group_ids=batch.group_ids,
            traj_ids=batch.traj_ids,
            values=batch.old_values,
            old_logp=batch.old_logp,
            ref_logp=batch.ref_logp,
            state_ids=batch.turn_states,
        )
        batch.advantages, batch.value_targets = result.advantages, result.value_targets
        metrics |= {f"advantage/{k}": v for k, v in result.stats.items()}
        if batch.old_values is not None and result.value_targets is not None:
            metrics["critic/explained_var"] = explained_variance(
                batch.old_values, result.value_targets, batch.loss_mask
            )
            # lambda-returns hold the critic's own later values: also score it on the plain
            # returns, which nothing of the critic's enters
            metrics["critic/explained_var_mc"] = explained_variance(
                batch.old_values, self._monte_carlo_targets(batch), batch.loss_mask
            )
        return metrics

    def _monte_carlo_targets(self, batch: TrainBatch) -> torch.Tensor:
        """The critic's targets with no bootstrap (lambda 1 in and across turns) and no KL
        penalty: each trained token's return-to-go of the (normalised) rewards `[B, T]`."""
        mc = self.cfg.algo.model_copy(
            update={"lam": 1.0, "turn_lam": 1.0, "whiten_advantages": False, "kl_in_reward": False}
        )
        return compute_advantages(
            mc,
            loss_mask=batch.loss_mask,
            turn_rewards=self._turn_rewards(batch),
            turn_ids=batch.turn_ids,
            group_ids=batch.group_ids,
            traj_ids=batch.traj_ids,
            values=torch.zeros_like(batch.loss_mask),
        ).value_targets

    def _turn_rewards(self, batch: TrainBatch) -> torch.Tensor:
        """The batch's turn rewards `[B, K]`, divided by the running std of episode returns
        when `algo.normalize_rewards`."""
        if not self.cfg.algo.normalize_rewards:
            return batch.turn_rewards
        return batch.turn_rewards / _running_std(self.state.return_stats)

    def fit_value_head(self, batch: TrainBatch) -> None:
        """Start the critic at the least-squares fit of its value head to this batch's
        Monte-Carlo returns (the first step of `algo.critic_warmup_steps`; local backend only:
        FSDP2 and DeepSpeed shard the head)."""
        if self.cfg.trainer.backend != "local":
            log.info("critic warm-up: no least-squares head fit under %s", self.cfg.trainer.backend)
            return
        targets = self._monte_carlo_targets(batch)
        parts = micro_batches(batch, self.cfg.trainer.micro_batch_tokens)  # row_index: to_batch's
        device = self.critic.device
        fit_value_head(
            self.critic.model,
            [
                (
                    p.input_ids.to(device),
                    p.attention_mask.to(device),
                    targets[p.row_index, : p.input_ids.shape[1]].to(device),
                    p.loss_mask.to(device),
                )
                for p in parts
            ],
        )

    def update(self, batch: TrainBatch, *, train_policy: bool = True) -> dict[str, float]:
        """`ppo_epochs` passes of mini-batch updates; one optimizer step per mini-batch, with
        gradients accumulated over micro-batches and the loss normalised over the mini-batch.
        `train_policy=False` (the critic's warm-up steps) updates only the critic, in
        `critic_warmup_epochs` passes when that is more."""
        a = self.cfg.algo
        device = self.policy.device
        records: list[tuple[float, dict[str, float]]] = []
        grad_norms, critic_grad_norms = [], []
        processed = 0  # ids through a forward and backward pass, every pass counted
        epochs = a.ppo_epochs if train_policy else max(a.ppo_epochs, a.critic_warmup_epochs)
        for _epoch in range(epochs):
            for mini in mini_batches(batch, a.num_mini_batches, generator=self.generator):
                local = self._local_rows(mini)
                num_tokens, num_seqs = count_tokens_and_seqs(local.loss_mask)
                num_trajs = count_trajs(local.loss_mask, local.traj_num_tokens)
                totals = self.policy.all_reduce_sum(
                    torch.tensor([num_tokens, num_seqs, num_trajs], dtype=torch.float64)
                )
                norm = {
                    "global_num_tokens": float(totals[0]),
                    "global_num_seqs": float(totals[1]),
                    "global_num_trajs": float(totals[2]),
                }
                credited = self._rows_with_credit(local, train_policy=train_policy)
                micros = micro_batches(credited, self.cfg.trainer.micro_batch_tokens)
                max_micros = max_over_ranks(len(micros))  # agreed before any forward
                if not max_micros:  # no credit anywhere in this mini-batch: no step
                    continue
                num_idle = max_micros - len(micros)
                for micro in micros:
                    micro = _to(micro, device)
                    micro_norm = norm | {"traj_num_tokens": micro.traj_num_tokens}
                    stats = self._policy_backward(micro, micro_norm) if train_policy else {}
                    if self.critic is not None:
                        stats |= self._critic_backward(micro, micro_norm)
                    records.append((float(micro.loss_mask.sum()), stats))
                    processed += int(micro.attention_mask.sum())
                for _ in range(num_idle):
                    self._idle_backward(_to(mini.rows([0]), device), train_policy=train_policy)
                if train_policy:
                    grad_norms.append(self.policy.step())
                if self.critic is not None:
                    critic_grad_norms.append(self.critic.step())
        ranks = gather_objects((records, processed))  # the update's one gather of its stats
        mean = _weighted_mean([r for rank_records, _ in ranks for r in rank_records])
        mean.pop("num_tokens", None)
        metrics = {f"actor/{k}": v for k, v in mean.items() if not k.startswith("critic/")}
        metrics |= {k: v for k, v in mean.items() if k.startswith("critic/")}
        metrics["actor/clip_frac"] = mean.get("clip_frac_low", 0.0) + mean.get(
            "clip_frac_high", 0.0
        )
        metrics["actor/kl"] = mean.get("approx_kl", 0.0)
        if grad_norms:  # none in the critic's warm-up (the collapse check then skips it)
            metrics["actor/grad_norm"] = float(np.mean(grad_norms))
        metrics["actor/updated"] = float(train_policy)
        metrics["actor/lr"] = self.policy.lr if hasattr(self.policy, "lr") else self.cfg.optim.lr
        if critic_grad_norms:
            metrics["critic/grad_norm"] = float(np.mean(critic_grad_norms))
        metrics["throughput/train_tokens"] = float(sum(n for _, n in ranks))
        return metrics

    def _rows_with_credit(self, batch: TrainBatch, *, train_policy: bool) -> TrainBatch:
        """The rows whose loss has a gradient: with no entropy bonus, no KL loss and no critic,
        a row whose advantages are all 0 adds nothing to the loss or its gradient, so it is
        left out of the forward and backward passes (the normalisers were counted over the
        whole mini-batch, so the loss is unchanged). Otherwise every row."""
        if not train_policy or not self._skips_rows_without_credit:
            return batch
        return batch.rows(self._credited_rows(batch))

    def _policy_backward(self, micro: TrainBatch, norm: dict[str, float]) -> dict[str, float]:
        """Policy loss (+ entropy bonus, + KL loss) of one micro-batch; backward."""
        a = self.cfg.algo
        positions = self._positions(micro)
        logp, logits = token_logprobs(
            self.policy.model,
            micro,
            temperature=self.temperature,
            positions=positions,
            share_prefix=self._share_prefix,
        )
        imitate = a.estimator == "rft"  # SFT on the kept episodes: no ratio, clip or weight
        old_logp = logp.detach() if imitate or micro.old_logp is None else micro.old_logp
        loss, stats = policy_loss(
            logp,
            old_logp,
            micro.advantages,
            micro.loss_mask,
            clip_eps_low=a.clip_eps_low,
            clip_eps_high=a.clip_eps_high,
            dual_clip_c=a.dual_clip_c,
            agg=a.loss_agg,
            sampler_logp=micro.sampler_logp if self.temperature == 1.0 and not imitate else None,
            tis_cap=a.tis_cap,
            **norm,
        )
        stats["pg_loss"] = float(loss.detach())
        mask = micro.loss_mask
        num_tokens = mask.sum().clamp(min=1)
        if self.temperature == 1.0:  # engines report temperature-1 logprobs
            stats["sampler_logp_diff"] = float(
                ((micro.sampler_logp - old_logp).abs() * mask).sum() / num_tokens
            )
        if micro.ref_logp is not None:
            ref_kl = kl_penalty(old_logp, micro.ref_logp, a.kl_kind)
            stats["ref_kl"] = float((ref_kl * mask).sum() / num_tokens)
        with torch.set_grad_enabled(a.entropy_coef > 0):
            length = micro.input_ids.shape[1]
            kept = positions if positions is not None else torch.arange(1, length)
            entropy = spread(entropy_from_logits(logits), kept, length)  # [B, T]
            entropy_term = aggregate(entropy, micro.loss_mask.bool(), a.loss_agg, **norm)
        if a.entropy_coef > 0:
            loss = loss - a.entropy_coef * entropy_term
        stats["entropy"] = float((entropy.detach() * mask).sum() / num_tokens)
        if a.use_kl_loss:
            kl_term, kl_stats = kl_loss(
                logp, micro.ref_logp, mask, kind=a.kl_kind, agg=a.loss_agg, **norm
            )
            loss = loss + a.kl_coef * kl_term
            stats["ref_kl_loss"] = kl_stats["kl"]
        stats["loss"] = float(loss.detach())
        self.policy.backward(loss)
        return stats

    def _idle_backward(self, micro: TrainBatch, *, train_policy: bool = True) -> None:
        """A zero-loss forward/backward: keeps a rank with fewer micro-batches than the others
        in step with their collectives (FSDP2 gathers in forward and reduces in backward)."""
        if train_policy:
            out = self.policy.model(input_ids=micro.input_ids, attention_mask=micro.attention_mask)
            self.policy.backward(out.logits.float().sum() * 0.0)
        if self.critic is not None:
            values = token_values(self.critic.model, micro.input_ids, micro.attention_mask)
            self.critic.backward(values.sum() * 0.0)

    def _values(self, batch: TrainBatch) -> torch.Tensor:
        """The critic's `token_values` of `batch`; the prefix its rows share is run once when
        the policy's scoring does so too (the plain model of the local backend)."""
        first = None
        if self._share_prefix and bool(batch.loss_mask.any()):
            first = int(trained_positions(batch.loss_mask)[0])
        return token_values(
            self.critic.model, batch.input_ids, batch.attention_mask, first_position=first
        )

    def _critic_backward(self, micro: TrainBatch, norm: dict[str, float]) -> dict[str, float]:
        """Clipped value loss of one micro-batch; backward into the critic."""
        a = self.cfg.algo
        values = self._values(micro)
        loss, stats = value_loss(
            values,
            micro.old_values,
            micro.value_targets,
            micro.loss_mask,
            clip_eps=a.value_clip_eps,
            agg=a.loss_agg,
            **norm,
        )
        self.critic.backward(a.vf_coef * loss)
        return {"critic/value_loss": float(loss.detach())} | {
            f"critic/{k}": v for k, v in stats.items()
        }

    def sync_weights(self, *, force: bool = False) -> None:
        """Send the policy's full weights to the engine under a new version when the policy
        changed since the last sync (`force`: resend the current version); bounded wait."""
        if not force and self._synced_step == self.state.step:
            return
        version = self.state.weight_version + (0 if force else 1)
        weights = self.policy.full_state_dict()  # collective; the full dict on rank 0 only
        if self.engine is None:
            self.state = replace(self.state, weight_version=version)
            self._synced_step = self.state.step
            return
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            future = pool.submit(self.engine.update_weights, weights, version)
            try:
                future.result(timeout=self.cfg.trainer.weight_sync_timeout_s)
            except concurrent.futures.TimeoutError:
                raise TimeoutError(
                    f"engine did not load weights version {version} within "
                    f"trainer.weight_sync_timeout_s={self.cfg.trainer.weight_sync_timeout_s:g} s"
                ) from None
        self.state = replace(self.state, weight_version=version)
        self._synced_step = self.state.step

    # -- evaluation, checkpoints, metrics -----------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        """Success rate and reward on the fixed validation seeds at `eval.temperature`."""
        from agentrl.rollout.evaluate import evaluate

        result = evaluate(
            self.engine,
            self.env_factory,
            self.tokenizer,
            num_episodes=self.cfg.eval.num_episodes,
            seed_offset=self.cfg.eval.seed_offset,
            rollout_cfg=self.cfg.rollout,
            sampling=self.sampling(0, temperature=self.cfg.eval.temperature, seed_salt=1),
            env_name=self.cfg.env.name,
        )
        return {f"eval/{k}": v for k, v in result.items()}

    def save_checkpoint(self) -> Path:
        """Write a checkpoint of the current state (atomic, keeps the last k)."""
        self.state = replace(self.state, collapse_history=self.collapse.state())
        path = save_checkpoint(
            self.run_dir,
            self.state,
            policy=self.policy,
            critic=self.critic,
            tokenizer=self.tokenizer,
            generator=self.generator,
            keep_last=self.cfg.checkpoint.keep_last,
            save_optimizer=self.cfg.checkpoint.save_optimizer,
            rank=self.policy.rank,
        )
        barrier()  # rank 0 renamed the folder: no rank runs ahead of a finished checkpoint
        return path

    def save_trajectories(self, step: int, trajs: list[Trajectory]) -> None:
        """Write the first `logging.save_trajectories` trajectories of the step."""
        count = self.cfg.logging.save_trajectories
        if not count or self.policy.rank != 0:
            return
        from agentrl.trajectory.io import write_step

        model = self.cfg.model.name  # an alias or HF id; a local folder as an absolute path
        if Path(model).exists():
            model = str(Path(model).resolve())
        metadata = {"model": model, "env": self.cfg.env.name, "run": str(self.run_dir)}
        write_step(self.run_dir, step, trajs[:count], metadata)

    def _throughput(
        self, timer: StageTimer, trajs: list[Trajectory], train_tokens: int
    ) -> dict[str, float]:
        sampled = sum(t.num_sampled_tokens for t in trajs)
        gen_s = timer.seconds.get("rollout", 0.0)
        upd_s = timer.seconds.get("update", 0.0)
        return {
            "throughput/gen_tokens_per_s": sampled / gen_s if gen_s else 0.0,
            "throughput/train_tokens_per_s": train_tokens / upd_s if upd_s else 0.0,
        }

    def _collapse_check(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        # a search samples no group; a group of one episode has no spread by construction
        no_groups = bool(self.cfg.trainer.search_beam) or self.cfg.rollout.group_size == 1
        warn, fired = self.collapse.update(
            reward_std=float("nan")
            if no_groups
            else metrics.get("reward/in_group_std", float("nan")),
            entropy=metrics.get("actor/entropy", float("nan")),
            grad_norm=metrics.get("actor/grad_norm", float("nan")),
            parse_failure_rate=metrics.get("rollout/parse_failure_rate", 0.0),
        )
        relative = [name for name in fired if name not in ABSOLUTE_SIGNALS]
        if warn and len(relative) >= self.collapse.cfg.min_signals:
            log.warning(
                "step %d: collapse early warning (Echo Trap): %s crossed their thresholds; "
                "consider a lower lr, a higher filter keep ratio or more entropy",
                step,
                ", ".join(relative),
            )
        if warn and "parse_failures" in fired:
            log.warning(
                "step %d: %.0f%% of the answers did not parse: the policy is out of the answer "
                "format (format collapse, or a model that never learned it: warm-start it)",
                step,
                100 * metrics.get("rollout/parse_failure_rate", 0.0),
            )
        if warn and "no_reward_variance" in fired:
            log.warning(
                "step %d: for %d steps no group's episodes differed in reward, so there was "
                "little or nothing to learn from (success %.2f); if every episode fails, restart "
                "from an earlier checkpoint with a lower lr",
                step,
                self.collapse.steps_without_variance,
                metrics.get("success_rate", float("nan")),
            )
        return {"collapse_warning": float(warn), "collapse/num_signals": float(len(fired))}

    def close(self) -> None:
        """Stop the prefetcher, close the engine and the metric writers."""
        self._prefetcher.shutdown(wait=True, cancel_futures=True)
        if self.logger is not None:
            self.logger.close()
        if self.engine is not None:
            self.engine.close()


def _check_env(name: str, kwargs: dict[str, Any]) -> None:
    """Build and close one env: an unknown name or keyword fails here with a clear message.

    It also loads the env registry in this thread, before the rollout's threads use it.
    """
    from agentrl.config import ConfigError
    from agentrl.envs import make

    try:
        make(name, **kwargs).close()
    except (TypeError, ValueError, LookupError) as e:  # pydantic errors are ValueErrors
        given = ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) or "none"
        raise ConfigError(
            f"env {name!r} could not be built with keyword arguments {given} (set by "
            f"env.<key> or env.kwargs.<key>): {type(e).__name__}: {e}"
        ) from e


def _check_branches(cfg: TrainConfig) -> None:
    """`trainer.branch_states` needs state credit, Markov prompts and one process;
    `trainer.label_replay_steps` needs labels (`state-best`)."""
    if cfg.trainer.label_replay_steps and cfg.algo.estimator != "state-best":
        raise ValueError(
            f"trainer.label_replay_steps={cfg.trainer.label_replay_steps} needs "
            f"algo.estimator: state-best (it replays labels; got {cfg.algo.estimator!r})"
        )
    if cfg.trainer.search_label_tau and not cfg.trainer.search_beam:
        raise ValueError(
            f"trainer.search_label_tau={cfg.trainer.search_label_tau} needs trainer.search_beam "
            "(it samples the answers of the search's solutions)"
        )
    if cfg.trainer.search_beam:
        needs = {
            "algo.estimator: rft (it imitates the solutions found)": cfg.algo.estimator == "rft",
            "rollout.history_turns: 0 (the prompt must be the state)": (
                cfg.rollout.history_turns == 0
            ),
            "trainer.backend: local": cfg.trainer.backend == "local",
            "trainer.branch_states: 0": not cfg.trainer.branch_states,
        }
        missing = [k for k, ok in needs.items() if not ok]
        if missing:
            raise ValueError(
                f"trainer.search_beam={cfg.trainer.search_beam} needs " + ", ".join(missing)
            )
    if not cfg.trainer.branch_states:
        return
    needs = {
        "algo.estimator: state-rloo or state-best (they credit by visited state)": (
            cfg.algo.estimator in ("state-rloo", "state-best")
        ),
        "rollout.history_turns: 0 (the prompt must be the state)": cfg.rollout.history_turns == 0,
        "trainer.backend: local": cfg.trainer.backend == "local",
    }
    missing = [k for k, ok in needs.items() if not ok]
    if missing:
        raise ValueError(
            f"trainer.branch_states={cfg.trainer.branch_states} needs " + ", ".join(missing)
        )


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _to(batch: TrainBatch, device: torch.device) -> TrainBatch:
    """The batch with every tensor on `device`."""
    if device.type == "cpu":
        return batch
    import dataclasses

    return TrainBatch(
        **{
            f.name: (None if getattr(batch, f.name) is None else getattr(batch, f.name).to(device))
            for f in dataclasses.fields(batch)
        }
    )


def _scatter_rows(
    batch: TrainBatch, parts: list[TrainBatch], values: list[torch.Tensor]
) -> torch.Tensor:
    """Put per-micro-batch `[b, t]` results back at their rows of `batch` (`[B, T]`)."""
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    for part, value in zip(parts, values, strict=True):
        rows = part.row_index
        out[rows, : value.shape[1]] = value
    return out


def replay_queue(queue: list[int], trajs: list[Trajectory], *, max_len: int) -> list[int]:
    """The curriculum's queue after a rollout: the seeds just replayed leave it, the fresh
    seeds whose group had mixed outcomes (some episodes succeeded, some not) join it at the
    end, and only the newest `max_len` stay.

    >>> from agentrl.trajectory.types import Trajectory, Turn
    >>> def episode(seed, success):
    ...     turn = Turn(1, "a", "stop", 0, info={"success": success})
    ...     return Trajectory([], [turn], "env", seed, seed)
    >>> replay_queue([7], [episode(7, True), episode(7, False), episode(3, True),
    ...                    episode(3, False), episode(4, True), episode(4, True)], max_len=8)
    [3]
    """
    by_seed: dict[int, list[bool]] = {}
    for t in trajs:
        by_seed.setdefault(t.seed, []).append(t.success)
    mixed = [s for s, wins in by_seed.items() if s not in queue and 0 < sum(wins) < len(wins)]
    return ([s for s in queue if s not in by_seed] + mixed)[-max_len:]


def _welford(stats: list[float], values: list[float]) -> list[float]:
    """Running `[count, mean, M2]` of every value seen, updated with `values` (Welford)."""
    count, mean, m2 = stats
    for x in values:
        count += 1
        delta = x - mean
        mean += delta / count
        m2 += delta * (x - mean)
    return [count, mean, m2]


def _running_std(stats: list[float]) -> float:
    """The std of the values behind Welford `stats` (1 until there are two, at least 1e-3)."""
    count, _, m2 = stats
    return max((m2 / count) ** 0.5, 1e-3) if count >= 2 else 1.0
