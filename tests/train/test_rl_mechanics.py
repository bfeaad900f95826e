"""The update does what the presets claim: the clip acts, the critic warms up first and is
scored over the whole batch, rewards are normalised, RL seeds avoid the expert's."""

from __future__ import annotations

import pytest
import torch
from trainer_envs import VowelCount

from agentrl.algos.presets import load_preset, preset_algo_config
from agentrl.config import ConfigError, load_config
from agentrl.envs import register
from agentrl.train.trainer import Trainer

register("vowel-count", VowelCount)


def _trainer(tmp_path, preset: str, *overrides: str) -> Trainer:
    cfg = load_config(
        overrides=[
            "env.name=vowel-count",
            "model.name=tiny",
            "rollout.group_size=4",
            "rollout.sampling.max_new_tokens=8",
            "trainer.num_groups=4",
            "trainer.num_steps=4",
            "trainer.num_threads=1",
            "optim.lr=3e-3",
            "optim.critic_lr=3e-3",
            "checkpoint.every=0",
            "logging.progress=false",
            "logging.tensorboard=false",
            "logging.save_trajectories=0",
            *overrides,
        ],
        base=load_preset(preset),
    )
    return Trainer(cfg, tmp_path)


@pytest.mark.parametrize("preset", ["grpo", "starpo-s"])
def test_presets_that_clip_take_several_steps_and_the_clip_acts(tmp_path, preset) -> None:
    assert preset_algo_config(preset).clips
    trainer = _trainer(tmp_path / preset, preset, "algo.filter_keep_ratio=null")
    try:
        metrics = [trainer.train_step() for _ in range(2)]
    finally:
        trainer.close()
    # 4 mini-batches: after the first optimizer step the ratio leaves 1 and some tokens clip
    assert max(m["actor/clip_frac"] for m in metrics) > 0, metrics
    assert any(abs(m["actor/ratio_mean"] - 1.0) > 1e-4 for m in metrics)


def test_one_optimizer_step_per_rollout_never_clips(tmp_path) -> None:
    trainer = _trainer(tmp_path, "grpo", "algo.num_mini_batches=1")
    assert not trainer.cfg.algo.clips
    try:
        metrics = [trainer.train_step() for _ in range(2)]
    finally:
        trainer.close()
    assert all(m["actor/clip_frac"] == 0.0 and m["actor/ratio_mean"] == 1.0 for m in metrics)


def test_critic_warmup_fits_the_value_head_before_the_policy_moves(tmp_path) -> None:
    trainer = _trainer(tmp_path, "starpo", "algo.critic_warmup_steps=2")
    policy_before = [p.detach().clone() for p in trainer.policy.model.parameters()]
    critic_before = [p.detach().clone() for p in trainer.critic.model.parameters()]
    try:
        warm = [trainer.train_step() for _ in range(2)]
        policy_after_warmup = [p.detach().clone() for p in trainer.policy.model.parameters()]
        critic_after_warmup = [p.detach().clone() for p in trainer.critic.model.parameters()]
        moved = trainer.train_step()
    finally:
        trainer.close()
    unchanged = all(
        torch.equal(a, b) for a, b in zip(policy_before, policy_after_warmup, strict=True)
    )
    assert unchanged, "the policy moved during the critic's warm-up"
    assert not all(
        torch.equal(a, b) for a, b in zip(critic_before, critic_after_warmup, strict=True)
    )
    assert [m["actor/updated"] for m in warm] == [0.0, 0.0] and moved["actor/updated"] == 1.0
    policy_now = list(trainer.policy.model.parameters())
    assert not all(
        torch.equal(a, b.detach()) for a, b in zip(policy_after_warmup, policy_now, strict=True)
    )
    # explained variance is one whole-batch figure, and rewards are normalised
    assert all(-10.0 < m["critic/explained_var"] <= 1.0 for m in [*warm, moved])
    assert moved["reward/norm_scale"] > 0


def test_rl_seeds_stay_clear_of_expert_and_validation_seeds(tmp_path) -> None:
    trainer = _trainer(tmp_path, "grpo", "trainer.first_seed=1000", "eval.seed_offset=1010")
    try:
        seeds = [s for step in range(1, 6) for s in trainer.train_seeds(step)]
    finally:
        trainer.close()
    assert all(1000 <= s < 1010 for s in seeds)
    with pytest.raises(ConfigError, match="first_seed"):
        load_config(overrides=["warm_start.expert=solver", "warm_start.num_episodes=600000"])


def test_rft_imitates_only_the_successful_episodes(tmp_path) -> None:
    trainer = _trainer(
        tmp_path, "grpo", "algo.estimator=rft", "algo.num_mini_batches=1", "algo.kl_coef=0"
    )
    try:
        metrics = trainer.train_step()
    finally:
        trainer.close()
    # the kept share is the success rate; every kept token is pushed up (advantage 1)
    assert metrics["filter/keep_frac"] == pytest.approx(metrics["success_rate"])
    if metrics["success_rate"] > 0:
        assert metrics["advantage/advantage_mean"] == pytest.approx(1.0)
