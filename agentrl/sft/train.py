"""Supervised fine-tuning on expert trajectories: masked NLL on the expert's ids.

    rows, _ = expert_rows(cfg, out_dir, tokenizer)            # packed ids, one row a sample
    for mini in rows.mini_batches(n // batch_size, generator):  # [b, T], one step each
        nll = masked_nll(backend.model, mini)                 # summed over loss_mask tokens
        backend.backward(nll / num_tokens); backend.step()

The backend, optimizer and LR schedule are the RL trainer's (`agentrl.runtime.backend`), so a
fine-tuned model trains and loads exactly like an RL checkpoint. The output folder is a
Hugging Face model folder (`agentrl train --model OUT`, `agentrl eval --model OUT`) that also
holds the expert trajectories (`expert_trajectories.parquet`), `metrics.jsonl` (for `agentrl
plot`) and `sft_result.json`; while training, `sft_checkpoint/` (every `checkpoint_every_s`)
lets a killed run resume exactly (`agentrl sft --resume OUT`).
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentrl._signals import Stopped
from agentrl._signals import deferred as deferred_stop
from agentrl.runtime.batch import TrainBatch, micro_batches
from agentrl.runtime.model_settings import write_model_settings
from agentrl.runtime.threads import SlowStepWatch, set_torch_threads
from agentrl.sft.config import SFTConfig
from agentrl.sft.dataset import TokenRows
from agentrl.trajectory.types import Trajectory

log = logging.getLogger(__name__)

TRAJECTORIES_FILE = "expert_trajectories.parquet"
RESULT_FILE = "sft_result.json"
NLL_SAMPLE = 512
"""Rows the before/after NLL is measured on (a full pass would cost an epoch's third)."""
EPISODE_CHUNK = 256
"""Expert episodes held in memory at once while they are played and written."""


@dataclass
class SFTResult:
    """What one SFT run did and measured."""

    model_dir: str
    """The fine-tuned Hugging Face model folder."""
    num_trajectories: int
    num_loss_tokens: int
    """Expert ids trained on per epoch (loss_mask = 1)."""
    expert_success_rate: float
    """Share of expert episodes that ended solved (the data's quality)."""
    num_optimizer_steps: int
    initial_nll: float
    """Mean NLL per expert id before training (on the first `NLL_SAMPLE` trajectories)."""
    final_nll: float
    """Mean NLL per expert id after training (on the first `NLL_SAMPLE` trajectories)."""
    final_token_accuracy: float
    """Share of expert ids that are the model's argmax after training (same sample)."""
    wall_s: float
    eval: dict[str, float] = field(default_factory=dict)
    """Validation metrics (`success_rate`, ...) when `eval_episodes > 0`."""


def masked_nll(model: torch.nn.Module, batch: TrainBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """`(nll_sum, num_correct)` over the tokens with loss_mask 1 (summed, not averaged).

    Logits are computed only at the positions that predict a loss token in some row
    (`logits_to_keep`): most of a multi-turn episode is prompt and observations, and the
    vocabulary projection over every position would be most of the memory and much of the time.
    The prefix all rows share (the system prompt of per-turn samples) is computed once
    (`agentrl.runtime.prefix`).
    """
    from agentrl.algos.losses import token_logprobs_from_logits
    from agentrl.runtime.prefix import shared_prefix_logits

    mask = batch.loss_mask[:, 1:]  # [B, T-1]: position t predicts id t+1
    keep = mask.any(dim=0).nonzero().squeeze(-1)  # [K] positions that predict a loss id
    logits = shared_prefix_logits(model, batch.input_ids, batch.attention_mask, keep)  # [B,K,V]
    targets = batch.input_ids[:, keep + 1]  # [B, K]
    mask = mask[:, keep]
    logp = token_logprobs_from_logits(logits, targets)  # [B, K]
    correct = ((logits.argmax(dim=-1) == targets).float() * mask).sum().detach()
    return -(logp * mask).sum(), correct


@torch.no_grad()
def dataset_nll(model: torch.nn.Module, batch: TrainBatch, max_tokens: int) -> tuple[float, float]:
    """Mean NLL per loss token and token accuracy of `model` on `batch` (eval mode)."""
    was_training = model.training
    model.eval()
    try:
        total, correct = 0.0, 0.0
        for micro in micro_batches(batch, max_tokens):
            nll, hits = masked_nll(model, micro)
            total, correct = total + float(nll), correct + float(hits)
    finally:
        model.train(was_training)
    n = max(batch.num_loss_tokens, 1)
    return total / n, correct / n


def _backend(cfg: SFTConfig, model: torch.nn.Module, num_optimizer_steps: int) -> Any:
    """The local backend (AdamW, schedule, clipping) around `model`."""
    from agentrl.runtime.backend import make_backend

    return make_backend(
        model,
        optim=cfg.optim,
        lr=cfg.optim.lr,
        num_optimizer_steps=max(1, num_optimizer_steps),
        lora=cfg.lora,
        base_model=cfg.model,
    )


def expert_settings(cfg: SFTConfig) -> dict[str, Any]:
    """What the expert episodes depend on; a saved episodes file with the same is reused."""
    keys = ("env", "model", "expert", "num_episodes", "first_seed", "max_actions_per_turn")
    keys += ("max_context_tokens", "expert_noise", "history_turns", "seed")
    return {k: v for k, v in cfg.model_dump(mode="json").items() if k in keys}


def _expert_episodes(cfg: SFTConfig, tokenizer: Any, num_episodes: int) -> Iterator[Trajectory]:
    """The first `num_episodes` of the run's expert episodes, played as they are consumed."""
    from agentrl.envs import make
    from agentrl.sft.data import iter_expert_trajectories
    from agentrl.sft.expert import get_expert

    return iter_expert_trajectories(
        functools.partial(make, cfg.env.name, **cfg.env.kwargs),
        tokenizer,
        range(cfg.first_seed, cfg.first_seed + num_episodes),
        get_expert(cfg.expert, cfg.env.name),
        max_actions_per_turn=cfg.max_actions_per_turn,
        max_context_tokens=cfg.max_context_tokens,
        env_name=cfg.env.name,
        history_turns=cfg.history_turns,
        noise=cfg.expert_noise,
        noise_seed=cfg.seed,
    )


@dataclass
class SFTPace:
    """A short measurement of an SFT run on this machine (`measure_sft_pace`)."""

    expert_s: float
    """Estimated seconds to play all the expert episodes."""
    num_steps: int
    """Estimated optimizer steps (from the measured rows per episode)."""
    s_per_step: float
    """Measured seconds of one step's forward and backward passes (`batch_size` rows)."""
    measured_s: float
    """How long the measurement took."""

    @property
    def sft_s(self) -> float:
        """Estimated seconds of the fine-tuning itself."""
        return self.num_steps * self.s_per_step


def measure_sft_pace(cfg: SFTConfig, *, num_episodes: int = 64, probe_rows: int = 64) -> SFTPace:
    """Time the first `num_episodes` expert episodes and a forward and backward pass over
    `probe_rows` of their rows, at most one batch (the faster of two, after one untimed pass:
    a busy moment on a shared machine costs one pass, not the estimate), and scale both to
    the whole run. With `cfg.lora` the passes train LoRA adapters, as the run does.

    Nothing is written and the model's weights are not changed. The optimizer's own step is
    left out: it costs little beside the passes when the batch is large.
    """
    from agentrl.rollout.models import load_model, load_tokenizer, resolve_model
    from agentrl.runtime.lora import apply_lora

    start = time.perf_counter()
    model_path = resolve_model(cfg.model)
    tokenizer = load_tokenizer(str(model_path))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rows = TokenRows(pad_id, vocab_size=len(tokenizer))
    played = time.perf_counter()
    for traj in _expert_episodes(cfg, tokenizer, min(num_episodes, cfg.num_episodes)):
        rows.add(traj)
    played = time.perf_counter() - played
    rows = rows.freeze()
    model = load_model(str(model_path), dtype="float32")
    if cfg.lora.enabled:  # the adapters' passes: no gradient for the base weights
        model = apply_lora(model, cfg.lora, base_model=cfg.model)
    batch = rows.batch(range(min(probe_rows, cfg.batch_size, rows.num_rows)))
    timings = []
    for _ in range(3):  # the first pass warms up allocators and kernels
        t0 = time.perf_counter()
        for micro in micro_batches(batch, cfg.micro_batch_tokens):
            nll, _ = masked_nll(model, micro)
            (nll / max(batch.num_loss_tokens, 1)).backward()
        model.zero_grad(set_to_none=True)
        timings.append(time.perf_counter() - t0)
    per_episode = played / max(rows.num_trajectories, 1)
    rows_per_episode = rows.num_rows / max(rows.num_trajectories, 1)
    total_rows = rows_per_episode * cfg.num_episodes
    num_mini = max(1, min(int(total_rows) // cfg.batch_size, int(total_rows)))
    return SFTPace(
        expert_s=per_episode * cfg.num_episodes,
        num_steps=cfg.num_epochs * num_mini,
        s_per_step=min(timings[1:]) * min(cfg.batch_size, total_rows) / max(batch.num_rows, 1),
        measured_s=time.perf_counter() - start,
    )


def expert_rows(
    cfg: SFTConfig,
    out_dir: Path,
    tokenizer: Any,
    *,
    on_episode: Callable[[int, int], None] | None = None,
) -> tuple[TokenRows, float]:
    """The expert episodes as packed SFT rows, and the share the expert solved.

    Reads `<out_dir>/expert_trajectories.parquet` when it was written with the same
    `expert_settings`, else plays the episodes, writing the file a chunk at a time.
    `on_episode(done, total)` reports progress either way.
    """
    import pyarrow.parquet as pq

    from agentrl.sft.dataset import rows_from_table_batch
    from agentrl.trajectory.io import read_metadata, write_parquet_chunks

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rows, total = TokenRows(pad_id, vocab_size=len(tokenizer)), cfg.num_episodes
    settings = json.loads(json.dumps(expert_settings(cfg)))
    path = out_dir / TRAJECTORIES_FILE
    solved = 0
    if path.is_file() and read_metadata(path).get("settings") == settings:
        log.info("reusing the expert episodes in %s (same settings)", path)
        for record_batch in pq.ParquetFile(path).iter_batches(batch_size=EPISODE_CHUNK):
            rows_from_table_batch(rows, record_batch)
            for turns in record_batch.column("turns").to_pylist():
                solved += bool(turns and json.loads(turns[-1]["info"]).get("success", False))
            if on_episode is not None:
                on_episode(rows.num_trajectories, total)
        return rows.freeze(), solved / max(rows.num_trajectories, 1)

    episodes = _expert_episodes(cfg, tokenizer, cfg.num_episodes)

    def chunks() -> Iterator[list[Trajectory]]:
        nonlocal solved
        chunk: list[Trajectory] = []
        for traj in episodes:
            rows.add(traj)
            solved += traj.success
            chunk.append(traj)
            if on_episode is not None:
                on_episode(rows.num_trajectories, total)
            if len(chunk) == EPISODE_CHUNK:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    meta = {"expert": cfg.expert, "env": cfg.env.name, "model": cfg.model, "settings": settings}
    write_parquet_chunks(path, chunks(), meta)
    log.info(
        "%d expert trajectories (%.1f%% solved) -> %s",
        rows.num_trajectories,
        100 * solved / max(rows.num_trajectories, 1),
        path,
    )
    return rows.freeze(), solved / max(rows.num_trajectories, 1)


def run_sft(
    cfg: SFTConfig,
    out_dir: Path,
    *,
    on_step: Callable[[int, int, dict[str, float]], None] | None = None,
    on_episode: Callable[[int, int], None] | None = None,
) -> SFTResult:
    """Write expert trajectories, fine-tune `cfg.model` on them, save the model to `out_dir`.

    What an earlier, killed call left in `out_dir` is picked up: the expert episodes file
    (when its settings match) and the last checkpoint (`agentrl.sft.checkpoint`), so the run
    ends as an uninterrupted one would. `on_episode(done, total)` is called as expert
    episodes are played (or read back), `on_step(step, total, metrics)` after each optimizer
    step (progress display).
    """
    from agentrl.rollout.models import load_model, load_tokenizer, resolve_model
    from agentrl.runtime.config import LoggingConfig, dump_config
    from agentrl.runtime.lora import write_adapter
    from agentrl.runtime.metrics import MetricsLogger
    from agentrl.sft.checkpoint import (
        SFTState,
        check_sft_checkpoint,
        find_sft_checkpoint,
        load_sft_checkpoint,
        remove_sft_checkpoint,
        save_sft_checkpoint,
    )
    from agentrl.sft.expert import get_expert

    start = time.perf_counter()
    get_expert(cfg.expert, cfg.env.name)  # fail before anything is written
    last_seed = cfg.first_seed + cfg.num_episodes - 1
    if last_seed >= cfg.eval_seed_offset:
        raise ValueError(
            f"expert seeds reach {last_seed}, into the validation seeds (from "
            f"eval_seed_offset={cfg.eval_seed_offset}); lower first_seed or num_episodes"
        )
    out_dir = Path(out_dir)
    found = find_sft_checkpoint(out_dir)
    if found is not None:  # refuse other settings before anything is overwritten
        check_sft_checkpoint(found, cfg.model_dump(mode="json"))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sft_config.yaml").write_text(dump_config(cfg))
    threads = set_torch_threads(cfg.num_threads, key="num_threads")  # logs the choice once
    slow_steps = SlowStepWatch(num_threads=threads.num_threads, key=threads.key, what="SFT step")
    torch.manual_seed(cfg.seed)
    model_path = resolve_model(cfg.model)
    tokenizer = load_tokenizer(str(model_path))
    rows, expert_success = expert_rows(cfg, out_dir, tokenizer, on_episode=on_episode)

    num_mini = max(1, min(rows.num_rows // cfg.batch_size, rows.num_rows))
    total_steps = cfg.num_epochs * num_mini
    model = load_model(str(model_path), dtype="float32")
    backend = _backend(cfg, model, total_steps)
    sample = rows.batch(range(min(rows.num_rows, NLL_SAMPLE)))
    generator = torch.Generator().manual_seed(cfg.seed)
    state = SFTState(config=cfg.model_dump(mode="json"))
    if found is not None:
        state = load_sft_checkpoint(found, state.config, backend=backend, generator=generator)
        log.info("resumed SFT from %s (step %d of %d)", found, state.step, total_steps)
    else:
        state.initial_nll, _ = dataset_nll(backend.model, sample, cfg.micro_batch_tokens)
    logger = MetricsLogger(
        out_dir,
        LoggingConfig(tensorboard=False, save_trajectories=0, progress=False),
        run_name=out_dir.name,
        config=cfg.model_dump(mode="json"),
    )
    logger.truncate_after(state.step)
    last_save, worked_before = time.perf_counter(), state.elapsed_s  # by killed runs

    def save() -> None:
        nonlocal last_save
        state.elapsed_s = worked_before + time.perf_counter() - start
        save_sft_checkpoint(out_dir, state, backend=backend, epoch_generator=generator)
        last_save = time.perf_counter()

    saved_step = state.step
    epoch_start = generator.get_state()

    def checkpoint() -> None:
        nonlocal saved_step
        if state.step % num_mini:  # mid-epoch: the order comes from epoch_start
            drawn = generator.get_state()
            generator.set_state(epoch_start)
            save()
            generator.set_state(drawn)
        else:
            save()
        saved_step = state.step

    try:
        for epoch in range(state.step // num_mini, cfg.num_epochs):
            epoch_start = generator.get_state()  # a checkpoint in this epoch redraws from it
            skip = state.step - epoch * num_mini
            for mini in rows.mini_batches(num_mini, generator, skip=skip):
                step_start = time.perf_counter()
                with deferred_stop():  # Ctrl-C / SIGTERM: after the update and its count
                    metrics = _sft_step(backend, mini, cfg.micro_batch_tokens)
                    state.step += 1
                    slow_steps.observe(state.step, time.perf_counter() - step_start)
                    metrics["sft/epoch"] = float(epoch)
                    logger.log(state.step, metrics)
                if on_step is not None:
                    on_step(state.step, total_steps, metrics)
                every = cfg.checkpoint_every_s
                if every is not None and time.perf_counter() - last_save >= every:
                    checkpoint()
    except Stopped:  # keep every finished step: a resume continues after it
        if state.step > saved_step:
            checkpoint()
            log.info(
                "saved SFT step %d of %d to %s before stopping", state.step, total_steps, out_dir
            )
        raise
    finally:
        logger.close()
    final_nll, final_accuracy = dataset_nll(backend.model, sample, cfg.micro_batch_tokens)
    if backend.lora_scaling is None:
        backend.save_model(out_dir)
        tokenizer.save_pretrained(out_dir)
    else:  # the adapter alone: eval merges it, train continues it
        write_adapter(backend.module, backend.module.state_dict(), out_dir)
    write_model_settings(out_dir, cfg)  # agentrl eval --model OUT reproduces these settings
    result = SFTResult(
        model_dir=str(out_dir),
        num_trajectories=rows.num_trajectories,
        num_loss_tokens=rows.num_loss_tokens,
        expert_success_rate=expert_success,
        num_optimizer_steps=state.step,
        initial_nll=state.initial_nll,
        final_nll=final_nll,
        final_token_accuracy=final_accuracy,
        wall_s=0.0,
    )
    if cfg.eval_episodes:
        result.eval = evaluate_model(
            str(out_dir),
            cfg.env.name,
            cfg.env.kwargs,
            num_episodes=cfg.eval_episodes,
            temperature=cfg.eval_temperature,
            max_new_tokens=cfg.eval_max_new_tokens,
            seed_offset=cfg.eval_seed_offset,
            seed=cfg.seed,
            history_turns=cfg.history_turns,
        )
    result.wall_s = worked_before + time.perf_counter() - start
    (out_dir / RESULT_FILE).write_text(json.dumps(asdict(result), indent=2) + "\n")
    remove_sft_checkpoint(out_dir)
    return result


def _sft_step(backend: Any, mini: TrainBatch, micro_batch_tokens: int) -> dict[str, float]:
    """One optimizer step on the mean NLL of `mini`'s loss tokens; its metrics."""
    num_tokens = max(mini.num_loss_tokens, 1)
    nll_sum, hits = 0.0, 0.0
    for micro in micro_batches(mini, micro_batch_tokens):
        nll, correct = masked_nll(backend.model, micro)
        backend.backward(nll / num_tokens)
        nll_sum, hits = nll_sum + float(nll.detach()), hits + float(correct)
    grad_norm = backend.step()
    return {
        "sft/nll": nll_sum / num_tokens,
        "sft/token_accuracy": hits / num_tokens,
        "sft/grad_norm": grad_norm,
        "sft/lr": backend.lr,
    }


def evaluate_model(
    model: str,
    env_name: str,
    env_kwargs: dict[str, Any] | None = None,
    *,
    num_episodes: int = 256,
    temperature: float = 0.5,
    max_new_tokens: int = 64,
    seed_offset: int = 1_000_000,
    seed: int = 0,
    max_context_tokens: int = 4096,
    history_turns: int | None = None,
) -> dict[str, float]:
    """Validation success of `model` on the fixed validation seeds, the protocol of
    `agentrl eval`: one episode per seed, sampled at `temperature`, on the engine `agentrl
    eval` picks for a folder that names none (`default_engine`), in-process."""
    from agentrl.envs import make
    from agentrl.rollout.config import EngineConfig, RolloutConfig, SamplingConfig
    from agentrl.rollout.engines import SeededEngine, default_engine
    from agentrl.rollout.evaluate import evaluate
    from agentrl.rollout.models import load_tokenizer
    from agentrl.rollout.ray_engine import engine_from_config
    from agentrl.runtime.lora import loadable_model

    sampling = SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens)
    with loadable_model(model) as model_path:  # an adapter, merged
        tokenizer = load_tokenizer(str(model_path))
        name, why = default_engine(model_path)
        log.info("validation engine: %s (%s)", name, why)
        engine = SeededEngine(
            engine_from_config(str(model_path), EngineConfig(name=name), dtype="auto")
        )
    try:
        return evaluate(
            engine,
            functools.partial(make, env_name, **(env_kwargs or {})),
            tokenizer,
            num_episodes=num_episodes,
            seed_offset=seed_offset,
            rollout_cfg=RolloutConfig(
                max_context_tokens=max_context_tokens, history_turns=history_turns
            ),
            sampling=sampling.to_params(seed=seed),
            env_name=env_name,
        )
    finally:
        engine.close()
