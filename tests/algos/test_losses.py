"""Losses: hand-computed values and gradients, masking and micro-batch properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.algos.losses import (
    aggregate,
    count_tokens_and_seqs,
    count_trajs,
    entropy_from_logits,
    kl_loss,
    kl_penalty,
    kl_reward_penalty,
    policy_loss,
    token_logprobs_from_logits,
    value_loss,
)

FAST = settings(max_examples=30, deadline=None)
AGGS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


def close(a: torch.Tensor, b, tol: float = 1e-5) -> None:
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), atol=tol, rtol=tol)


# ---------------------------------------------------------------- policy loss


def test_policy_loss_hand_computed_with_clip_higher_and_dual_clip() -> None:
    # eps_low 0.2, eps_high 0.28, dual clip c = 3
    # r=1.3, A=+1: max(-1.3, -1.28) = -1.28  (clipped high: no gradient)
    # r=0.7, A=+1: max(-0.7, -0.8)  = -0.7   (A > 0 below 1 - eps: not clipped)
    # r=1.1, A=-1: max(1.1, 1.1)    = 1.1
    # r=0.5, A=-1: max(0.5, 0.8)    = 0.8    (clipped low: no gradient)
    # r=4.0, A=-1: min(max(4, 1.28), 3) = 3  (dual clip: no gradient)
    # token-mean: (-1.28 - 0.7 + 1.1 + 0.8 + 3) / 5 = 0.584
    # d loss / d logp = -A * r / 5 where unclipped: [0, -0.14, 0.22, 0, 0]
    ratio = torch.tensor([[1.3, 0.7, 1.1, 0.5, 4.0]], dtype=torch.float64)
    logp = ratio.log().requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0, -1.0]], dtype=torch.float64)
    loss, stats = policy_loss(
        logp,
        torch.zeros_like(logp),
        adv,
        torch.ones(1, 5),
        clip_eps_low=0.2,
        clip_eps_high=0.28,
        dual_clip_c=3.0,
    )
    close(loss, 0.584)
    loss.backward()
    close(logp.grad, [[0.0, -0.14, 0.22, 0.0, 0.0]])
    assert stats["clip_frac_high"] == pytest.approx(0.2)
    assert stats["clip_frac_low"] == pytest.approx(0.2)
    assert stats["clip_frac_dual"] == pytest.approx(0.2)
    assert stats["ratio_max"] == pytest.approx(4.0)
    assert stats["ratio_mean"] == pytest.approx(7.6 / 5)
    # k3 of KL(old || new) per token: (r - 1) - log r
    k3 = sum((r - 1) - math.log(r) for r in (1.3, 0.7, 1.1, 0.5, 4.0)) / 5
    assert stats["approx_kl"] == pytest.approx(k3)


@pytest.mark.parametrize(
    ("adv", "bound", "sign"),
    [(1.0, 1.28, +1), (-1.0, 0.8, -1)],  # the side of the clip that matters for each sign
)
def test_policy_loss_gradient_vanishes_exactly_past_the_clip(adv, bound, sign) -> None:
    def grad_at(r: float) -> float:
        logp = torch.tensor([[math.log(r)]], dtype=torch.float64, requires_grad=True)
        loss, _ = policy_loss(
            logp,
            torch.zeros_like(logp),
            torch.tensor([[adv]], dtype=torch.float64),
            torch.ones(1, 1),
            clip_eps_low=0.2,
            clip_eps_high=0.28,
        )
        loss.backward()
        return float(logp.grad)

    inside, outside = bound - sign * 1e-4, bound + sign * 1e-4
    assert grad_at(inside) == pytest.approx(-adv * inside)
    assert grad_at(outside) == 0.0
    # the other side keeps its gradient (PPO only clips the side that helps)
    beyond_other = bound + sign * -0.5
    assert grad_at(beyond_other) == pytest.approx(-adv * beyond_other)


def test_policy_loss_truncated_importance_weight() -> None:
    # sampler logp -1 vs old logp 0: weight e^1 = 2.718 capped at 2; second token: e^-0.5
    logp = torch.zeros(1, 2, requires_grad=True)
    sampler = torch.tensor([[-1.0, 0.5]])
    loss, stats = policy_loss(
        logp,
        torch.zeros(1, 2),
        torch.ones(1, 2),
        torch.ones(1, 2),
        sampler_logp=sampler,
        tis_cap=2.0,
    )
    w = [2.0, math.exp(-0.5)]
    close(loss, -(w[0] + w[1]) / 2)
    loss.backward()
    close(logp.grad, [[-w[0] / 2, -w[1] / 2]])
    assert stats["tis_weight_mean"] == pytest.approx(sum(w) / 2)


def test_policy_loss_rejects_bad_dual_clip_and_shapes() -> None:
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="dual_clip_c"):
        policy_loss(x, x, x, torch.ones(1, 2), dual_clip_c=1.0)
    with pytest.raises(ValueError, match="old_logp"):
        policy_loss(x, torch.zeros(1, 3), x, torch.ones(1, 2))


def test_aggregate_modes_and_error() -> None:
    # rows: [1, 2, 3] (3 tokens), [4] (1 token), [] (no tokens: not counted)
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0], [5.0, 5.0, 5.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    close(aggregate(loss, mask, "token-mean"), 10 / 4)
    close(aggregate(loss, mask, "seq-mean-token-mean"), (2 + 4) / 2)
    close(aggregate(loss, mask, "seq-mean-token-sum"), (6 + 4) / 2)
    close(aggregate(loss, mask, "token-mean", global_num_tokens=8), 10 / 8)
    assert count_tokens_and_seqs(mask) == (4, 2)
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        aggregate(loss, mask, "sum")  # type: ignore[arg-type]


# ---------------------------------------------------------------- properties


def _random_batch(seed: int, bsz: int, seq_len: int):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(bsz, seq_len, generator=g) < 0.6).long()
    mask[0, 0] = 1
    logp = (-torch.rand(bsz, seq_len, generator=g, dtype=torch.float64) * 2).requires_grad_(True)
    old = logp.detach() + torch.randn(bsz, seq_len, generator=g, dtype=torch.float64) * 0.3
    sampler = old + torch.randn(bsz, seq_len, generator=g, dtype=torch.float64) * 0.3
    adv = torch.randn(bsz, seq_len, generator=g, dtype=torch.float64)
    return mask, logp, old, sampler, adv


def _all_losses(logp, old, sampler, adv, mask, agg, num_tokens=None, num_seqs=None):
    kwargs = dict(agg=agg, global_num_tokens=num_tokens, global_num_seqs=num_seqs)
    pg, _ = policy_loss(
        logp,
        old,
        adv,
        mask,
        clip_eps_low=0.2,
        clip_eps_high=0.28,
        dual_clip_c=3.0,
        sampler_logp=sampler,
        tis_cap=2.0,
        **kwargs,
    )
    kl, _ = kl_loss(logp, old, mask, kind="k3", **kwargs)
    vf, _ = value_loss(logp, old, adv, mask, clip_eps=0.2, **kwargs)
    return pg + 0.1 * kl + 0.5 * vf


@FAST
@given(st.integers(0, 2**31 - 1), st.integers(1, 5), st.integers(1, 7), st.sampled_from(AGGS))
def test_masked_positions_never_change_loss_or_gradient(seed, bsz, seq_len, agg) -> None:
    mask, logp, old, sampler, adv = _random_batch(seed, bsz, seq_len)
    loss = _all_losses(logp, old, sampler, adv, mask, agg)
    (grad,) = torch.autograd.grad(loss, logp)

    off = ~mask.bool()
    garbage = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30, -7.0])
    fill = garbage[torch.arange(off.sum()) % len(garbage)].to(torch.float64)

    def spoil(x: torch.Tensor) -> torch.Tensor:
        x = x.detach().clone()
        x[off] = fill
        return x

    logp2 = spoil(logp).requires_grad_(True)
    loss2 = _all_losses(logp2, spoil(old), spoil(sampler), spoil(adv), mask, agg)
    (grad2,) = torch.autograd.grad(loss2, logp2)
    close(loss2, loss.detach(), 1e-12)
    close(grad2, grad, 1e-12)
    assert (grad2[off] == 0).all()


@FAST
@given(
    st.integers(0, 2**31 - 1),
    st.integers(2, 6),
    st.integers(1, 6),
    st.sampled_from(AGGS),
    st.data(),
)
def test_micro_batches_sum_to_the_full_batch(seed, bsz, seq_len, agg, data) -> None:
    mask, logp, old, sampler, adv = _random_batch(seed, bsz, seq_len)
    full = _all_losses(logp, old, sampler, adv, mask, agg)
    (full_grad,) = torch.autograd.grad(full, logp)

    num_tokens, num_seqs = count_tokens_and_seqs(mask)
    cuts = sorted(data.draw(st.sets(st.integers(1, bsz - 1), max_size=bsz - 1)))
    bounds = [0, *cuts, bsz]
    total = torch.zeros((), dtype=torch.float64)
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        # each micro-batch is trimmed to its own (possibly shorter) width, as the trainer does
        width = int(mask[lo:hi].nonzero()[:, 1].max()) + 1 if mask[lo:hi].any() else 1
        part = [x[lo:hi, :width] for x in (logp, old, sampler, adv, mask)]
        total = total + _all_losses(*part[:4], part[4], agg, num_tokens, num_seqs)
    (split_grad,) = torch.autograd.grad(total, logp)
    close(total, full.detach(), 1e-10)
    close(split_grad, full_grad, 1e-10)


# ---------------------------------------------------------------- KL


def test_kl_estimators_hand_computed() -> None:
    # x = logp - ref = [ln 2, 0, -ln 2]
    logp = torch.tensor([[math.log(2.0), 0.0, -math.log(2.0)]])
    ref = torch.zeros(1, 3)
    ln2 = math.log(2.0)
    close(kl_penalty(logp, ref, "k1"), [[ln2, 0.0, -ln2]])
    close(kl_penalty(logp, ref, "k2"), [[ln2**2 / 2, 0.0, ln2**2 / 2]])
    close(kl_penalty(logp, ref, "k3"), [[0.5 - 1 + ln2, 0.0, 2 - 1 - ln2]])
    with pytest.raises(ValueError, match="unknown KL"):
        kl_penalty(logp, ref, "k4")  # type: ignore[arg-type]


def test_kl_loss_and_reward_penalty() -> None:
    logp = torch.tensor([[math.log(2.0), 0.0, 5.0]], requires_grad=True)
    ref = torch.zeros(1, 3)
    mask = torch.tensor([[1, 1, 0]])
    loss, stats = kl_loss(logp, ref, mask, kind="k1")
    close(loss, math.log(2.0) / 2)
    assert stats["kl"] == pytest.approx(math.log(2.0) / 2)
    rewards = torch.tensor([[0.0, 1.0, 0.0]])
    out = kl_reward_penalty(rewards, logp, ref, mask, kl_coef=0.5, kind="k1")
    close(out, [[-0.5 * math.log(2.0), 1.0, 0.0]])
    assert not out.requires_grad


# ---------------------------------------------------------------- value loss


def test_value_loss_hand_computed() -> None:
    # token 0: V 1, old 0, R 2 -> V_clip = 0.2: 0.5 * max(1, 1.8^2) = 1.62 (clipped: grad 0)
    # token 1: V 0.5, old 0.5, R 0 -> 0.5 * 0.25 = 0.125, grad (V - R) / 2 = 0.25
    values = torch.tensor([[1.0, 0.5]], requires_grad=True)
    loss, stats = value_loss(
        values, torch.tensor([[0.0, 0.5]]), torch.tensor([[2.0, 0.0]]), torch.ones(1, 2)
    )
    close(loss, (1.62 + 0.125) / 2)
    loss.backward()
    close(values.grad, [[0.0, 0.25]])
    assert stats["vf_clip_frac"] == pytest.approx(0.5)
    loss, _ = value_loss(
        values,
        torch.tensor([[0.0, 0.5]]),
        torch.tensor([[2.0, 0.0]]),
        torch.ones(1, 2),
        clip_eps=None,
    )
    close(loss, (0.5 + 0.125) / 2)


# ---------------------------------------------------------------- logits helpers


@pytest.mark.parametrize(
    ("dtype", "temperature"), [(torch.float32, 0.7), (torch.bfloat16, 0.7), (torch.float32, 1.0)]
)
def test_token_logprobs_and_entropy_match_reference(dtype, temperature) -> None:
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, 11, generator=g) * 3).to(dtype).requires_grad_(True)
    ids = torch.randint(0, 11, (3, 5), generator=g)
    ref_lp = torch.log_softmax(logits.float() / temperature, -1).gather(-1, ids[..., None])[..., 0]
    lp = token_logprobs_from_logits(logits, ids, temperature=temperature, chunk_size=4)
    assert lp.dtype == torch.float32
    close(lp, ref_lp.detach(), 1e-5)
    (g_ref,) = torch.autograd.grad(ref_lp.sum(), logits)
    (g_lp,) = torch.autograd.grad(lp.sum(), logits)
    close(g_lp.float(), g_ref.float(), 1e-2 if dtype == torch.bfloat16 else 1e-5)

    p = torch.softmax(logits.float(), -1)
    ref_ent = -(p * torch.log_softmax(logits.float(), -1)).sum(-1)
    ent = entropy_from_logits(logits, chunk_size=4)
    close(ent, ref_ent.detach(), 1e-5)
    (g_ref,) = torch.autograd.grad(ref_ent.sum(), logits)
    (g_ent,) = torch.autograd.grad(ent.sum(), logits)
    close(g_ent.float(), g_ref.float(), 1e-2 if dtype == torch.bfloat16 else 1e-5)


def test_logprobs_without_grad_and_shape_error() -> None:
    logits = torch.randn(2, 3, 4)
    with torch.no_grad():
        lp = token_logprobs_from_logits(logits, torch.zeros(2, 3, dtype=torch.long), chunk_size=2)
    assert lp.shape == (2, 3) and (lp <= 0).all()
    with pytest.raises(ValueError, match="do not match"):
        token_logprobs_from_logits(logits, torch.zeros(2, 4, dtype=torch.long))


def test_traj_mean_gives_a_10_turn_failure_and_a_4_turn_success_equal_weight() -> None:
    # One group: a failure in 10 turns and a success in 4, one row per turn (2 tokens each).
    # GRPO gives them advantages -a and +a; each trajectory's total gradient weight on its
    # logprobs must be equal and opposite whatever its number of turns.
    from agentrl.algos.config import AlgoConfig
    from agentrl.algos.estimate import compute_advantages
    from agentrl.algos.policy_gradient import group_estimate

    traj_ids = torch.tensor([0] * 10 + [1] * 4)
    mask = torch.ones(14, 2)
    turn_ids = torch.cat([torch.arange(10), torch.arange(4)]).unsqueeze(-1).expand(14, 2)
    turn_rewards = torch.zeros(14, 10)
    turn_rewards[10:, 3] = 1.0  # the success's last turn
    adv = compute_advantages(
        AlgoConfig(name="grpo"), loss_mask=mask, turn_rewards=turn_rewards,
        turn_ids=turn_ids, group_ids=torch.zeros(14, dtype=torch.long), traj_ids=traj_ids,
        estimate=group_estimate,
    ).advantages  # fmt: skip
    traj_tokens = torch.where(traj_ids == 0, 20.0, 8.0)

    def weights(agg: str) -> tuple[float, float]:
        logp = torch.zeros(14, 2, requires_grad=True)
        loss, _ = policy_loss(logp, torch.zeros(14, 2), adv, mask, agg=agg,
                              traj_num_tokens=traj_tokens)  # fmt: skip
        loss.backward()
        grad = -logp.grad.sum(-1)  # d(-loss)/d(logp): how much each row's tokens are pushed up
        return float(grad[traj_ids == 0].sum()), float(grad[traj_ids == 1].sum())

    fail, success = weights("traj-mean-token-mean")
    assert fail < 0 < success
    assert fail == pytest.approx(-success)
    fail, success = weights("token-mean")  # token-mean weighs the 10-turn failure 2.5x
    assert fail == pytest.approx(-2.5 * success)


def test_count_trajs_counts_a_split_trajectory_once() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    traj_tokens = torch.tensor([3.0, 3.0, 3.0])  # rows 0-1 are one trajectory, row 2 another
    assert count_trajs(mask, traj_tokens) == pytest.approx(2.0)
    assert count_trajs(mask[:1], traj_tokens[:1]) == pytest.approx(2 / 3)
    assert count_trajs(mask, None) == 3.0
