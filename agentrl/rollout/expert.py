"""One episode played by an expert, in the same token-exact format the RL rollout writes.

Each turn the expert's answer text is tokenized once (these ids play the part of the ids an
engine sampled), followed by the template's end-of-turn id, exactly as an engine that stopped
on it would return them. Observations go through the same `ChatBridge` / `EpisodeTokens` as
the rollout loop, so the SFT sequence of an episode equals, token for token, the sequence the
RL trainer would build had the policy sampled these ids. `agentrl.sft` writes its data with
it, and the policy-guided search (`agentrl.rollout.search`) replays its solutions with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from agentrl.envs.base import TokenEnv
from agentrl.envs.contract import checked_reset, checked_step, env_label
from agentrl.trajectory.bridge import ChatBridge, EpisodeTokens
from agentrl.trajectory.types import Status, Trajectory, Turn

Expert = Callable[[Any, int | None], str]
"""`expert(env, max_actions) -> answer text` for the env's current state."""


class NoExpertError(ValueError):
    """The named expert does not exist, or the env offers nothing it can use."""


def expert_ids(bridge: ChatBridge, text: str) -> list[int]:
    """The expert's "sampled" ids for `text`: its tokens, then the end-of-turn stop id."""
    ids = bridge.encode(text)
    if bridge.stop_token_ids:
        ids.append(bridge.stop_token_ids[0])
    return ids


def expert_episode(
    env: TokenEnv,
    bridge: ChatBridge,
    expert: Expert,
    seed: int,
    *,
    group_id: int = 0,
    max_actions_per_turn: int | None = None,
    max_context_tokens: int = 4096,
    env_name: str = "",
    history_turns: int | None = None,
    noise: float = 0.0,
    rng: np.random.Generator | None = None,
) -> Trajectory:
    """Play one episode of `env` from `seed` with `expert`; the token-exact trajectory.

    The status is `ok` when the env terminated, `truncated` when a budget ran out first.
    `history_turns` windows the prompts as the rollout's `RolloutConfig.history_turns` does.

    With `noise` > 0 each turn plays, with that chance, a random answer (`env.sample_action`,
    drawn from `rng`) instead of the expert's, so that later turns show the expert's answers
    from states off its own path (DART). Those answers stay in the conversation with loss
    mask 0, and a per-turn sample that holds only them is dropped. An episode whose random
    moves leave the expert without an answer (a Sokoban box stuck in a corner) ends there.
    """
    if noise and rng is None:
        raise ValueError("noise > 0 needs an rng")
    label = env_label(env)
    observation, _ = checked_reset(env.reset(seed=seed), env=label, call=f"reset(seed={seed})")
    traj = Trajectory(samples=[], turns=[], env_name=env_name, seed=seed, group_id=group_id)
    traj.system_prompt, traj.first_observation = env.system_prompt, observation
    tools = [dict(t) for t in (getattr(env, "tools", None) or [])]
    tokens = EpisodeTokens(
        bridge, env.system_prompt, observation, tools=tools, history_turns=history_turns
    )
    strayed = False
    for t in range(env.max_turns):
        random_turn = bool(noise) and float(rng.random()) < noise  # type: ignore[union-attr]
        if random_turn:
            text = env.sample_action(rng)  # type: ignore[arg-type]
        else:
            try:
                text = expert(env, max_actions_per_turn)
            except NoExpertError:
                if not strayed:
                    raise
                traj.status, traj.error = Status.TRUNCATED, "no expert answer after random moves"
                break
        strayed = strayed or random_turn
        ids = expert_ids(bridge, text)
        if len(tokens) + len(ids) > max_context_tokens:
            traj.status, traj.error = Status.TRUNCATED, "context limit"
            break
        tokens.add_completion(ids, [0.0] * len(ids), t, train=not random_turn)
        action = bridge.decode(ids, skip_special_tokens=True)
        turn = Turn(
            num_sampled=len(ids), action_text=action, finish_reason="stop", weight_version=0
        )
        traj.turns.append(turn)
        observation, reward, terminated, truncated, info = checked_step(
            env.step(action), env=label, call=f"step (turn {t + 1} of the expert's episode)"
        )
        turn.reward, turn.observation = float(reward), observation
        turn.terminated, turn.truncated, turn.info = bool(terminated), bool(truncated), info
        if terminated:
            break
        if truncated or t == env.max_turns - 1:
            traj.status, traj.error = Status.TRUNCATED, "env truncated"
            break
        next_ids = tokens.next_ids(observation, ids)
        if tokens.next_length(next_ids) >= max_context_tokens:
            traj.status, traj.error = Status.TRUNCATED, "context limit"
            break
        tokens.add_observation(observation, next_ids, t)
    traj.samples = [s for s in tokens.samples() if any(s.loss_mask)]
    traj.per_turn_samples = tokens.per_turn
    traj.metrics = {"num_sampled_tokens": float(traj.num_sampled_tokens)}
    return traj
