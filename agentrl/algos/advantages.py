"""Advantage estimators: GRPO, RLOO, REINFORCE++ and GAE.

Shapes: `B` trajectories (or samples), `T` tokens, `K` turns. `mask` is the loss mask: 1 on
the tokens the policy sampled (the ones trained on), 0 on prompt, observation and padding
tokens. Token-level estimators only look at masked positions: an observation between two
turns is skipped, so the "next token" of a turn's last sampled token is the first sampled
token of the next turn. Values at mask-0 positions never influence any result, and every
token-level result is 0 there.

Rewards live on tokens: `place_returns_on_last_token` puts a trajectory's return on its last
sampled token (StarPO trajectory-level: one return for the whole multi-turn trajectory, the
sum of its turn rewards), `place_turn_rewards` puts each turn's reward on that turn's last
sampled token.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agentrl.algos._groups import group_index, group_mean_std

__all__ = [
    "gae",
    "grpo_advantages",
    "grpo_scale",
    "place_returns_on_last_token",
    "place_turn_rewards",
    "reinforce_pp_advantages",
    "rloo_advantages",
    "trajectory_returns",
    "turn_returns_to_go",
    "whiten",
]


def _check_bt(name: str, x: Tensor, mask: Tensor) -> None:
    if x.shape != mask.shape or x.dim() != 2:
        raise ValueError(
            f"{name} must be [B, T] like mask {tuple(mask.shape)}, got {tuple(x.shape)}"
        )


def whiten(x: Tensor, mask: Tensor, *, shift_mean: bool = True, eps: float = 1e-6) -> Tensor:
    """Normalise `x` to mean 0, std 1 over the positions where `mask` is 1; 0 elsewhere.

    The std is the population std (divide by N). With `shift_mean=False` only the scale
    changes (the mean is added back).

    >>> whiten(torch.tensor([[1.0, 3.0, 99.0]]), torch.tensor([[1, 1, 0]]))
    tensor([[-1.,  1.,  0.]])
    """
    m = mask.bool()
    n = m.sum().clamp(min=1)
    xs = torch.where(m, x, torch.zeros_like(x))
    mean = xs.sum() / n
    var = (torch.where(m, xs - mean, torch.zeros_like(x)) ** 2).sum() / n
    out = (xs - mean) * torch.rsqrt(var + eps * eps)
    if not shift_mean:
        out = out + mean
    return torch.where(m, out, torch.zeros_like(out))


def trajectory_returns(turn_rewards: Tensor, *, gamma: float = 1.0) -> Tensor:
    """StarPO trajectory-level return: the (discounted) sum of turn rewards `[B, K] -> [B]`.

    Turns past the end of a trajectory must hold reward 0.

    >>> trajectory_returns(torch.tensor([[0.0, 0.5, 1.0]]), gamma=0.5)
    tensor([0.5000])
    """
    k = turn_rewards.shape[-1]
    discounts = gamma ** torch.arange(k, dtype=turn_rewards.dtype, device=turn_rewards.device)
    return (turn_rewards * discounts).sum(-1)


def grpo_scale(
    std: Tensor, *, scale_by_std: bool = True, std_floor: float = 0.0, eps: float = 1e-6
) -> Tensor:
    """The factor GRPO multiplies a centred return by: `1 / max(std + eps, std_floor)`, or 1
    without `scale_by_std`.

    A floor keeps groups whose returns differ only by small step penalties (every episode
    solved, some in fewer moves) from being blown up to unit scale.

    >>> grpo_scale(torch.tensor([0.1, 2.0]), std_floor=1.0, eps=0.0)
    tensor([1.0000, 0.5000])
    """
    if not scale_by_std:
        return torch.ones_like(std)
    return 1.0 / (std + eps).clamp(min=std_floor)


def grpo_advantages(
    returns: Tensor,
    group_ids: Tensor,
    *,
    scale_by_std: bool = True,
    std_floor: float = 0.0,
    eps: float = 1e-6,
) -> Tensor:
    """GRPO: each return minus its group's mean, optionally divided by the group's std.

    `returns [B]`, `group_ids [B]` (same id = same initial seed) -> advantages `[B]`.
    The std is the sample std (divide by n-1, as in the GRPO paper's implementations), floored
    at `std_floor` (`grpo_scale`); a group of one gets advantage 0.

    >>> grpo_advantages(torch.tensor([1.0, 0.0, 2.0, 2.0]), torch.tensor([0, 0, 1, 1]))
    tensor([ 0.7071, -0.7071,  0.0000,  0.0000])
    >>> grpo_advantages(torch.tensor([1.0, 0.9]), torch.tensor([0, 0]), std_floor=1.0)
    tensor([ 0.0500, -0.0500])
    """
    mean, std = group_mean_std(returns, group_ids, unbiased=True)
    adv = (returns - mean) * grpo_scale(
        std, scale_by_std=scale_by_std, std_floor=std_floor, eps=eps
    )
    return adv.to(returns.dtype)


def turn_returns_to_go(turn_rewards: Tensor, *, gamma: float = 1.0) -> Tensor:
    """Discounted return from each turn on, `[B, K] -> [B, K]`: `G_k = R_k + gamma * G_k+1`.

    >>> turn_returns_to_go(torch.tensor([[0.0, 1.0, 1.0]]), gamma=0.5)
    tensor([[0.7500, 1.5000, 1.0000]])
    """
    out = torch.zeros_like(turn_rewards)
    running = torch.zeros_like(turn_rewards[:, 0])
    for k in range(turn_rewards.shape[1] - 1, -1, -1):
        running = turn_rewards[:, k] + gamma * running
        out[:, k] = running
    return out


def rloo_advantages(returns: Tensor, group_ids: Tensor) -> Tensor:
    """RLOO: each return minus the mean of the *other* returns in its group.

    `A_i = r_i - (sum_j r_j - r_i) / (n - 1) = n / (n - 1) * (r_i - mean)`; a group of one
    has no baseline and gets advantage 0.

    >>> rloo_advantages(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([7, 7, 7]))
    tensor([ 1.0000, -0.5000, -0.5000])
    """
    mean, _ = group_mean_std(returns, group_ids, unbiased=False)
    _, inverse, counts = group_index(group_ids)
    n = counts[inverse].to(mean.dtype)
    scale = torch.where(n > 1, n / (n - 1).clamp(min=1), torch.zeros_like(n))
    return (scale * (returns - mean)).to(returns.dtype)


def _masked_gae(
    token_rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    *,
    gamma: float,
    lam: float,
    segment_ids: Tensor | None = None,
) -> Tensor:
    """GAE advantages over masked positions, walking backwards over T.

    Positions with mask 0 are skipped. When `segment_ids` is given, the recursion restarts
    (next value 0, next advantage 0) where the segment id changes between two masked tokens.
    """
    m = mask.bool()
    zeros = torch.zeros_like(values)
    rewards = torch.where(m, token_rewards, zeros)
    values = torch.where(m, values, zeros)
    bsz, seq_len = values.shape
    adv = torch.zeros_like(values)
    next_value = values.new_zeros(bsz)
    next_adv = values.new_zeros(bsz)
    next_seg = None
    if segment_ids is not None:
        next_seg = torch.full((bsz,), torch.iinfo(torch.int64).min, device=values.device)
        segment_ids = segment_ids.to(torch.int64)
    for t in range(seq_len - 1, -1, -1):
        mt = m[:, t]
        nv, na = next_value, next_adv
        if next_seg is not None:
            same = segment_ids[:, t] == next_seg
            nv = torch.where(same, nv, torch.zeros_like(nv))
            na = torch.where(same, na, torch.zeros_like(na))
        delta = rewards[:, t] + gamma * nv - values[:, t]
        a = delta + gamma * lam * na
        adv[:, t] = torch.where(mt, a, torch.zeros_like(a))
        next_value = torch.where(mt, values[:, t], next_value)
        next_adv = torch.where(mt, a, next_adv)
        if next_seg is not None:
            next_seg = torch.where(mt, segment_ids[:, t], next_seg)
    return adv


def gae(
    token_rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over the trained tokens: `(advantages, returns)`.

    `token_rewards`, `values`, `mask`: `[B, T]`. Over the masked positions `t` with next
    masked position `t'` (value 0 after the last one):
    `delta_t = r_t + gamma * V_t' - V_t`, `A_t = delta_t + gamma * lam * A_t'`,
    and `returns_t = A_t + V_t` (the critic's target). Rewards at mask-0 positions are ignored:
    put them on sampled tokens (`place_returns_on_last_token`, `place_turn_rewards`).
    With `gamma = lam = 1` and one terminal reward `R`, `A_t = R - V_t`.

    >>> r = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    >>> v = torch.tensor([[0.5, 9.0, 0.25, 0.75]])
    >>> adv, ret = gae(r, v, torch.tensor([[1, 0, 1, 1]]), gamma=1.0, lam=1.0)
    >>> adv
    tensor([[0.5000, 0.0000, 0.7500, 0.2500]])
    """
    _check_bt("token_rewards", token_rewards, mask)
    _check_bt("values", values, mask)
    values = values.detach()
    adv = _masked_gae(token_rewards, values, mask, gamma=gamma, lam=lam)
    returns = torch.where(mask.bool(), adv + values, torch.zeros_like(adv))
    return adv, returns


def reinforce_pp_advantages(
    token_rewards: Tensor,
    mask: Tensor,
    *,
    gamma: float = 1.0,
    group_ids: Tensor | None = None,
    eps: float = 1e-6,
) -> Tensor:
    """REINFORCE++: discounted returns-to-go, whitened over all trained tokens of the batch.

    `token_rewards`, `mask`: `[B, T]`. With `group_ids [B]` (REINFORCE++ with baseline), each
    trajectory's total reward first has its group's mean subtracted, on its last sampled
    token (as OpenRLHF's `reinforce_baseline` does), then returns-to-go
    `G_t = r_t + gamma * G_t'` (t' the next trained token) are whitened over the batch.

    >>> r = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    >>> reinforce_pp_advantages(r, torch.ones(2, 2))
    tensor([[ 1.,  1.],
            [-1., -1.]])
    """
    _check_bt("token_rewards", token_rewards, mask)
    m = mask.bool()
    rewards = torch.where(m, token_rewards, torch.zeros_like(token_rewards))
    if group_ids is not None:
        totals = rewards.sum(-1)
        mean, _ = group_mean_std(totals, group_ids, unbiased=False)
        rewards = rewards - place_returns_on_last_token(mean.to(rewards.dtype), mask)
    zeros = torch.zeros_like(rewards)
    returns = _masked_gae(rewards, zeros, mask, gamma=gamma, lam=1.0)
    return whiten(returns, mask, eps=eps)


def _last_positions(sel: Tensor) -> Tensor:
    """Index of the last True along T for each row of `sel [B, T]` (-1 if none)."""
    seq_len = sel.shape[-1]
    pos = torch.arange(seq_len, device=sel.device).expand_as(sel)
    return torch.where(sel, pos, torch.full_like(pos, -1)).amax(-1)


def place_returns_on_last_token(returns: Tensor, mask: Tensor) -> Tensor:
    """Token rewards `[B, T]` holding `returns [B]` on each row's last trained token.

    >>> place_returns_on_last_token(torch.tensor([2.0]), torch.tensor([[1, 1, 0]]))
    tensor([[0., 2., 0.]])
    """
    last = _last_positions(mask.bool())
    if (last < 0).any():
        rows = torch.nonzero(last < 0).flatten().tolist()
        raise ValueError(f"rows {rows} have no trained token (mask all 0): nowhere to put a return")
    out = torch.zeros(mask.shape, dtype=returns.dtype, device=returns.device)
    return out.scatter(1, last.unsqueeze(1), returns.unsqueeze(1))


def _turn_last_positions(turn_ids: Tensor, mask: Tensor, num_turns: int) -> Tensor:
    """`[B, K]` index of the last trained token of each turn (-1 for a turn without one)."""
    sel = mask.bool() & (turn_ids >= 0)
    if (turn_ids[sel] >= num_turns).any():
        raise ValueError(f"turn_ids reach {int(turn_ids[sel].max())} but only {num_turns} turns")
    bucket = torch.where(sel, turn_ids.long(), torch.full_like(turn_ids, num_turns).long())
    pos = torch.arange(turn_ids.shape[1], device=turn_ids.device).expand_as(bucket)
    pos = torch.where(sel, pos, torch.full_like(pos, -1))
    last = torch.full((turn_ids.shape[0], num_turns + 1), -1, device=turn_ids.device)
    last = last.scatter_reduce(1, bucket, pos, reduce="amax")
    return last[:, :num_turns]


def _check_turns(turn_rewards: Tensor, last: Tensor) -> None:
    lost = (last < 0) & (turn_rewards != 0)
    if lost.any():
        where = torch.nonzero(lost).tolist()
        raise ValueError(
            f"(row, turn) {where} have a nonzero turn reward but no trained token in that turn"
        )


def place_turn_rewards(turn_rewards: Tensor, turn_ids: Tensor, mask: Tensor) -> Tensor:
    """Token rewards `[B, T]`: each turn's reward on that turn's last trained token.

    `turn_rewards [B, K]`; `turn_ids [B, T]` gives each token's turn (-1 outside turns; only
    positions with `mask` 1 count).

    >>> ids = torch.tensor([[-1, 0, 0, 0, 1, 1]])
    >>> m = torch.tensor([[0, 1, 1, 0, 1, 1]])
    >>> place_turn_rewards(torch.tensor([[0.5, 1.0]]), ids, m)
    tensor([[0.0000, 0.0000, 0.5000, 0.0000, 0.0000, 1.0000]])
    """
    _check_bt("turn_ids", turn_ids, mask)
    last = _turn_last_positions(turn_ids, mask, turn_rewards.shape[1])
    _check_turns(turn_rewards, last)
    out = torch.zeros(
        mask.shape[0], mask.shape[1] + 1, dtype=turn_rewards.dtype, device=turn_rewards.device
    )
    idx = torch.where(last < 0, torch.full_like(last, mask.shape[1]), last)
    out = out.scatter_add(1, idx, torch.where(last < 0, 0.0, turn_rewards))
    return out[:, :-1]
