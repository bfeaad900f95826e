"""The learner: scores a batch with the weights before the update, then updates.

`Learner.score` fills what the algorithm needs (`old_logp`, `ref_logp`, `old_values`);
`Learner.update` runs `ppo_epochs` passes of mini-batch updates, each one optimizer step with
gradients accumulated over micro-batches and the loss normalised over the mini-batch; the
algorithm gives the policy's loss. Under a multi-rank backend each rank scores and trains its
share of the rows, padded to the same number of micro-batches.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

import numpy as np
import torch

from agentrl.algos.base import Algorithm
from agentrl.algos.losses import (
    count_tokens_and_seqs,
    count_trajs,
    entropy_from_logits,
    token_logprobs_from_logits,
    value_loss,
)
from agentrl.runtime._ranks import gather_objects, max_over_ranks, shard_rows
from agentrl.runtime.batch import TrainBatch, micro_batches, mini_batches
from agentrl.runtime.prefix import shared_prefix_logits
from agentrl.train.critic import fit_value_head, token_values

log = logging.getLogger(__name__)


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


def credited_rows(batch: TrainBatch) -> torch.Tensor:
    """Indices of the rows with a non-zero advantage on some trained token."""
    credited = ((batch.advantages != 0) & batch.loss_mask.bool()).any(dim=1)
    return credited.nonzero().squeeze(-1)


class Learner:
    """The policy (and critic, reference) of a run, and the passes that score and train them."""

    def __init__(
        self,
        algo: Algorithm,
        *,
        policy: Any,
        critic: Any | None,
        reference: torch.nn.Module | None,
        temperature: float,
        micro_batch_tokens: int,
        generator: torch.Generator,
        logits_to_keep: bool,
        share_prefix: bool,
        backend: str,
        lr: float,
    ) -> None:
        self.algo = algo
        self.policy = policy
        self.critic = critic
        self.reference = reference
        self.temperature = temperature
        """Tokens are scored at the sampling temperature (on-policy ratios)."""
        self.micro_batch_tokens = micro_batch_tokens
        self.generator = generator
        """Shuffles mini-batches; saved in checkpoints."""
        self._logits_to_keep = logits_to_keep
        """Score only the positions of trained tokens (skips the LM head on prompts)."""
        self._share_prefix = share_prefix
        """Compute the prefix every row of a micro-batch shares once (the system prompt of
        per-turn samples). Only for the plain model: FSDP2 and DeepSpeed wrap its forward."""
        self._backend = backend
        self._lr = lr
        self.rank = policy.rank
        self.world_size = policy.world_size

    def _positions(self, batch: TrainBatch) -> torch.Tensor | None:
        return trained_positions(batch.loss_mask) if self._logits_to_keep else None

    def _logprobs(self, model: torch.nn.Module, part: TrainBatch) -> torch.Tensor:
        logp, _ = token_logprobs(
            model,
            part,
            temperature=self.temperature,
            positions=self._positions(part),
            share_prefix=self._share_prefix,
        )
        return logp.float().cpu()

    # -- scoring ------------------------------------------------------------------------------
    @torch.no_grad()
    def score(self, batch: TrainBatch, *, rows: torch.Tensor | None = None) -> None:
        """Fill what the algorithm needs with the weights before the update: `old_logp`,
        `ref_logp`, `old_values`; with `rows`, only those rows are scored (0 elsewhere)."""
        needs = self.algo.needs
        device = self.policy.device
        old_logp, ref_logp, old_values = [], [], []
        batch.row_index = torch.arange(batch.num_rows)
        scored = batch if rows is None else batch.rows(rows)  # keeps each row's row_index
        parts = micro_batches(self._local_rows(scored), self.micro_batch_tokens)
        num_idle = max_over_ranks(len(parts)) - len(parts)  # agreed before any forward
        for part in parts:
            part_dev = _to(part, device)
            if needs.old_logp:
                old_logp.append(self._logprobs(self.policy.model, part_dev))
            if self.reference is not None:
                ref_logp.append(self._logprobs(self.reference, part_dev))
            if self.critic is not None:
                old_values.append(self._values(part_dev).cpu())
        for _ in range(num_idle):  # the same collectives on every rank
            idle = _to(batch.rows([0]), device)
            if needs.old_logp:
                self.policy.model(input_ids=idle.input_ids, attention_mask=idle.attention_mask)
            if self.critic is not None:
                token_values(self.critic.model, idle.input_ids, idle.attention_mask)
        # micro_batches reorders rows; scatter the results back into batch order.
        gather = functools.partial(self._gather_rows, batch, parts)
        batch.old_logp = gather(old_logp) if needs.old_logp else None
        batch.ref_logp = gather(ref_logp) if self.reference is not None else None
        batch.old_values = gather(old_values) if self.critic is not None else None

    def _local_rows(self, batch: TrainBatch) -> TrainBatch:
        """This rank's share of `batch` (all of it on one process)."""
        if self.world_size == 1:
            return batch
        return batch.rows(shard_rows(batch.num_rows, self.rank, self.world_size))

    def _gather_rows(
        self, batch: TrainBatch, parts: list[TrainBatch], values: list[torch.Tensor]
    ) -> torch.Tensor:
        """Per-micro-batch results of every rank, back at their rows of `batch` (`[B, T]`)."""
        out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
        for part, value in zip(parts, values, strict=True):
            out[part.row_index, : value.shape[1]] = value
        if self.world_size > 1:  # each row was scored by one rank; the others hold zeros
            out = self.policy.all_reduce_sum(out)
        return out

    def _values(self, batch: TrainBatch) -> torch.Tensor:
        """The critic's `token_values` of `batch`; the prefix its rows share is run once when
        the policy's scoring does so too (the plain model of the local backend)."""
        first = None
        if self._share_prefix and bool(batch.loss_mask.any()):
            first = int(trained_positions(batch.loss_mask)[0])
        return token_values(
            self.critic.model, batch.input_ids, batch.attention_mask, first_position=first
        )

    def fit_value_head(self, batch: TrainBatch, targets: torch.Tensor) -> None:
        """Start the critic at the least-squares fit of its value head to `targets` `[B, T]`
        (local backend only: FSDP2 and DeepSpeed shard the head)."""
        if self._backend != "local":
            log.info("critic warm-up: no least-squares head fit under %s", self._backend)
            return
        parts = micro_batches(batch, self.micro_batch_tokens)  # row_index: to_batch's
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

    # -- the update ---------------------------------------------------------------------------
    def update(self, batch: TrainBatch, *, train_policy: bool = True) -> dict[str, float]:
        """`ppo_epochs` passes of mini-batch updates; one optimizer step per mini-batch.
        `train_policy=False` (a critic's warm-up step) updates only the critic."""
        a = self.algo.cfg
        device = self.policy.device
        records: list[tuple[float, dict[str, float]]] = []
        grad_norms, critic_grad_norms = [], []
        processed = 0  # ids through a forward and backward pass, every pass counted
        for _epoch in range(a.ppo_epochs):
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
                if train_policy and self.algo.skips_uncredited_rows:
                    local = local.rows(credited_rows(local))  # the loss is unchanged
                micros = micro_batches(local, self.micro_batch_tokens)
                max_micros = max_over_ranks(len(micros))  # agreed before any forward
                if not max_micros:  # no credit anywhere in this mini-batch: no step
                    continue
                for micro in micros:
                    micro = _to(micro, device)
                    micro_norm = norm | {"traj_num_tokens": micro.traj_num_tokens}
                    stats = self._policy_backward(micro, micro_norm) if train_policy else {}
                    if self.critic is not None:
                        stats |= self._critic_backward(micro, micro_norm)
                    records.append((float(micro.loss_mask.sum()), stats))
                    processed += int(micro.attention_mask.sum())
                for _ in range(max_micros - len(micros)):
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
        if grad_norms:  # none in a critic's warm-up (the collapse check then skips it)
            metrics["actor/grad_norm"] = float(np.mean(grad_norms))
        metrics["actor/updated"] = float(train_policy)
        metrics["actor/lr"] = getattr(self.policy, "lr", self._lr)
        if critic_grad_norms:
            metrics["critic/grad_norm"] = float(np.mean(critic_grad_norms))
        metrics["throughput/train_tokens"] = float(sum(n for _, n in ranks))
        return metrics

    def _policy_backward(self, micro: TrainBatch, norm: dict[str, Any]) -> dict[str, float]:
        """The algorithm's policy loss of one micro-batch; backward."""
        positions = self._positions(micro)
        logp, logits = token_logprobs(
            self.policy.model,
            micro,
            temperature=self.temperature,
            positions=positions,
            share_prefix=self._share_prefix,
        )
        length = micro.input_ids.shape[1]
        kept = positions if positions is not None else torch.arange(1, length)
        loss, stats = self.algo.policy_loss(
            logp,
            lambda: spread(entropy_from_logits(logits), kept, length),  # [B, T]
            micro,
            norm,
            temperature=self.temperature,
        )
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

    def _critic_backward(self, micro: TrainBatch, norm: dict[str, Any]) -> dict[str, float]:
        """Clipped value loss of one micro-batch; backward into the critic."""
        a = self.algo.cfg
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
        self.critic.backward(loss)
        return {"critic/value_loss": float(loss.detach())} | {
            f"critic/{k}": v for k, v in stats.items()
        }


def _weighted_mean(records: list[tuple[float, dict[str, float]]]) -> dict[str, float]:
    """Mean of each stat over micro-batches, weighted by their trained tokens."""
    total = sum(w for w, _ in records) or 1.0
    keys = {k for _, r in records for k in r}
    return {k: sum(w * r.get(k, 0.0) for w, r in records) / total for k in keys}


def _to(batch: TrainBatch, device: torch.device) -> TrainBatch:
    """The batch with every tensor on `device`."""
    if device.type == "cpu":
        return batch
    return TrainBatch(
        **{
            f.name: (None if getattr(batch, f.name) is None else getattr(batch, f.name).to(device))
            for f in dataclasses.fields(batch)
        }
    )
