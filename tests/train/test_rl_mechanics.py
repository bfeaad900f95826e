"""The update does what the presets claim: the clip acts, the critic warms up first and is
scored over the whole batch, rewards are normalised, RL seeds avoid the expert's."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from trainer_envs import VowelCount

from agentrl.algos.presets import load_preset, preset_algo_config
from agentrl.config import ConfigError, load_config
from agentrl.envs import register
from agentrl.runtime.batch import to_batch
from agentrl.train.critic import value_head
from agentrl.train.trainer import Trainer, replay_queue
from agentrl.trajectory.types import Trajectory, Turn

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


@pytest.mark.parametrize("preset", ["grpo", "starpo-s", "state-rloo"])
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


def test_critic_warmup_epochs_give_the_critic_more_steps_only_while_it_warms_up(tmp_path) -> None:
    trainer = _trainer(
        tmp_path, "starpo", "algo.critic_warmup_steps=1", "algo.critic_warmup_epochs=3",
        "algo.num_mini_batches=2", "algo.filter_keep_ratio=null",
    )  # fmt: skip
    steps, ids = [], []
    inner, inner_backward = trainer.critic.step, trainer._critic_backward
    trainer.critic.step = lambda: steps.append(1) or inner()

    def counting_backward(micro, norm):
        ids.append(int(micro.attention_mask.sum()))
        return inner_backward(micro, norm)

    trainer._critic_backward = counting_backward
    try:
        metrics = trainer.train_step()  # warm-up: 3 passes x 2 mini-batches
        warm, steps[:] = len(steps), []
        batch_ids, ids[:] = sum(ids) // 3, []
        trainer.train_step()  # the policy moves: ppo_epochs (1) x 2 mini-batches
    finally:
        trainer.close()
    assert (warm, len(steps)) == (6, 2)
    # the throughput counts every pass's ids, not one pass's
    assert metrics["throughput/train_tokens"] == 3 * batch_ids


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


def test_rft_takes_the_plain_nll_gradient_in_every_mini_batch(tmp_path) -> None:
    """Imitation has no trust region: after the first mini-batch moved the weights, the
    next one still trains the NLL (ratio 1 to the current weights, nothing clipped)."""
    trainer = _trainer(
        tmp_path, "grpo", "algo.estimator=rft", "algo.num_mini_batches=2", "algo.kl_coef=0",
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


def test_curriculum_replays_seeds_with_mixed_outcomes_once(tmp_path) -> None:
    trainer = _trainer(tmp_path, "grpo", "trainer.replay_mixed_frac=0.5")
    try:
        fresh = trainer.train_seeds(1)
        trainer.state = replace(trainer.state, replay_seeds=[11, 12, 13])
        seeds = trainer.train_seeds(2)
    finally:
        trainer.close()
    assert seeds[:2] == [11, 12]  # half of the 4 groups replay, oldest first
    assert len(set(seeds)) == 4 and not set(seeds[2:]) & set(fresh)  # the rest are fresh

    def episode(seed: int, success: bool) -> Trajectory:
        return Trajectory([], [Turn(1, "a", "stop", 0, info={"success": success})], "e", seed, 0)

    rollout = [episode(11, True), episode(11, False), episode(20, True), episode(20, False)]
    rollout += [episode(21, False), episode(21, False), episode(22, True), episode(22, True)]
    # 11 was replayed and leaves; 20 is mixed and joins; 21 (all failed) and 22 (all solved)
    # carry no gradient signal in a group and do not
    assert replay_queue([11, 12, 13], rollout, max_len=8) == [12, 13, 20]
    assert replay_queue([11, 12, 13], rollout, max_len=2) == [13, 20]


def test_every_preset_resolves_with_the_sokoban_defaults() -> None:
    from agentrl.algos.presets import list_presets
    from agentrl.train._cli import resolve_train_config

    for preset in list_presets():
        cfg = resolve_train_config(
            config_file=None, overrides=[], preset=preset, flags={"env.name": "sokoban"}
        )
        if cfg.algo.estimator == "state-best":
            # policy iteration is classification: one optimizer step on the labels, nothing
            # to clip (its preset says so); each labelled state weighs one, whatever the
            # episodes that led there (tests/algos/test_estimate.py)
            assert not cfg.algo.clips and cfg.trainer.branch_answers == "all"
            continue
        if cfg.algo.estimator == "rft":
            # expert iteration imitates the search's solutions: the plain NLL, nothing to
            # clip (its preset says so); every answer of every solution weighs the same
            assert not cfg.algo.clips and cfg.trainer.search_beam > 0
            assert cfg.algo.loss_agg == "token-mean"
            continue
        assert cfg.algo.clips
        # every trajectory weighs the same, whatever its turns: per-move credit with every
        # move weighed alike has that effect (tests/algos/test_losses.py)
        per_move = cfg.algo.estimator == "state-rloo" and cfg.algo.loss_agg == "token-mean"
        assert per_move or cfg.algo.loss_agg == "traj-mean-token-mean"
        assert cfg.trainer.first_seed >= cfg.warm_start.num_episodes


def test_per_move_credit_matches_the_states_of_a_real_rollout(tmp_path) -> None:
    # Sokoban with prompts of the current grid only: every episode of a group starts from the
    # same prompt, so its first turn's state id is shared in the group and nowhere else, and
    # equal ids mean equal prompts (the grid and the actions left).
    from agentrl.runtime.batch import to_batch

    trainer = _trainer(
        tmp_path, "grpo", "env.name=sokoban", "env.max_turns=3", "rollout.max_turns=3",
        "rollout.history_turns=0", "algo.estimator=state-rloo", "algo.reward_level=turn",
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


def test_rows_without_credit_are_skipped_without_changing_the_update(tmp_path) -> None:
    # GRPO without KL or entropy: a row whose advantages are all 0 (an all-solved or all-failed
    # group) adds nothing to the loss; leaving it out of the passes gives the same gradient.
    trainer = _trainer(tmp_path, "grpo", "algo.kl_coef=0", "algo.num_mini_batches=1")
    grads: list[list[torch.Tensor]] = []

    def record_and_drop() -> float:  # in place of the optimizer step: keep the gradient
        params = [p for p in trainer.policy.model.parameters() if p.requires_grad]
        grads.append([p.grad.clone() for p in params])
        trainer.policy.optimizer.zero_grad(set_to_none=True)
        return 1.0

    try:
        batch = to_batch(trainer.rollout(1).trajectories, pad_id=trainer.pad_id)
        trainer.score(batch)
        trainer.advantages(batch)
        batch.advantages[: batch.num_rows // 2] = 0.0  # some rows without credit for sure
        assert 0 < trainer._rows_with_credit(batch, train_policy=True).num_rows < batch.num_rows
        trainer.policy.step = record_and_drop
        trainer.update(batch)
        trainer._rows_with_credit = lambda b, train_policy: b  # every row, as without the skip
        trainer.update(batch)
    finally:
        trainer.close()
    skipped, full = grads
    assert any(g.abs().sum() > 0 for g in full)
    for a, b in zip(skipped, full, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_only_credited_rows_are_scored_and_they_score_as_in_the_full_pass(tmp_path) -> None:
    trainer = _trainer(tmp_path, "grpo", "algo.kl_coef=0")
    assert trainer._credit_before_scoring
    try:
        batch = to_batch(trainer.rollout(1).trajectories, pad_id=trainer.pad_id)
        trainer.advantages(batch)
        batch.advantages[: batch.num_rows // 2] = 0.0
        rows = trainer._credited_rows(batch)
        assert 0 < rows.numel() < batch.num_rows
        trainer.score(batch)
        full = batch.old_logp.clone()
        trainer.score(batch, rows=rows)
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
    # An env whose defaults name the state-rloo preset (reward_level: turn; here Sokoban's,
    # patched, as they were before expert iteration): overriding the estimator to it must not
    # be checked against the global default preset's trajectory rewards.
    from agentrl.config import ConfigError
    from agentrl.train import _cli
    from agentrl.train._cli import resolve_train_config

    real = _cli.env_defaults
    monkeypatch.setattr(
        _cli,
        "env_defaults",
        lambda name: (real(name)[0], "state-rloo") if name == "sokoban" else real(name),
    )

    cfg = resolve_train_config(
        config_file=None,
        overrides=["algo.estimator=state-rloo"],
        preset=None,
        flags={"env.name": "sokoban"},
    )
    assert (cfg.algo.estimator, cfg.algo.reward_level) == ("state-rloo", "turn")
    assert cfg.warm_start.expert == "solver"  # the env's defaults still apply
    with pytest.raises(ConfigError, match="reward_level"):  # an env without them: still refused
        resolve_train_config(
            config_file=None,
            overrides=["algo.estimator=state-rloo"],
            preset=None,
            flags={"env.name": "guess_number"},
        )


def test_the_envs_keys_for_one_preset_apply_under_that_preset_only(monkeypatch) -> None:
    # Sokoban's defaults give PPO the rooms a step its critic needs to fit; other presets keep
    # their own, and `--set` still wins
    from agentrl.train import _cli
    from agentrl.train._cli import resolve_train_config

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
    assert starpo_s.algo.critic_warmup_steps == 5  # the env's general key, not PPO's

    real = _cli.env_defaults

    def typo(name: str):
        tree, preset = real(name)
        return {**tree, "presets": {"ppo2": {"trainer": {"num_steps": 1}}}}, preset

    monkeypatch.setattr(_cli, "env_defaults", typo)
    with pytest.raises(ValueError, match="unknown presets.*ppo2"):
        resolve("ppo")
