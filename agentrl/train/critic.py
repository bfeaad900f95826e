"""The critic: a value head on a copy of the policy backbone.

It is a Hugging Face `*ForTokenClassification` model with one label, so every backend wraps
and saves it like the policy: `critic(input_ids=..., attention_mask=...).logits[..., 0]` is
the value of each prefix.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


def build_critic(policy: nn.Module) -> nn.Module:
    """A value model with the policy's backbone weights and a zero-initialised value head
    (so the first values are 0 and the first advantages are the raw returns)."""
    from transformers import AutoModelForTokenClassification

    config = copy.deepcopy(policy.config)
    config.num_labels = 1
    config.problem_type = "regression"
    config.classifier_dropout = 0.0
    critic = AutoModelForTokenClassification.from_config(config, dtype=torch.float32)
    backbone_prefix = policy.base_model_prefix  # "model" for Llama, Qwen2, Mistral...
    backbone = getattr(policy, backbone_prefix)
    getattr(critic, critic.base_model_prefix).load_state_dict(backbone.state_dict())
    head = value_head(critic)
    nn.init.zeros_(head.weight)
    if getattr(head, "bias", None) is not None:
        nn.init.zeros_(head.bias)
    return critic


def token_values(
    critic: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    first_position: int | None = None,
) -> torch.Tensor:
    """Values aligned like token logprobs: `values[:, t]` is V(ids[:, :t]), the value of the
    state in which token t was sampled; column 0 is 0. `[B, T]` float32.

    With `first_position` (the first column whose value is used, e.g. the first trained
    token; for the plain, unwrapped critic), the prefix every row shares up to it is run once
    (`agentrl.runtime.prefix`) and the values before it are 0.
    """
    if first_position is None or first_position < 1:
        out = critic(input_ids=input_ids, attention_mask=attention_mask).logits[..., 0].float()
        return torch.nn.functional.pad(out[:, :-1], (1, 0))
    from agentrl.runtime.prefix import shared_prefix_hidden

    backbone = getattr(critic, critic.base_model_prefix)
    hidden, offset = shared_prefix_hidden(backbone, input_ids, attention_mask, first_position - 1)
    out = value_head(critic)(hidden[:, :-1]).squeeze(-1).float()  # values of columns offset+1..
    return torch.nn.functional.pad(out, (offset + 1, 0))


def value_head(critic: nn.Module) -> nn.Module:
    """The critic's linear value head (`score` or `classifier`)."""
    return critic.score if hasattr(critic, "score") else critic.classifier


@torch.no_grad()
def fit_value_head(
    critic: nn.Module,
    parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]],
    *,
    ridge: float = 0.1,
) -> None:
    """Set the value head to the least-squares fit of `targets` on the backbone's features.

    `parts` holds `(input_ids, attention_mask, targets, mask)` micro-batches (`[b, t]` each):
    the value of token t (`token_values`) reads the feature of position t - 1, so the fit
    regresses `targets[:, t]` on those features where `mask` is 1 (ridge penalty `ridge` per
    sample, so the head's weights stay small and later backbone updates cannot blow the values
    up; bias not penalised). A zero-initialised head otherwise needs hundreds of small Adam steps to reach
    the scale of the returns; the fit starts the critic at the best linear read-out instead.
    """
    backbone = getattr(critic, critic.base_model_prefix)
    head = value_head(critic)
    feats, ys = [], []
    for input_ids, attention_mask, targets, mask in parts:
        hidden = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        hidden = torch.nn.functional.pad(hidden[:, :-1], (0, 0, 1, 0))  # feature for token t
        sel = mask.bool()
        feats.append(hidden[sel].double())
        ys.append(targets[sel].double())
    x = torch.cat(feats)  # [N, d]
    y = torch.cat(ys)  # [N]
    x = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], dim=1)  # bias column
    penalty = ridge * len(x) * torch.eye(x.shape[1], dtype=x.dtype)
    penalty[-1, -1] = 0.0
    solution = torch.linalg.solve(x.T @ x + penalty, x.T @ y)  # [d + 1]
    head.weight.copy_(solution[:-1].to(head.weight.dtype).unsqueeze(0))
    if getattr(head, "bias", None) is not None:
        head.bias.fill_(float(solution[-1]))
    elif float(solution[-1]) != 0.0:  # no bias: refit through the origin
        plain = torch.linalg.solve(x[:, :-1].T @ x[:, :-1] + penalty[:-1, :-1], x[:, :-1].T @ y)
        head.weight.copy_(plain.to(head.weight.dtype).unsqueeze(0))
