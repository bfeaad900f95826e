"""The shared-prefix forward equals the plain forward, loss and gradients included."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agentrl.runtime.prefix import shared_prefix_len, shared_prefix_logits


def _model(path: Path) -> torch.nn.Module:
    from agentrl.rollout.models import load_model

    torch.manual_seed(0)
    return load_model(str(path), dtype="float32")


def _rows(prefix_len: int, tails: list[int], vocab: int = 500) -> tuple[torch.Tensor, ...]:
    """Right-padded rows: one shared prefix, then tails of the given lengths."""
    g = torch.Generator().manual_seed(1)
    head = torch.randint(10, vocab, (prefix_len,), generator=g)
    width = prefix_len + max(tails)
    ids = torch.zeros((len(tails), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, n in enumerate(tails):
        ids[r, : prefix_len + n] = torch.cat([head, torch.randint(10, vocab, (n,), generator=g)])
        mask[r, : prefix_len + n] = 1
    return ids, mask


def _loss_and_grads(model, fn, ids, mask, keep):
    model.zero_grad()
    logits = fn(model, ids, mask, keep)
    targets = ids[:, keep + 1]
    weight = mask[:, keep + 1].float()
    logp = torch.log_softmax(logits.float(), -1).gather(-1, targets[..., None]).squeeze(-1)
    loss = -(logp * weight).sum() / weight.sum()
    loss.backward()
    return logits.detach(), loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _count_forwards(model: torch.nn.Module) -> list[torch.Size]:
    """The input shapes of every later `model(...)` call, recorded into the returned list."""
    calls: list[torch.Size] = []
    real_forward = model.forward

    def counting_forward(*args, **kwargs):
        calls.append((kwargs["input_ids"] if "input_ids" in kwargs else args[0]).shape)
        return real_forward(*args, **kwargs)

    model.forward = counting_forward  # type: ignore[method-assign]
    return calls


def _plain(model, ids, mask, keep):
    return model(input_ids=ids, attention_mask=mask, logits_to_keep=keep).logits


def test_shared_prefix_len_stops_at_first_difference_or_padding() -> None:
    ids = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 9, 0], [1, 2, 3, 4, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0], [1, 1, 1, 1, 0]])
    assert shared_prefix_len(ids, mask) == 3
    assert shared_prefix_len(ids[[0, 2]], mask[[0, 2]]) == 4  # column 4 is padding in row 2
    assert shared_prefix_len(ids[:1], mask[:1]) == 5


def test_matches_plain_forward_logits_loss_and_gradients(tiny_model_path: Path) -> None:
    model = _model(tiny_model_path)
    ids, mask = _rows(prefix_len=48, tails=[20, 7, 13, 20])
    keep = torch.arange(50, ids.shape[1] - 1)
    calls = _count_forwards(model)
    got = _loss_and_grads(model, shared_prefix_logits, ids, mask, keep)
    assert calls == [torch.Size([1, 48]), torch.Size([4, ids.shape[1] - 48])]  # prefix once
    want = _loss_and_grads(model, _plain, ids, mask, keep)
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-6)
    for name, grad in want[2].items():
        torch.testing.assert_close(got[2][name], grad, rtol=1e-3, atol=1e-6, msg=name)


@pytest.mark.parametrize(
    ("prefix_len", "tails", "first_kept"),
    [
        (8, [10, 12], 9),  # shared prefix below MIN_SHARED
        (48, [10], 49),  # one row
        (48, [10, 12], 40),  # a kept position inside the prefix: shared part cut to 40
    ],
)
def test_short_single_or_cut_prefixes_still_match(
    tiny_model_path: Path, prefix_len: int, tails: list[int], first_kept: int
) -> None:
    model = _model(tiny_model_path)
    ids, mask = _rows(prefix_len, tails)
    keep = torch.arange(first_kept, ids.shape[1] - 1)
    got = _loss_and_grads(model, shared_prefix_logits, ids, mask, keep)
    want = _loss_and_grads(model, _plain, ids, mask, keep)
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-6)


def test_trainer_token_logprobs_with_shared_prefix_match(tiny_model_path: Path) -> None:
    from types import SimpleNamespace

    from agentrl.train.learner import token_logprobs, trained_positions

    model = _model(tiny_model_path)
    ids, mask = _rows(prefix_len=40, tails=[12, 9, 12])
    loss_mask = torch.zeros(ids.shape, dtype=torch.float32)
    loss_mask[:, 45:] = mask[:, 45:].float()
    batch = SimpleNamespace(input_ids=ids, attention_mask=mask, loss_mask=loss_mask)
    positions = trained_positions(batch.loss_mask)
    want, want_logits = token_logprobs(model, batch, temperature=0.7, positions=positions)
    got, got_logits = token_logprobs(
        model, batch, temperature=0.7, positions=positions, share_prefix=True
    )
    assert got_logits.shape == want_logits.shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_gradient_checkpointing_uses_the_plain_forward(tiny_model_path: Path) -> None:
    """Checkpointing turns the cache off; the shared path must not be tried."""
    model = _model(tiny_model_path)
    model.gradient_checkpointing_enable()
    model.train()
    ids, mask = _rows(prefix_len=48, tails=[10, 12])
    keep = torch.arange(49, ids.shape[1] - 1)
    calls = _count_forwards(model)
    got = _loss_and_grads(model, shared_prefix_logits, ids, mask, keep)
    assert calls == [ids.shape]
    want = _loss_and_grads(model, _plain, ids, mask, keep)
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-6)


def test_critic_values_with_shared_prefix_match_the_plain_forward(tiny_model_path: Path) -> None:
    """`token_values(..., first_position=)` runs the shared prefix once and gives the plain
    values, and their gradients, from that position on (0 before it)."""
    from agentrl.train.critic import build_critic, token_values, value_head

    critic = build_critic(_model(tiny_model_path))
    torch.nn.init.normal_(value_head(critic).weight, std=0.5)  # a head that reads the trunk
    ids, mask = _rows(prefix_len=48, tails=[20, 7, 13])
    target = torch.randn(ids.shape, generator=torch.Generator().manual_seed(2))
    weight = torch.zeros(ids.shape)
    weight[:, 52:] = mask[:, 52:].float()

    def values_and_grads(**kwargs):
        critic.zero_grad()
        values = token_values(critic, ids, mask, **kwargs)
        (((values - target) ** 2) * weight).sum().backward()
        return values.detach(), {n: p.grad.clone() for n, p in critic.named_parameters()}

    backbone = getattr(critic, critic.base_model_prefix)
    calls = _count_forwards(backbone)
    got, got_grads = values_and_grads(first_position=52)
    assert calls == [torch.Size([1, 48]), torch.Size([3, ids.shape[1] - 48])]  # prefix once
    want, want_grads = values_and_grads()
    assert calls[2:] == [ids.shape]  # the plain forward: the whole rows
    assert got.shape == want.shape
    assert not got[:, :49].any()  # nothing computed before the shared prefix ends
    torch.testing.assert_close(got[:, 52:], want[:, 52:], rtol=1e-4, atol=1e-5)
    for name, grad in want_grads.items():
        scale = float(grad.abs().max())  # float rounding, relative to the gradient's size
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-3, atol=1e-5 * scale, msg=name)
