"""GiGPO: group-in-group advantages (Feng et al., 2025, "Group-in-Group Policy Optimization
for LLM Agent Training", the verl-agent algorithm).

Two levels of relative credit, neither needing a critic:

- **episode level**: GRPO over the episode returns of each group (the episodes that started
  from the same seed): `A_E = (R - mean) / std` (or `R - mean` without `scale_by_std`);
- **step level**: the steps of one group's episodes that acted in the same *anchor state*
  (`state_ids`: equal ids for an identical policy input) form a step group; each step's
  discounted return-to-go less the step group's mean, optionally over its std, is `A_S`.
  A step group of one has nothing to compare with and gets 0.

Each turn gets `A = A_E + omega * A_S`, and 0 past the last turn (`state_ids == -1`).

Shapes: `B` episodes, `K` turns. `to_go [B, K]` is each turn's discounted return-to-go
(`advantages.turn_returns_to_go`), `state_ids [B, K]` the state each turn acted in
(`TrainBatch.turn_states`), `group_ids [B]` the episode's group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentrl.algos.base import Algorithm, register_algorithm
from agentrl.algos.config import CLIP_KEYS, AlgoConfig

if TYPE_CHECKING:
    from torch import Tensor

    from agentrl.algos.estimate import Rewards

__all__ = ["gigpo_advantages", "step_group_advantages"]


def _check_shapes(to_go: Tensor, state_ids: Tensor, group_ids: Tensor) -> None:
    if to_go.dim() != 2 or to_go.shape != state_ids.shape:
        raise ValueError(
            f"to_go {tuple(to_go.shape)} and state_ids {tuple(state_ids.shape)} must both be [B, K]"
        )
    if group_ids.shape != to_go.shape[:1]:
        raise ValueError(
            f"group_ids must be [B] = {tuple(to_go.shape[:1])}, got {tuple(group_ids.shape)}"
        )


def step_group_advantages(
    to_go: Tensor,
    state_ids: Tensor,
    group_ids: Tensor,
    *,
    scale_by_std: bool,
    eps: float = 1e-6,
) -> Tensor:
    """GiGPO's step-level advantage, `[B, K], [B, K], [B] -> [B, K]`.

    A step group is the set of valid turns (`state_ids >= 0`) with the same
    `(group_ids[b], state_ids[b, k])`: the same anchor state within one group. The same state
    id in two groups makes two step groups, and a state visited twice in one episode puts
    both visits in its step group. Each turn's return-to-go less its step group's mean,
    divided by the step group's sample std plus `eps` when `scale_by_std` (GRPO within the
    step group, `advantages.grpo_advantages`). A step group of one, and every entry with
    `state_ids == -1`, gets 0.

    Rows 0 and 1 share state 7 in group 0 (mean 6); row 2 is in another group, so its
    state 7 is a step group of one:

    >>> import torch
    >>> to_go = torch.tensor([[10.0, 1.0], [2.0, 0.0], [5.0, 0.0]])
    >>> states = torch.tensor([[7, 8], [7, -1], [7, -1]])
    >>> step_group_advantages(to_go, states, torch.tensor([0, 0, 1]), scale_by_std=False)
    tensor([[ 4.,  0.],
            [-4.,  0.],
            [ 0.,  0.]])
    """
    import torch

    from agentrl.algos.advantages import grpo_advantages

    _check_shapes(to_go, state_ids, group_ids)
    out = torch.zeros_like(to_go)
    valid = state_ids >= 0  # [B, K]
    if not valid.any():
        return out
    rows = valid.nonzero(as_tuple=True)[0]  # [N], in the order of to_go[valid]
    keys = torch.stack([group_ids[rows].long(), state_ids[valid].long()], dim=1)  # [N, 2]
    _, step_groups = torch.unique(keys, dim=0, return_inverse=True)  # [N]
    out[valid] = grpo_advantages(to_go[valid], step_groups, scale_by_std=scale_by_std, eps=eps)
    return out


def gigpo_advantages(
    episode_returns: Tensor,
    to_go: Tensor,
    state_ids: Tensor,
    group_ids: Tensor,
    *,
    omega: float,
    scale_by_std: bool,
    eps: float = 1e-6,
) -> Tensor:
    """GiGPO per-turn advantages, `[B], [B, K], [B, K], [B] -> [B, K]`.

    `A[b, k] = A_E[b] + omega * A_S[b, k]` on every turn (`state_ids[b, k] >= 0`), 0 past the
    last turn. `A_E` is GRPO over `episode_returns` within each group
    (`advantages.grpo_advantages`: a group of one gets 0), `A_S` is
    `step_group_advantages(to_go, state_ids, group_ids)`; `scale_by_std` applies to both.
    With `omega = 0` every turn of an episode carries its GRPO episode advantage.

    Two episodes of one group: returns 1 and 0 (A_E = +-0.5), both acting first in state 7
    with returns-to-go 1 and 0 (A_S = +-0.5); the second turns' states differ (A_S = 0):

    >>> import torch
    >>> to_go = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    >>> states = torch.tensor([[7, 8], [7, 9]])
    >>> gigpo_advantages(torch.tensor([1.0, 0.0]), to_go, states, torch.tensor([0, 0]),
    ...                  omega=1.0, scale_by_std=False)
    tensor([[ 1.0000,  0.5000],
            [-1.0000, -0.5000]])
    """
    import torch

    from agentrl.algos.advantages import grpo_advantages

    _check_shapes(to_go, state_ids, group_ids)
    if episode_returns.shape != group_ids.shape:
        raise ValueError(
            f"episode_returns {tuple(episode_returns.shape)} must be [B] like group_ids"
            f" {tuple(group_ids.shape)}"
        )
    episode = grpo_advantages(episode_returns, group_ids, scale_by_std=scale_by_std, eps=eps)
    step = step_group_advantages(to_go, state_ids, group_ids, scale_by_std=scale_by_std, eps=eps)
    combined = episode.to(to_go.dtype).unsqueeze(-1) + omega * step  # [B, K]
    return torch.where(state_ids >= 0, combined, torch.zeros_like(combined))


def gigpo_estimate(algo: AlgoConfig, r: Rewards) -> tuple[Tensor, None]:
    """GiGPO's credit on the packed trajectories: each turn's `gigpo_advantages` (episode
    returns, turn returns-to-go at `turn_gamma`, the anchor states of `TrainBatch.turn_states`:
    equal prompts) on that turn's trained tokens."""
    from agentrl.algos.advantages import turn_returns_to_go

    if r.state_ids is None:
        raise ValueError("gigpo needs the anchor state of every turn (TrainBatch.turn_states)")
    to_go = turn_returns_to_go(r.turn_rewards, gamma=algo.turn_gamma)  # [N, K]
    credit = gigpo_advantages(
        r.turn_rewards.sum(-1),
        to_go,
        r.state_ids,
        r.group_ids,
        omega=algo.step_weight,
        scale_by_std=algo.scale_by_std,
    )  # [N, K]
    return r.on_turn_tokens(credit), None


@register_algorithm("gigpo")
class GiGPO(Algorithm):
    """Group-in-Group Policy Optimization (Feng et al. 2025): GRPO's episode advantage plus
    `step_weight` times a step advantage among the visits of the same anchor state within a
    group; PPO clip, no critic. Needs `reward_level: turn`; anchor states are equal prompts,
    so prompts should hold the state (`rollout.history_turns: 0` where the observation is the
    whole state)."""

    config_keys = CLIP_KEYS | {"turn_gamma", "scale_by_std", "step_weight"}
    reward_levels = ("turn",)  # it credits steps
    estimate = staticmethod(gigpo_estimate)
