"""The update does what the presets claim: the clip acts, the critic warms up first and is
scored over the whole batch, rewards are normalised, RL seeds avoid the expert's."""

from __future__ import annotations

import random

import pytest
import torch
from trainer_envs import VowelCount

from agentrl.algos.base import CreditInputs
from agentrl.algos.presets import load_preset, preset_algo_config
from agentrl.config import ConfigError, load_config
from agentrl.envs import register
from agentrl.runtime.batch import to_batch
from agentrl.train.critic import value_head
from agentrl.train.learner import credited_rows
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
    # lambda 1 and no KL in the reward: the targets are the plain returns
    assert all(
        m["critic/explained_var_mc"] == pytest.approx(m["critic/explained_var"])
        for m in [*warm, moved]
    )
    assert moved["reward/norm_scale"] > 0


def test_critic_warmup_fits_the_head_under_ppo_with_the_kl_in_the_reward(tmp_path) -> None:
    """The least-squares head fit regresses Monte-Carlo returns before the batch is scored, so
    `ppo`'s KL penalty in the reward (which needs the scores) stays out of its targets."""
    trainer = _trainer(tmp_path, "ppo", "algo.critic_warmup_steps=1")
    assert trainer.cfg.algo.kl_in_reward
    head = value_head(trainer.critic.model)
    try:
        warm = trainer.train_step()
    finally:
        trainer.close()
    assert warm["actor/updated"] == 0.0
    assert torch.count_nonzero(head.weight) > 0  # the fit moved the zero-initialised head
    # lambda 0.95 and the KL penalty: the lambda-returns are not the plain returns
    assert warm["critic/explained_var_mc"] != pytest.approx(warm["critic/explained_var"])


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
        tmp_path, "grpo", "algo.name=rft", "algo.num_mini_batches=1", "algo.kl_coef=0"
    )
    try:
        metrics = trainer.train_step()
    finally:
        trainer.close()
    # the kept share is the success rate; every kept token is pushed up (advantage 1)
    assert metrics["filter/keep_frac"] == pytest.approx(metrics["success_rate"])
    if metrics["success_rate"] > 0:
        assert metrics["advantage/advantage_mean"] == pytest.approx(1.0)


def test_rft_takes_the_plain_nll_gradient_in_every_mini_batch(tmp_path) -> None:
    """Imitation has no trust region: after the first mini-batch moved the weights, the
    next one still trains the NLL (ratio 1 to the current weights, nothing clipped)."""
    trainer = _trainer(
        tmp_path, "grpo", "algo.name=rft", "algo.num_mini_batches=2", "algo.kl_coef=0",
        "optim.lr=0.05", "trainer.num_groups=4", "rollout.group_size=4",
    )  # fmt: skip
    try:
        for _ in range(3):
            metrics = trainer.train_step()
            if metrics["success_rate"] > 0:
                break
    finally:
        trainer.close()
    assert metrics["success_rate"] > 0, "no episode solved: nothing imitated"
    assert metrics["actor/ratio_mean"] == pytest.approx(1.0)
    assert metrics["actor/clip_frac"] == 0.0 and metrics["actor/tis_weight_mean"] == 1.0


def test_every_preset_resolves_with_the_sokoban_defaults() -> None:
    from agentrl.algos.presets import list_presets
    from agentrl.cli.train import resolve_train_config

    for preset in list_presets():
        cfg = resolve_train_config(
            config_file=None, overrides=[], preset=preset, flags={"env.name": "sokoban"}
        )
        if cfg.algo.name == "expert-iteration":
            # expert iteration imitates the search's solutions: the plain NLL, nothing to
            # clip (its preset says so); every answer of every solution weighs the same
            assert not cfg.algo.clips and cfg.algo.search_beam > 0
            assert cfg.algo.loss_agg == "token-mean"
            continue
        assert cfg.algo.clips
        # every trajectory weighs the same, whatever its turns
        assert cfg.algo.loss_agg == "traj-mean-token-mean"
        assert cfg.trainer.first_seed >= cfg.warm_start.num_episodes


def test_per_move_credit_matches_the_states_of_a_real_rollout(tmp_path) -> None:
    # Sokoban with prompts of the current grid only: every episode of a group starts from the
    # same prompt, so its first turn's state id is shared in the group and nowhere else, and
    # equal ids mean equal prompts (the grid and the actions left).
    from agentrl.runtime.batch import to_batch

    trainer = _trainer(
        tmp_path, "grpo", "env.name=sokoban", "env.max_turns=3", "rollout.max_turns=3",
        "rollout.history_turns=0", "algo.reward_level=turn",
        "algo.kl_coef=0",
    )  # fmt: skip
    try:
        trajs = trainer.rollout(1).trajectories
        metrics = trainer.train_step()
    finally:
        trainer.close()
    batch = to_batch(trajs, pad_id=trainer.pad_id)
    first = batch.turn_states[:, 0]
    for g in batch.group_ids.unique():
        in_group = batch.group_ids == g
        assert first[in_group].unique().numel() == 1
        assert not torch.isin(first[in_group][:1], first[~in_group]).any()
    pairs = set()
    for t in trajs:
        states = to_batch([t], pad_id=0).turn_states[0]
        for sample in t.samples:  # one sample per turn: its prompt is what comes before its ids
            prompt = tuple(sample.token_ids[: sample.loss_mask.index(1)])
            pairs.add((int(states[max(sample.turn_ids)]), prompt))
    ids = [state for state, _ in pairs]
    prompts = [prompt for _, prompt in pairs]
    assert len(set(ids)) == len(set(prompts)) == len(pairs)  # one id per distinct prompt
    assert len(pairs) > len(batch.group_ids.unique())  # later turns reach other states
    assert "advantage/advantage_abs_mean" in metrics


def _credit(trainer: Trainer, batch, trajs) -> dict[str, float]:
    return trainer.algo.credit(batch, CreditInputs(trajs, trainer.reward_scale, random.Random(0)))


def test_rows_without_credit_are_skipped_without_changing_the_update(tmp_path, monkeypatch) -> None:
    # GRPO without KL or entropy: a row whose advantages are all 0 (an all-solved or all-failed
    # group) adds nothing to the loss; leaving it out of the passes gives the same gradient.
    trainer = _trainer(tmp_path, "grpo", "algo.kl_coef=0", "algo.num_mini_batches=1")
    assert trainer.algo.skips_uncredited_rows
    grads: list[list[torch.Tensor]] = []

    def record_and_drop() -> float:  # in place of the optimizer step: keep the gradient
        params = [p for p in trainer.policy.model.parameters() if p.requires_grad]
        grads.append([p.grad.clone() for p in params])
        trainer.policy.optimizer.zero_grad(set_to_none=True)
        return 1.0

    try:
        trajs = trainer.rollout(1).trajectories
        batch = to_batch(trajs, pad_id=trainer.pad_id)
        trainer.learner.score(batch)
        _credit(trainer, batch, trajs)
        batch.advantages[: batch.num_rows // 2] = 0.0  # some rows without credit for sure
        assert 0 < credited_rows(batch).numel() < batch.num_rows
        trainer.policy.step = record_and_drop
        trainer.learner.update(batch)
        # every row, as without the skip
        monkeypatch.setattr(type(trainer.algo), "skips_uncredited_rows", False)
        trainer.learner.update(batch)
    finally:
        trainer.close()
    skipped, full = grads
    assert any(g.abs().sum() > 0 for g in full)
    for a, b in zip(skipped, full, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_only_credited_rows_are_scored_and_they_score_as_in_the_full_pass(tmp_path) -> None:
    trainer = _trainer(tmp_path, "grpo", "algo.kl_coef=0")
    assert trainer.algo.credit_before_scoring and trainer.algo.needs.old_logp
    try:
        trajs = trainer.rollout(1).trajectories
        batch = to_batch(trajs, pad_id=trainer.pad_id)
        _credit(trainer, batch, trajs)
        batch.advantages[: batch.num_rows // 2] = 0.0
        rows = credited_rows(batch)
        assert 0 < rows.numel() < batch.num_rows
        trainer.learner.score(batch)
        full = batch.old_logp.clone()
        trainer.learner.score(batch, rows=rows)
        part = batch.old_logp
        metrics = trainer.train_step()  # the whole step takes this path
    finally:
        trainer.close()
    torch.testing.assert_close(part[rows], full[rows])
    others = torch.ones(batch.num_rows, dtype=torch.bool)
    others[rows] = False
    assert (part[others] == 0).all() and (full[others] != 0).any()
    assert metrics["time/score"] >= 0 and "actor/pg_loss" in metrics


def test_an_override_that_only_the_envs_preset_makes_valid_is_accepted(monkeypatch) -> None:
    # An env whose keys for its preset give turn rewards (here Sokoban's, patched: grpo with
    # `reward_level: turn`): overriding the algorithm to gigpo, which needs them, must not be
    # checked against the global default preset's trajectory rewards.
    from agentrl.cli import train as _cli
    from agentrl.cli.train import resolve_train_config
    from agentrl.config import ConfigError

    real = _cli.env_defaults

    def turn_rewards(name: str, model: str | None = None):
        tree, _ = real(name, model)
        if name != "sokoban":
            return tree, None
        return {**tree, "presets": {"grpo": {"algo": {"reward_level": "turn"}}}}, "grpo"

    monkeypatch.setattr(_cli, "env_defaults", turn_rewards)

    cfg = resolve_train_config(
        config_file=None,
        overrides=["algo.name=gigpo"],
        preset=None,
        flags={"env.name": "sokoban"},
    )
    assert (cfg.algo.name, cfg.algo.reward_level) == ("gigpo", "turn")
    assert cfg.warm_start.expert == "solver"  # the env's defaults still apply
    # an env without them: naming gigpo picks the gigpo preset, whose turn rewards make it valid
    cfg = resolve_train_config(
        config_file=None,
        overrides=["algo.name=gigpo"],
        preset=None,
        flags={"env.name": "guess_number"},
    )
    assert (cfg.algo.name, cfg.algo.reward_level) == ("gigpo", "turn")
    with pytest.raises(ConfigError, match="reward_level"):  # the user's own trajectory: refused
        resolve_train_config(
            config_file=None,
            overrides=["algo.name=gigpo", "algo.reward_level=trajectory"],
            preset=None,
            flags={"env.name": "guess_number"},
        )
    # the override that makes it valid by itself is accepted anywhere
    cfg = resolve_train_config(
        config_file=None,
        overrides=["algo.name=gigpo", "algo.reward_level=turn"],
        preset=None,
        flags={"env.name": "guess_number"},
    )
    assert (cfg.algo.name, cfg.algo.reward_level) == ("gigpo", "turn")


def test_the_envs_keys_for_one_preset_apply_under_that_preset_only(monkeypatch) -> None:
    # Sokoban's defaults give PPO the rooms a step its critic needs to fit; other presets keep
    # their own, and `--set` still wins
    from agentrl.cli import train as _cli
    from agentrl.cli.train import resolve_train_config

    def resolve(preset: str | None, *overrides: str):
        return resolve_train_config(
            config_file=None,
            overrides=list(overrides),
            preset=preset,
            flags={"env.name": "sokoban"},
        )

    ppo = resolve("ppo")
    assert (ppo.rollout.group_size, ppo.trainer.num_groups) == (2, 128)
    assert (ppo.algo.critic_warmup_steps, ppo.algo.num_mini_batches) == (24, 16)
    assert ppo.trainer.num_steps == 48 and ppo.warm_start.expert == "solver"
    assert ppo.optim.critic_lr == 3e-4 and resolve("starpo-s").optim.critic_lr == 1e-3
    assert resolve("ppo", "trainer.num_groups=4", "rollout.group_size=8").trainer.num_groups == 4
    starpo_s = resolve("starpo-s")
    assert (starpo_s.rollout.group_size, starpo_s.trainer.num_groups) == (8, 8)
    assert starpo_s.algo.critic_warmup_steps == 5  # the env's key for starpo-s, not PPO's

    real = _cli.env_defaults

    def typo(name: str, model: str | None = None):
        tree, preset = real(name, model)
        return {**tree, "presets": {"ppo2": {"trainer": {"num_steps": 1}}}}, preset

    monkeypatch.setattr(_cli, "env_defaults", typo)
    with pytest.raises(ValueError, match="unknown presets.*ppo2"):
        resolve("ppo")
