"""The training loop: collect -> keep -> score -> credit -> update -> sync -> log.

`Trainer.train_step` reads as the algorithm. What differs between algorithms (which
trajectories to keep, their credit, the loss, what needs scoring, where trajectories come
from) is asked of the run's `agentrl.algos.Algorithm`; the passes that score and train the
model are `agentrl.train.learner.Learner`'s.
"""

from __future__ import annotations

import concurrent.futures
import functools
import inspect
import logging
import random
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl._signals import deferred as deferred_stop
from agentrl.algos.base import CreditInputs, make_algorithm
from agentrl.rollout.engine import SamplingParams
from agentrl.rollout.engines import SeededEngine, build_engine
from agentrl.rollout.loop import RolloutResult
from agentrl.rollout.source import SourceParts
from agentrl.runtime._ranks import barrier, broadcast_object
from agentrl.runtime.backend import resolve_device
from agentrl.runtime.batch import to_batch
from agentrl.runtime.lora import start_folders
from agentrl.runtime.metrics import (
    ABSOLUTE_SIGNALS,
    CollapseDetector,
    MetricsLogger,
    trajectory_stats,
)
from agentrl.runtime.threads import SlowStepWatch, set_torch_threads
from agentrl.train.backends import backend_for_run
from agentrl.train.checkpoint import (
    TrainerState,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from agentrl.train.config import TrainConfig
from agentrl.train.critic import build_critic
from agentrl.train.env_errors import EnvErrorWatch, TooManyEnvErrors
from agentrl.train.learner import Learner, credited_rows
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


class Trainer:
    """Owns the policy (and critic, reference, engine) of one run and steps it.

    Build it with a resolved `TrainConfig` and a run directory; `train_step()` runs one step.
    With `resume=True` the latest checkpoint in `run_dir` is restored (weights, optimizer,
    scheduler, RNG, step, env seed cursor).

    Under a multi-rank backend (`fsdp2`, `deepspeed`, launched by torchrun) every rank builds
    a `Trainer` and calls `train_step` in step: rank 0 alone holds the engine, rolls out and
    broadcasts the trajectories; each rank scores and trains its share of the rows; only
    rank 0 writes metrics and trajectories.
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
        from agentrl.rollout.models import load_model, load_tokenizer

        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.env_factory = functools.partial(make, cfg.env.name, **cfg.env.kwargs)
        _check_env(cfg.env.name, cfg.env.kwargs)  # a bad kwarg fails now, before model work
        threads = set_torch_threads(cfg.trainer.num_threads)  # logs the choice once
        self.slow_steps = SlowStepWatch(num_threads=threads.num_threads, key=threads.key)
        self.env_errors = EnvErrorWatch(
            cfg.env.name, cfg.env.kwargs, max_steps=cfg.trainer.max_env_error_steps
        )
        _seed_everything(cfg.seed)
        self.generator = torch.Generator().manual_seed(cfg.seed)
        """Shuffles mini-batches; saved in checkpoints."""

        self._folders = ExitStack()
        """Holds the merged copy of a LoRA adapter the run starts from, until `close`."""
        self.model_path, policy_path = self._folders.enter_context(
            start_folders(cfg.model.name, cfg.trainer.lora)
        )
        """The start model's folder (engines, tokenizer, reference)."""
        self.tokenizer = load_tokenizer(str(self.model_path))
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id or 0
        device = resolve_device(cfg.trainer.device)
        self.algo = make_algorithm(cfg.algo)
        algo = cfg.algo

        policy_model = load_model(str(policy_path), dtype="float32")
        logits_to_keep = "logits_to_keep" in inspect.signature(policy_model.forward).parameters
        critic_model = build_critic(policy_model) if self.algo.needs.critic else None
        num_optimizer_steps = cfg.trainer.num_steps * algo.ppo_epochs * algo.num_mini_batches
        self.policy = backend_for_run(
            cfg, policy_model, lr=cfg.optim.lr, num_optimizer_steps=num_optimizer_steps
        )
        self.critic = (
            backend_for_run(
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
        reference = None
        if self.algo.needs.reference:
            reference = load_model(str(self.model_path), dtype=cfg.model.dtype, device=device)
            reference.requires_grad_(False)

        sampling_temperature = cfg.rollout.sampling.temperature
        self.temperature = sampling_temperature if sampling_temperature > 0 else 1.0
        """The trainer scores tokens at the sampling temperature (on-policy ratios). Engines
        report raw (temperature 1) logprobs, so the sampler correction (TIS) and the
        `actor/sampler_logp_diff` metric apply only when sampling at temperature 1."""
        self.learner = Learner(
            self.algo,
            policy=self.policy,
            critic=self.critic,
            reference=reference,
            temperature=self.temperature,
            micro_batch_tokens=cfg.trainer.micro_batch_tokens,
            generator=self.generator,
            logits_to_keep=logits_to_keep,
            share_prefix=logits_to_keep and cfg.trainer.backend == "local",
            backend=cfg.trainer.backend,
            lr=cfg.optim.lr,
        )
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
        self.source = self.algo.rollout_source(
            SourceParts(
                engine=self.engine,
                env_factory=self.env_factory,
                tokenizer=self.tokenizer,
                bridge=self.bridge,
                rollout=cfg.rollout,
                sampling=self.sampling,
                step_rng=self.step_rng,
                policy=lambda: self.policy.model,
                env_name=cfg.env.name,
            )
        )
        """Makes each step's trajectories (the algorithm's choice: sampling, or a search)."""
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
        self.collapse = CollapseDetector()
        self.collapse.load_state(self.state.collapse_history)
        self._last_checkpoint_s: float | None = None
        self._pending: concurrent.futures.Future[RolloutResult] | None = None
        self._prefetcher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rollout")

    # -- the step -----------------------------------------------------------------------------

    # -- the step -----------------------------------------------------------------------------
    def train_step(self) -> dict[str, float]:
        """One training step: collect, keep, score, credit, update, sync, log, checkpoint."""
        timer = StageTimer()
        step = self.state.step + 1
        with timer("rollout"):
            result = broadcast_object(self.next_rollout(step))  # rank 0's rollout, everywhere
        trajs = result.trajectories
        with deferred_stop():  # Ctrl-C / SIGTERM wait for the update and the step count
            self.save_trajectories(step, trajs)
            metrics = (trajectory_stats(trajs) if result.sampled else {}) | result.metrics
            kept, keep_metrics = self.keep(trajs, sampled=result.sampled)
            metrics |= keep_metrics
            if kept:
                metrics |= self.learn(step, kept, timer)  # score, credit, update
            else:
                log.warning(
                    "step %d: no trajectory to train on (all env/engine errors, or the algorithm "
                    "kept none); no update",
                    step,
                )
            unchanged = self._synced_step == self.state.step and not kept
            self.state = replace(
                self.state, step=step, seed_cursor=step * self.cfg.trainer.num_groups
            )
            if unchanged:  # no update: the engine's weights are still current
                self._synced_step = step
            if not self.cfg.trainer.async_rollout:
                with timer("sync"):
                    self.sync_weights()
            num_train_tokens = int(metrics.get("throughput/train_tokens", 0))
            metrics |= self._throughput(timer, trajs, num_train_tokens)
            metrics |= self._collapse_check(step, metrics, groups=result.sampled)
            if self.cfg.eval.every and step % self.cfg.eval.every == 0 and self.engine is not None:
                with timer("eval"):
                    metrics |= self.evaluate()
            self.log_and_checkpoint(step, metrics, timer)
        self.check_env_errors(step, trajs)
        return metrics

    def check_env_errors(self, step: int, trajs: list[Trajectory]) -> None:
        """One console line for a step with env errors; past `trainer.max_env_error_steps`
        bad steps in a row, save the step (unless just saved) and stop (`TooManyEnvErrors`)."""
        try:
            self.env_errors.observe(step, trajs, quiet=self.policy.rank != 0)
        except TooManyEnvErrors:
            every = self.cfg.checkpoint.every
            if not ((every and step % every == 0) or step == self.cfg.trainer.num_steps):
                self.save_checkpoint()
            raise

    def learn(self, step: int, kept: list[Trajectory], timer: StageTimer) -> dict[str, float]:
        """Score, credit and update on the kept trajectories, in the order the algorithm needs."""
        metrics: dict[str, float] = {}
        batch = to_batch(kept, pad_id=self.pad_id)
        if self.cfg.algo.normalize_rewards:
            metrics["reward/norm_scale"] = self.reward_scale
        rng = random.Random(f"labels/{self.cfg.seed}/{step}")  # the step's credit draws
        credit = CreditInputs(kept, self.reward_scale, rng)
        if self.critic is not None and step == 1 and not self.algo.trains_policy(step):
            with timer("critic_fit"):  # the critic's warm-up starts at a least-squares fit
                self.learner.fit_value_head(batch, self.algo.critic_fit_targets(batch, credit))
        if self.algo.credit_before_scoring:  # score only the rows the update will train
            metrics |= self.algo.credit(batch, credit)
            with timer("score"):
                self.learner.score(batch, rows=credited_rows(batch))
        else:
            with timer("score"):
                self.learner.score(batch)  # old_logp, ref_logp, old_values
            metrics |= self.algo.credit(batch, credit)  # advantages, value_targets [B, T]
        with timer("update"):
            metrics |= self.learner.update(batch, train_policy=self.algo.trains_policy(step))
        return metrics

    def log_and_checkpoint(self, step: int, metrics: dict[str, float], timer: StageTimer) -> None:
        """Add the step's timings, log its metrics, then checkpoint when one is due."""
        metrics |= {f"time/{k}": v for k, v in timer.seconds.items()}
        metrics["time/step"] = sum(timer.seconds.values())
        if self._last_checkpoint_s is not None:
            metrics["time/last_checkpoint"], self._last_checkpoint_s = self._last_checkpoint_s, None
        metrics["weight_version"] = float(self.state.weight_version)
        if self.logger is not None:  # before the checkpoint: a resume keeps this line
            self.logger.log(step, metrics)
            self.slow_steps.observe(step, metrics["time/step"] - metrics.get("time/eval", 0.0))
        every = self.cfg.checkpoint.every
        if (every and step % every == 0) or step == self.cfg.trainer.num_steps:
            start = time.perf_counter()
            self.save_checkpoint()
            self._last_checkpoint_s = time.perf_counter() - start

    # -- stages -------------------------------------------------------------------------------
    def train_seeds(self, step: int) -> list[int]:
        """Env seeds of step `step` (1-based), in `[trainer.first_seed, eval.seed_offset)`:
        disjoint from the warm start's expert seeds and from the validation seeds."""
        n = self.cfg.trainer.num_groups
        first, stop = self.cfg.trainer.first_seed, self.cfg.eval.seed_offset
        base = self.cfg.seed * 7919 + (step - 1) * n
        return [first + (base + i) % (stop - first) for i in range(n)]

    def sampling(
        self, step: int, *, temperature: float | None = None, seed_salt: int = 0
    ) -> SamplingParams:
        """The engine's sampling params for `step`; the seed is derived from (run seed, step)
        and `SeededEngine` derives one per episode and turn from it."""
        sampling_cfg = self.cfg.rollout.sampling
        if temperature is not None:
            sampling_cfg = sampling_cfg.model_copy(update={"temperature": temperature})
        seed = (self.cfg.seed * 1_000_003 + step * 7_919 + seed_salt) % 2**31
        return sampling_cfg.to_params(seed=seed)

    def rollout(self, step: int) -> RolloutResult | None:
        """This step's trajectories from the algorithm's rollout source, made with the
        engine's weights (None on ranks without an engine: they receive rank 0's)."""
        if self.engine is None:
            return None
        return self.source.collect(step, self.train_seeds(step))

    def keep(
        self, trajs: list[Trajectory], *, sampled: bool = True
    ) -> tuple[list[Trajectory], dict[str, float]]:
        """The trainable trajectories the algorithm keeps; the returns of the policy's own
        samples update the running return statistics (`algo.normalize_rewards`)."""
        trainable = [t for t in trajs if t.status.trainable]
        if not trainable:
            return [], {}
        if sampled:
            returns = [t.total_reward for t in trainable]
            self.state = replace(
                self.state, return_stats=_welford(self.state.return_stats, returns)
            )
        return self.algo.keep(trainable)

    @property
    def reward_scale(self) -> float:
        """Rewards are divided by this: the running std of episode returns with
        `algo.normalize_rewards`, else 1."""
        return _running_std(self.state.return_stats) if self.cfg.algo.normalize_rewards else 1.0

    def step_rng(self, step: int) -> random.Random:
        """The step's own random draws (which states branch, which easy rooms a focused search
        keeps): fixed by `seed` and `step`, so a resumed run draws the same."""
        return random.Random(self.cfg.seed * 1_000_003 + step)

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
                future.result(timeout=self.cfg.engine.update_timeout_s)
            except concurrent.futures.TimeoutError:
                raise TimeoutError(
                    f"engine did not load weights version {version} within "
                    f"engine.update_timeout_s={self.cfg.engine.update_timeout_s:g} s"
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

    def _collapse_check(
        self, step: int, metrics: dict[str, float], *, groups: bool = True
    ) -> dict[str, float]:
        # labels (a search's) come in no groups; a group of one has no spread by construction
        no_groups = not groups or self.cfg.rollout.group_size == 1
        warn, fired = self.collapse.update(
            reward_std=float("nan")
            if no_groups
            else metrics.get("reward/in_group_std", float("nan")),
            entropy=metrics.get("actor/entropy", float("nan")),
            grad_norm=metrics.get("actor/grad_norm", float("nan")),
            parse_failure_rate=metrics.get("rollout/parse_failure_rate", 0.0),
        )
        relative = [name for name in fired if name not in ABSOLUTE_SIGNALS]
        if warn and len(relative) >= self.collapse.MIN_SIGNALS:
            log.warning(
                "step %d: collapse early warning (Echo Trap): %s crossed their thresholds; "
                "consider a lower lr, a higher filter keep ratio or more entropy",
                step,
                ", ".join(relative),
            )
        if warn and "parse_failures" in fired:
            log.warning(
                "step %d: %.0f%% of the answers did not parse: the policy is out of the answer "
                "format (format collapse, or a model that never learned it: warm-start it on an "
                "expert's episodes, warm_start.expert; see "
                "docs/guide/custom-env.md#7-give-it-an-expert-a-warm-start)",
                step,
                100 * metrics.get("rollout/parse_failure_rate", 0.0),
            )
        if warn and "no_reward_variance" in fired:
            success = metrics.get("success_rate", float("nan"))
            log.warning(
                "step %d: for %d steps no group's episodes differed in reward, so there was "
                "little or nothing to learn from (success %.2f); %s",
                step,
                self.collapse.steps_without_variance,
                success,
                _no_variance_advice(
                    success, since_start=self.collapse.steps_without_variance >= step
                ),
            )
        return {"collapse_warning": float(warn), "collapse/num_signals": float(len(fired))}

    def close(self) -> None:
        """Stop the prefetcher, close the engine and the metric writers."""
        self._prefetcher.shutdown(wait=True, cancel_futures=True)
        if self.logger is not None:
            self.logger.close()
        if self.engine is not None:
            self.engine.close()
        self._folders.close()


def _check_env(name: str, kwargs: dict[str, Any]) -> None:
    """Build and close one env: an unknown name or keyword fails here with a clear message.

    It also loads the env registry in this thread, before the rollout's threads use it.
    """
    from agentrl.envs import make
    from agentrl.runtime.config import ConfigError

    try:
        make(name, **kwargs).close()
    except (TypeError, ValueError, LookupError) as e:  # pydantic errors are ValueErrors
        given = ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) or "none"
        raise ConfigError(
            f"env {name!r} could not be built with keyword arguments {given} (set by "
            f"env.<key> or env.kwargs.<key>): {type(e).__name__}: {e}"
        ) from e


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


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


def _no_variance_advice(success: float, *, since_start: bool) -> str:
    """What to do about a run whose groups stopped differing in reward.

    >>> _no_variance_advice(1.0, since_start=False)
    'every episode succeeds: these tasks have nothing left to teach'
    >>> _no_variance_advice(0.0, since_start=True).split(":")[0]
    "no group has differed since the run's first step"
    """
    if success >= 1.0:
        return "every episode succeeds: these tasks have nothing left to teach"
    if since_start:
        return (
            "no group has differed since the run's first step: a warm start (`warm_start`), "
            "easier tasks, larger groups (`rollout.group_size`) or a higher "
            "`rollout.sampling.temperature` give its groups both successes and failures"
        )
    return "if every episode fails, restart from an earlier checkpoint with a lower lr"
