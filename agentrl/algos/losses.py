"""Losses: PPO-clip policy loss, KL to a reference, clipped value loss, and the logits helpers.

Shapes: `B` sequences, `T` tokens, `V` vocabulary. `loss_mask [B, T]` is 1 on the tokens
trained on. Every function first replaces the inputs at mask-0 positions by zeros, so
whatever sits there (padding, observation tokens, even NaN) changes neither the loss nor
its gradient.

Aggregation (`aggregate`) is normalised over the *global* batch: the caller passes the number
of trained tokens (`global_num_tokens`), of sequences with at least one trained token
(`global_num_seqs`) or of trajectories (`global_num_trajs`) of the whole mini-batch, so
summing the losses of its micro-batches gives exactly the full mini-batch loss and gradient.
`count_tokens_and_seqs` and `count_trajs` compute them for one micro-batch; sum them over
micro-batches (and data-parallel ranks).

`traj-mean-token-mean` weighs every trajectory the same, whatever its number of turns: each
row carries `traj_num_tokens`, the trained tokens of its whole trajectory (all of its per-turn
rows), and a token's weight is `1 / traj_num_tokens / global_num_trajs`.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

__all__ = [
    "LossAgg",
    "KLKind",
    "aggregate",
    "count_tokens_and_seqs",
    "count_trajs",
    "explained_variance",
    "entropy_from_logits",
    "kl_loss",
    "kl_penalty",
    "kl_reward_penalty",
    "policy_loss",
    "token_logprobs_from_logits",
    "value_loss",
]

LossAgg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "traj-mean-token-mean"]
KLKind = Literal["k1", "k2", "k3"]


def _zero_masked(x: Tensor, m: Tensor) -> Tensor:
    """`x` with mask-0 positions replaced by 0 (gradient 0 there, NaN-safe)."""
    return torch.where(m, x, torch.zeros_like(x))


def count_tokens_and_seqs(loss_mask: Tensor) -> tuple[int, int]:
    """`(trained tokens, sequences with at least one trained token)` of `loss_mask [B, T]`.

    >>> count_tokens_and_seqs(torch.tensor([[1, 1, 0], [0, 0, 0], [0, 1, 0]]))
    (3, 2)
    """
    m = loss_mask.bool()
    return int(m.sum()), int(m.any(-1).sum())


def count_trajs(loss_mask: Tensor, traj_num_tokens: Tensor | None) -> float:
    """Trajectories in `loss_mask [B, T]` whose rows carry `traj_num_tokens [B]`: each row
    counts its share of its trajectory's trained tokens, so a trajectory whose rows are all
    present counts 1 (None: every row with a trained token is a trajectory).

    >>> count_trajs(torch.tensor([[1, 1, 0], [0, 1, 0], [1, 0, 0]]), torch.tensor([3, 3, 2]))
    1.5
    """
    row_tokens = loss_mask.bool().sum(-1).to(torch.float64)
    if traj_num_tokens is None:
        return float((row_tokens > 0).sum())
    return float((row_tokens / traj_num_tokens.to(torch.float64).clamp(min=1)).sum())


def aggregate(
    loss_mat: Tensor,
    mask: Tensor,
    agg: LossAgg = "token-mean",
    global_num_tokens: float | None = None,
    global_num_seqs: float | None = None,
    *,
    traj_num_tokens: Tensor | None = None,
    global_num_trajs: float | None = None,
) -> Tensor:
    """Reduce a per-token loss `[B, T]` to a scalar over the positions where `mask` is 1.

    - `token-mean`: `sum(loss) / global_num_tokens` (every token weighs the same).
    - `seq-mean-token-mean`: `sum_seq(mean_tokens(loss)) / global_num_seqs`.
    - `seq-mean-token-sum`: `sum_seq(sum_tokens(loss)) / global_num_seqs`.
    - `traj-mean-token-mean`: `sum_traj(mean_tokens(loss)) / global_num_trajs`, the mean over
      a trajectory's tokens in all of its rows (`traj_num_tokens [B]` per row; None: each
      row is a trajectory, as `seq-mean-token-mean`).

    Without `global_num_*`, this micro-batch's own counts are used. Sequences with no trained
    token contribute nothing and are not counted.

    >>> loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    >>> mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    >>> [round(aggregate(loss, mask, a).item(), 4)
    ...  for a in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")]
    [2.5, 3.0, 5.0]
    >>> aggregate(loss, mask, "traj-mean-token-mean", traj_num_tokens=torch.tensor([4, 4]))
    tensor(2.5000)
    """
    if loss_mat.shape != mask.shape:
        raise ValueError(f"loss {tuple(loss_mat.shape)} and mask {tuple(mask.shape)} differ")
    m = mask.bool()
    loss_mat = _zero_masked(loss_mat, m)
    if agg == "token-mean":
        denom = global_num_tokens if global_num_tokens is not None else m.sum().clamp(min=1)
        return loss_mat.sum() / denom
    if agg == "traj-mean-token-mean":
        per_traj_tokens = m.sum(-1) if traj_num_tokens is None else traj_num_tokens
        per_row = loss_mat.sum(-1) / per_traj_tokens.to(loss_mat.dtype).clamp(min=1)
        denom = global_num_trajs
        if denom is None:
            denom = max(count_trajs(m, traj_num_tokens), 1.0)
        return per_row.sum() / denom
    if agg not in ("seq-mean-token-mean", "seq-mean-token-sum"):
        raise ValueError(
            f"unknown loss aggregation {agg!r}; use traj-mean-token-mean, token-mean, "
            "seq-mean-token-mean or seq-mean-token-sum"
        )
    per_seq = loss_mat.sum(-1)
    if agg == "seq-mean-token-mean":
        per_seq = per_seq / m.sum(-1).clamp(min=1)
    denom = global_num_seqs if global_num_seqs is not None else m.any(-1).sum().clamp(min=1)
    return per_seq.sum() / denom


def explained_variance(values: Tensor, targets: Tensor, mask: Tensor) -> float:
    """`1 - Var(targets - values) / Var(targets)` over the positions where `mask` is 1: how
    much of the return's spread the critic predicts (1 perfect, 0 no better than a constant,
    negative worse). 0 when the targets do not vary.

    >>> explained_variance(torch.tensor([[1.0, 2.0, 0.0]]), torch.tensor([[1.0, 3.0, 7.0]]),
    ...                    torch.tensor([[1, 1, 0]]))
    0.75
    """
    m = mask.bool()
    t, v = targets[m].double(), values[m].double()
    if t.numel() < 2 or float(t.var(unbiased=False)) == 0.0:
        return 0.0
    return float(1.0 - (t - v).var(unbiased=False) / t.var(unbiased=False))


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    *,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.2,
    dual_clip_c: float | None = None,
    agg: LossAgg = "token-mean",
    global_num_tokens: float | None = None,
    global_num_seqs: float | None = None,
    traj_num_tokens: Tensor | None = None,
    global_num_trajs: float | None = None,
    sampler_logp: Tensor | None = None,
    tis_cap: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO-clip policy loss with clip-higher, dual clip and truncated importance sampling.

    Per token, with `ratio = exp(logp - old_logp)` and advantage `A`:
    `l = max(-A * ratio, -A * clip(ratio, 1 - clip_eps_low, 1 + clip_eps_high))`;
    with `dual_clip_c` (> 1), for `A < 0`: `l = min(l, -A * dual_clip_c)`.
    When `sampler_logp` is given (rollouts from an older or different engine), `l` is
    multiplied by the detached weight `min(exp(old_logp - sampler_logp), tis_cap)` (no cap
    when `tis_cap` is None). `advantages` may be `[B, T]` or `[B]` (one per sequence).

    Stats (over this micro-batch's trained tokens): `clip_frac_low` (A < 0 and ratio below
    1 - eps_low), `clip_frac_high` (A > 0 and ratio above 1 + eps_high), `clip_frac_dual`,
    `approx_kl` (k3 estimate of KL(old || new)), `ratio_mean`, `ratio_max`, `tis_weight_mean`,
    `num_tokens`.

    >>> lp = torch.log(torch.tensor([[1.5, 0.5]]))
    >>> loss, stats = policy_loss(lp, torch.zeros(1, 2), torch.tensor([[1.0, -1.0]]),
    ...                           torch.ones(1, 2))
    >>> round(loss.item(), 4), stats["clip_frac_high"], stats["clip_frac_low"]
    (-0.2, 0.5, 0.5)
    """
    m = loss_mask.bool()
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1).expand_as(logp)
    for name, x in (("old_logp", old_logp), ("advantages", advantages)):
        if x.shape != logp.shape:
            raise ValueError(f"{name} {tuple(x.shape)} must match logp {tuple(logp.shape)}")
    if dual_clip_c is not None and dual_clip_c <= 1.0:
        raise ValueError(f"dual_clip_c must be > 1, got {dual_clip_c}")
    logp = _zero_masked(logp, m)
    old_logp = _zero_masked(old_logp.detach(), m)
    adv = _zero_masked(advantages.detach(), m)

    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * torch.clamp(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high)
    loss_mat = torch.maximum(loss_unclipped, loss_clipped)
    dual_active = torch.zeros_like(m)
    if dual_clip_c is not None:
        loss_dual = -adv * dual_clip_c
        dual_active = (adv < 0) & (loss_mat > loss_dual)
        loss_mat = torch.where(adv < 0, torch.minimum(loss_mat, loss_dual), loss_mat)

    tis_weight = None
    if sampler_logp is not None:
        if sampler_logp.shape != logp.shape:
            raise ValueError(f"sampler_logp {tuple(sampler_logp.shape)} must match logp")
        tis_weight = torch.exp(old_logp - _zero_masked(sampler_logp.detach(), m))
        if tis_cap is not None:
            tis_weight = tis_weight.clamp(max=tis_cap)
        loss_mat = loss_mat * tis_weight

    loss = aggregate(
        loss_mat,
        m,
        agg,
        global_num_tokens,
        global_num_seqs,
        traj_num_tokens=traj_num_tokens,
        global_num_trajs=global_num_trajs,
    )

    with torch.no_grad():
        n = m.sum().clamp(min=1).float()
        r = ratio.detach()
        low = (adv < 0) & (r < 1.0 - clip_eps_low) & m
        high = (adv > 0) & (r > 1.0 + clip_eps_high) & m
        k3 = (r - 1.0) - log_ratio.detach()
        stats = {
            "clip_frac_low": float(low.sum() / n),
            "clip_frac_high": float(high.sum() / n),
            "clip_frac_dual": float((dual_active & m).sum() / n),
            "approx_kl": float(_zero_masked(k3, m).sum() / n),
            "ratio_mean": float(_zero_masked(r, m).sum() / n),
            "ratio_max": float(torch.where(m, r, torch.zeros_like(r)).max()) if m.any() else 0.0,
            "tis_weight_mean": float(_zero_masked(tis_weight, m).sum() / n)
            if tis_weight is not None
            else 1.0,
            "num_tokens": float(m.sum()),
        }
    return loss, stats


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: KLKind = "k3") -> Tensor:
    """Per-token estimate of KL(policy || reference) from sampled tokens' logprobs `[B, T]`.

    With `x = logp - ref_logp`: `k1 = x`, `k2 = x**2 / 2`, `k3 = exp(-x) - 1 + x`
    (Schulman's unbiased, non-negative estimator; x is clamped to [-20, 20] there).

    >>> x = torch.log(torch.tensor([[2.0]]))
    >>> [round(kl_penalty(x, torch.zeros(1, 1), k).item(), 4) for k in ("k1", "k2", "k3")]
    [0.6931, 0.2402, 0.1931]
    """
    log_ratio = logp - ref_logp.detach()
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return 0.5 * log_ratio * log_ratio
    if kind == "k3":
        x = log_ratio.clamp(-20.0, 20.0)
        return torch.exp(-x) - 1.0 + x
    raise ValueError(f"unknown KL estimator {kind!r}; use k1, k2 or k3")


def kl_loss(
    logp: Tensor,
    ref_logp: Tensor,
    loss_mask: Tensor,
    *,
    kind: KLKind = "k3",
    agg: LossAgg = "token-mean",
    global_num_tokens: float | None = None,
    global_num_seqs: float | None = None,
    traj_num_tokens: Tensor | None = None,
    global_num_trajs: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """KL to the reference "in the loss": `kl_penalty` aggregated like the policy loss.

    The caller adds `kl_coef * loss` to the policy loss. Stats: `kl` (token mean).
    """
    m = loss_mask.bool()
    kl = kl_penalty(_zero_masked(logp, m), _zero_masked(ref_logp, m), kind)
    loss = aggregate(
        kl,
        m,
        agg,
        global_num_tokens,
        global_num_seqs,
        traj_num_tokens=traj_num_tokens,
        global_num_trajs=global_num_trajs,
    )
    with torch.no_grad():
        mean = float(_zero_masked(kl.detach(), m).sum() / m.sum().clamp(min=1))
    return loss, {"kl": mean}


def kl_reward_penalty(
    token_rewards: Tensor,
    logp: Tensor,
    ref_logp: Tensor,
    loss_mask: Tensor,
    *,
    kl_coef: float,
    kind: KLKind = "k1",
) -> Tensor:
    """KL "in the reward": `token_rewards - kl_coef * kl` on trained tokens (detached).

    >>> r = torch.tensor([[0.0, 1.0]])
    >>> kl_reward_penalty(r, torch.tensor([[0.5, 0.0]]), torch.zeros(1, 2), torch.ones(1, 2),
    ...                   kl_coef=0.1)
    tensor([[-0.0500,  1.0000]])
    """
    m = loss_mask.bool()
    kl = kl_penalty(_zero_masked(logp.detach(), m), _zero_masked(ref_logp.detach(), m), kind)
    return token_rewards - kl_coef * _zero_masked(kl, m)


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip_eps: float | None = 0.2,
    agg: LossAgg = "token-mean",
    global_num_tokens: float | None = None,
    global_num_seqs: float | None = None,
    traj_num_tokens: Tensor | None = None,
    global_num_trajs: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped value loss `0.5 * max((V - R)^2, (V_clip - R)^2)`, aggregated like the policy.

    `V_clip = old_V + clip(V - old_V, -clip_eps, clip_eps)`; `clip_eps=None` disables the
    clip (plain `0.5 * (V - R)^2`). Stats: `vf_clip_frac`, `value_mean`, `return_mean`
    (the explained variance is a whole-batch figure: `explained_variance`).

    >>> loss, _ = value_loss(torch.tensor([[1.0]]), torch.tensor([[0.0]]),
    ...                      torch.tensor([[2.0]]), torch.ones(1, 1))
    >>> round(loss.item(), 4)  # V_clip = 0.2: max(0.5 * 1, 0.5 * 1.8 ** 2)
    1.62
    """
    m = mask.bool()
    values = _zero_masked(values, m)
    old_values = _zero_masked(old_values.detach(), m)
    returns = _zero_masked(returns.detach(), m)
    loss_mat = (values - returns) ** 2
    clipped = torch.zeros_like(m)
    if clip_eps is not None:
        v_clip = old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)
        loss_clip = (v_clip - returns) ** 2
        clipped = loss_clip > loss_mat
        loss_mat = torch.maximum(loss_mat, loss_clip)
    loss = aggregate(
        0.5 * loss_mat,
        m,
        agg,
        global_num_tokens,
        global_num_seqs,
        traj_num_tokens=traj_num_tokens,
        global_num_trajs=global_num_trajs,
    )
    with torch.no_grad():
        n = m.sum().clamp(min=1).float()
        v_mean = values.detach().sum() / n
        r_mean = returns.sum() / n
        stats = {
            "vf_clip_frac": float((clipped & m).sum() / n),
            "value_mean": float(v_mean),
            "return_mean": float(r_mean),
        }
    return loss, stats


def _chunked_rows(fn, x: Tensor, *extra: Tensor, chunk_size: int, recompute: bool) -> Tensor:
    """Apply `fn(x_rows, *extra_rows)` to chunks of rows of `x [N, V]`.

    With `recompute` (and gradients on), each chunk's float32 intermediates are not kept for
    backward but recomputed there (activation checkpointing), so they never all coexist.
    """
    outs = []
    use_ckpt = recompute and torch.is_grad_enabled() and x.requires_grad
    for start in range(0, x.shape[0], chunk_size):
        args = (x[start : start + chunk_size], *(e[start : start + chunk_size] for e in extra))
        outs.append(checkpoint(fn, *args, use_reentrant=False) if use_ckpt else fn(*args))
    if not outs:
        return x.new_zeros(0, dtype=torch.float32)
    return torch.cat(outs)


def _logprob_rows(logits: Tensor, ids: Tensor, temperature: float) -> Tensor:
    x = logits.float()
    if temperature != 1.0:
        x = x / temperature
    return x.gather(-1, ids.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(x, dim=-1)


def _entropy_rows(logits: Tensor) -> Tensor:
    x = logits.float()
    return torch.logsumexp(x, dim=-1) - (torch.softmax(x, dim=-1) * x).sum(-1)


def token_logprobs_from_logits(
    logits: Tensor, ids: Tensor, *, temperature: float = 1.0, chunk_size: int = 1024
) -> Tensor:
    """Logprob of `ids [B, T]` under `logits [B, T, V]`, in float32: `[B, T]`.

    `logits[:, t]` must be the distribution of `ids[:, t]` (shift before calling). Computed
    with `logsumexp` in chunks of `chunk_size` positions, each cast to float32 on its own;
    for non-float32 logits (or a temperature) the chunk is recomputed in backward instead of
    kept, so no float32 copy of the whole logits tensor ever exists.
    `temperature` divides the logits first (match the sampler's temperature).

    >>> logits = torch.log(torch.tensor([[[0.25, 0.75]]]))
    >>> token_logprobs_from_logits(logits, torch.tensor([[1]])).exp()
    tensor([[0.7500]])
    """
    if logits.shape[:-1] != ids.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match ids {tuple(ids.shape)}")
    flat = logits.reshape(-1, logits.shape[-1])
    out = _chunked_rows(
        lambda x, i: _logprob_rows(x, i, temperature),
        flat,
        ids.reshape(-1).long(),
        chunk_size=chunk_size,
        # float32 logits at temperature 1 need no copy: autograd keeps only the logits.
        recompute=logits.dtype != torch.float32 or temperature != 1.0,
    )
    return out.reshape(ids.shape)


def entropy_from_logits(logits: Tensor, *, chunk_size: int = 1024) -> Tensor:
    """Entropy of the softmax of `logits [B, T, V]` at each position, float32 `[B, T]`.

    Chunked over positions like `token_logprobs_from_logits`.

    >>> entropy_from_logits(torch.zeros(1, 1, 4))  # uniform over 4: log 4
    tensor([[1.3863]])
    """
    flat = logits.reshape(-1, logits.shape[-1])
    out = _chunked_rows(_entropy_rows, flat, chunk_size=chunk_size, recompute=True)
    return out.reshape(logits.shape[:-1])
