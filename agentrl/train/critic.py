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
    head = critic.score if hasattr(critic, "score") else critic.classifier
    nn.init.zeros_(head.weight)
    if getattr(head, "bias", None) is not None:
        nn.init.zeros_(head.bias)
    return critic


def token_values(
    critic: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """Values aligned like token logprobs: `values[:, t]` is V(ids[:, :t]), the value of the
    state in which token t was sampled; column 0 is 0. `[B, T]` float32."""
    out = critic(input_ids=input_ids, attention_mask=attention_mask).logits[..., 0].float()
    return torch.nn.functional.pad(out[:, :-1], (1, 0))
