"""Expert iteration: the answer scorer equals a plain forward, a wide beam is breadth-first
search, a beam never returns to a state, solutions replay as token-exact trajectories of
forced answers, and imitating them raises the policy's own solve rate."""

from __future__ import annotations

import math
import random
from functools import partial

import pytest
import torch

from agentrl.algos.presets import load_preset
from agentrl.config import ConfigError, load_config
from agentrl.envs import make
from agentrl.rollout.expert import expert_ids
from agentrl.rollout.models import load_model, load_tokenizer, resolve_model
from agentrl.rollout.search import (
    SEARCH_KEY,
    AnswerScorer,
    beam_search,
    is_search,
    sample_labels,
    solution_trajectories,
    timed_search,
)
from agentrl.runtime.batch import to_batch
from agentrl.sft.train import masked_nll
from agentrl.train import learner
from agentrl.train.trainer import Trainer
from agentrl.trajectory.bridge import ChatBridge

ENV = partial(make, "sokoban", max_turns=10, max_actions_per_turn=1)
ANSWERS = ENV().candidate_answers()


@pytest.fixture(scope="module")
def bridge() -> ChatBridge:
    return ChatBridge(load_tokenizer(str(resolve_model("tiny"))))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return load_model(str(resolve_model("tiny")), dtype="float32").eval()


class FixedScorer:
    """Every state gets the same log-probabilities; records the prompts it was given."""

    def __init__(self, logp: list[float]) -> None:
        self.answers = ANSWERS
        self.logp = torch.tensor(logp)
        self.calls: list[int] = []

    def __call__(self, prompts):
        self.calls.append(len(prompts))
        return self.logp.repeat(len(prompts), 1)


def _prompt(bridge: ChatBridge):
    return lambda env, observation: bridge.prompt_ids(env.system_prompt, observation)


def test_the_scorer_equals_a_plain_forward_of_each_answer(bridge, model) -> None:
    env = ENV()
    prompts = []
    for seed in range(5):  # observations of different lengths: padding and a shared prefix
        observation, _ = env.reset(seed=seed)
        prompts.append(bridge.prompt_ids(env.system_prompt, observation))
        observation = env.step(ANSWERS[seed % 4])[0]
        prompts.append(bridge.prompt_ids(env.system_prompt, observation))
    scorer = AnswerScorer(model, bridge, ANSWERS, batch_size=4)  # 3 batches, the last of 2
    got = scorer(prompts)
    assert got.shape == (len(prompts), len(ANSWERS)) and scorer.num_prompts == len(prompts)
    scored = len(scorer.head) + 1
    with torch.no_grad():
        for i, prompt in enumerate(prompts):
            for k, answer in enumerate(ANSWERS):
                ids = bridge.encode(answer)[:scored]
                logp = model(input_ids=torch.tensor([prompt + ids])).logits[0].log_softmax(-1)
                want = sum(float(logp[len(prompt) - 1 + j, t]) for j, t in enumerate(ids))
                assert float(got[i, k]) == pytest.approx(want, abs=1e-4)
    assert torch.allclose(scorer(prompts[-1:]), got[-1:], atol=1e-4)  # a batch of one


def test_the_scorer_needs_answers_that_part_at_one_id(bridge, model) -> None:
    with pytest.raises(ValueError, match="differ"):
        AnswerScorer(model, bridge, ["<answer>Up</answer>", "<answer>Up</answer>"])
    with pytest.raises(ValueError, match="at least two"):
        AnswerScorer(model, bridge, ["<answer>Up</answer>"])


def test_a_wide_beam_finds_a_shortest_solution_of_every_room(bridge) -> None:
    seeds = list(range(12))
    found, metrics = beam_search(
        ENV, seeds, FixedScorer([0.0] * 4), _prompt(bridge), beam_width=10_000, max_depth=10
    )
    assert sorted(found) == seeds and metrics["search/solved_frac"] == 1.0
    env = ENV()
    for seed, answers in found.items():
        _, info = env.reset(seed=seed)
        assert len(answers) == info["optimal_len"]  # breadth-first: a shortest solution
        for answer in answers:
            *_, info = env.step(answer)
        assert info["success"]


def test_a_beam_of_one_follows_the_policy_and_never_returns_to_a_state(bridge) -> None:
    keys: list = []

    def prompt(env, observation):
        keys.append(env.state_key())
        return bridge.prompt_ids(env.system_prompt, observation)

    prefer = [-0.1, -0.2, -3.0, -4.0]  # Up, then Down: without the check it would oscillate
    scorer = FixedScorer(prefer)
    found, metrics = beam_search(ENV, [3], scorer, prompt, beam_width=1, max_depth=10)
    assert scorer.calls and set(scorer.calls) == {1}  # one state a depth
    assert len(keys) == len(set(keys))  # every expanded state is new
    assert metrics["search/prompts_scored"] == len(keys)
    if not found:  # stuck: every answer led back to a state seen before
        assert len(keys) < 10


def test_a_focused_search_searches_only_the_rooms_greedy_play_fails(bridge, model) -> None:
    """`easy_keep` 0: the rooms plain greedy play solves give no label, the others get the full
    beam; `easy_keep` 1 is the plain search; a share in between keeps that many easy rooms."""
    env = ENV()
    seeds = [s for s in range(500_000, 500_200) if env.reset(seed=s)[1]["optimal_len"] <= 2][:40]
    greedy, _ = beam_search(
        ENV, seeds, AnswerScorer(model, bridge, ANSWERS), _prompt(bridge), beam_width=1,
        max_depth=10, loops_fail=True,
    )  # fmt: skip
    hard = set(seeds) - set(greedy)
    assert greedy and hard  # a random model solves some rooms by chance, not all
    search = partial(timed_search, ENV, bridge, model, seeds, max_depth=10)
    trajs, metrics = search(beam_width=64, easy_keep=0.0)
    assert {t.seed for t in trajs} <= hard and len(trajs) == round(
        metrics["search/hard_solved_frac"] * len(hard)
    )
    assert metrics["search/greedy_solved_frac"] == len(greedy) / len(seeds)
    assert metrics["search/hard_rooms"] == len(hard) and metrics["search/solved_frac"] > 0.9
    some, _ = search(beam_width=64, easy_keep=0.5, rng=random.Random(1))
    easy_kept = {t.seed for t in some} - hard
    assert 0 < len(easy_kept) < len(greedy)
    for traj in some:  # a kept easy room's label is the greedy solution itself
        if traj.seed in easy_kept:
            assert [t.action_text for t in traj.turns] == greedy[traj.seed]
    plain, plain_metrics = search(beam_width=64)
    assert {t.seed for t in plain} == {t.seed for t in trajs} | set(greedy)
    assert "search/hard_rooms" not in plain_metrics
    with pytest.raises(ValueError, match="easy_keep"):
        search(beam_width=64, easy_keep=1.5)


def test_plain_greedy_play_fails_where_its_best_answer_returns_to_a_seen_state(bridge) -> None:
    prefer = [-0.1, -0.2, -3.0, -4.0]  # Up, then Down: plain greedy play oscillates
    loops, _ = beam_search(
        ENV, list(range(20)), FixedScorer(prefer), _prompt(bridge), beam_width=1,
        max_depth=10, loops_fail=True,
    )  # fmt: skip
    env = ENV()
    for seed in range(20):  # greedy play is Up until the state stops changing, then a loop
        env.reset(seed=seed)
        key, solved = env.state_key(), False
        for _ in range(10):
            *_, info = env.step(ANSWERS[0])
            if info.get("success"):
                solved = True
                break
            if env.state_key() == key:
                break
            key = env.state_key()
        assert (seed in loops) == solved
    with pytest.raises(ValueError, match="beam_width 1"):
        beam_search(ENV, [0], FixedScorer(prefer), _prompt(bridge), beam_width=2, max_depth=10,
                    loops_fail=True)  # fmt: skip


def test_solutions_become_token_exact_trajectories_of_forced_answers(bridge) -> None:
    found, _ = beam_search(
        ENV, [0, 1, 2], FixedScorer([0.0] * 4), _prompt(bridge), beam_width=64, max_depth=10
    )
    trajs = solution_trajectories(ENV, bridge, found, beam_width=64, env_name="sokoban")
    assert [t.seed for t in trajs] == sorted(found) and [t.group_id for t in trajs] == [0, 1, 2]
    for traj in trajs:
        answers = found[traj.seed]
        assert traj.success and is_search(traj) and traj.per_turn_samples
        assert [t.action_text for t in traj.turns] == answers
        for sample, answer in zip(traj.samples, answers, strict=True):  # one row per answer
            start = sample.loss_mask.index(1)
            assert sample.token_ids[start:] == expert_ids(bridge, answer)
    with pytest.raises(RuntimeError, match="did not solve"):
        solution_trajectories(ENV, bridge, {0: found[0][:-1]}, beam_width=64)


def _search_config(*overrides: str):
    """The expert-iteration preset on small Sokoban rooms; every room searched and every found
    answer trained (no greedy pass, no label sampling) unless `overrides` say otherwise."""
    return load_config(
        overrides=[
            "env.name=sokoban", "env.max_turns=10", "env.kwargs.max_actions_per_turn=1",
            "model.name=tiny", "rollout.history_turns=0", "rollout.sampling.max_new_tokens=8",
            "trainer.num_threads=1", "trainer.num_groups=6", "algo.search_beam=16",
            "algo.search_easy_keep=1.0", "algo.search_label_tau=0", "algo.num_mini_batches=2",
            "checkpoint.every=0", "logging.progress=false",
            "logging.tensorboard=false", "logging.save_trajectories=0", "eval.every=0",
            *overrides,
        ],
        base=load_preset("expert-iteration"),
    )  # fmt: skip


def _one_step(trainer: Trainer, monkeypatch) -> tuple[dict[str, float], list]:
    """One training step of `trainer` (closed after it): its metrics and the batches its
    update received."""
    updated = []
    real_update = trainer.learner.update
    monkeypatch.setattr(
        trainer.learner,
        "update",
        lambda batch, **kw: updated.append(batch) or real_update(batch, **kw),
    )
    try:
        metrics = trainer.train_step()
    finally:
        trainer.close()
    return metrics, updated


def test_an_expert_iteration_step_imitates_every_solution_and_nothing_else(
    tmp_path, monkeypatch
) -> None:
    trainer = Trainer(_search_config("trainer.num_steps=1"), tmp_path)
    metrics, updated = _one_step(trainer, monkeypatch)
    assert metrics["search/solved_frac"] > 0 and "success_rate" not in metrics
    (batch,) = updated
    solved = round(metrics["search/solved_frac"] * 6)
    assert len(set(batch.traj_ids.tolist())) == solved  # every solution, nothing else
    assert batch.num_rows == round(metrics["search/solution_turns"] * solved)
    assert batch.old_logp is None  # imitation: the plain NLL, nothing to take a ratio to
    assert metrics["actor/ratio_mean"] == 1.0 and metrics["actor/tis_weight_mean"] == 1.0
    assert metrics["collapse_warning"] == 0.0


def test_search_needs_expert_iteration_markov_prompts_and_the_local_backend() -> None:
    with pytest.raises(ConfigError, match="search_beam.*expert-iteration"):
        load_config(
            overrides=["env.name=sokoban", "model.name=tiny", "algo.search_beam=4"],
            base=load_preset("grpo"),
        )
    with pytest.raises(ConfigError, match="expert-iteration needs.*history_turns: 0"):
        load_config(
            overrides=["env.name=sokoban", "model.name=tiny"],
            base=load_preset("expert-iteration"),
        )
    with pytest.raises(ConfigError, match="expert-iteration needs.*backend: local"):
        load_config(
            overrides=[
                "env.name=sokoban", "model.name=tiny", "rollout.history_turns=0",
                "trainer.backend=fsdp2",
            ],
            base=load_preset("expert-iteration"),
        )  # fmt: skip


def test_expert_iteration_imitates_the_solutions_it_found(tmp_path) -> None:
    """Eight rooms, searched every step (the seed range holds only them): four steps bring
    the NLL of the first step's solutions from chance (a random model) to a fraction of it.
    (Learning which answer each state needs takes a trained start: the Sokoban runs of
    docs/results.md, from results/sokoban-rl/warm_start.)"""
    cfg = _search_config(
        "trainer.num_steps=4", "trainer.num_groups=8", "algo.num_mini_batches=4",
        "trainer.first_seed=500000", "eval.seed_offset=500008", "optim.lr=3e-3",
        "optim.schedule=constant",
    )  # fmt: skip
    trainer = Trainer(cfg, tmp_path)
    try:
        first = trainer.source.collect(1, trainer.train_seeds(1)).trajectories
        batch = to_batch(first, pad_id=trainer.pad_id)

        def nll() -> float:
            with torch.no_grad():
                total, _ = masked_nll(trainer.policy.model, batch)
            return float(total) / float(batch.loss_mask.sum())

        before = nll()
        solved = [trainer.train_step()["search/solved_frac"] for _ in range(4)]
        after = nll()
    finally:
        trainer.close()
    assert len(first) >= 6 and min(solved) >= 0.75  # the wide beam solves most rooms
    assert before > 5.0 and after < before / 4, (before, after)


def test_the_expert_iteration_preset_runs_its_measured_length_unless_told_otherwise() -> None:
    # Sokoban's defaults say 200 steps (for 8 rooms a step under other presets); the preset's
    # 72 steps of 1,024 rooms win over them, and the command line still wins over the preset.
    from agentrl.cli.train import resolve_train_config

    def steps(overrides: list[str], flags: dict) -> int:
        cfg = resolve_train_config(
            config_file=None, overrides=overrides, preset="expert-iteration", flags=flags
        )
        return cfg.trainer.num_steps

    assert steps([], {"env.name": "sokoban"}) == 72
    assert steps(["trainer.num_steps=80"], {"env.name": "sokoban"}) == 80
    assert steps([], {"env.name": "sokoban", "trainer.num_steps": 7}) == 7


def test_the_search_keeps_the_policys_log_probability_of_every_answer(bridge) -> None:
    prefer = [-0.5, -1.0, -2.0, -3.0]
    logp: dict[int, list[float]] = {}
    found, _ = beam_search(
        ENV, [0, 1, 2, 3], FixedScorer(prefer), _prompt(bridge), beam_width=64, max_depth=10,
        answer_logp=logp,
    )  # fmt: skip
    assert found and sorted(logp) == sorted(found)
    for seed, answers in found.items():  # the scorer's log-probability of each answer played
        assert logp[seed] == pytest.approx([prefer[ANSWERS.index(a)] for a in answers])
    trajs = solution_trajectories(ENV, bridge, found, beam_width=64, answer_logp=logp)
    for traj in trajs:
        assert traj.reset_info[SEARCH_KEY]["answer_logp"] == logp[traj.seed]


def test_label_sampling_keeps_the_unsure_answers_and_is_unbiased() -> None:
    """Rows the policy is unsure of (p <= 1 - tau) are always kept at weight 1; sure ones are
    kept with probability (1 - p) / tau at weight tau / (1 - p), so every row's expected
    advantage is unchanged; rows of other trajectories are left alone."""
    probs = [0.5, 0.9, 0.95, 0.99]
    rows = 4_000  # per probability
    mask = torch.zeros(rows * len(probs) + 1, 3, dtype=torch.long)
    mask[:, 1:] = 1  # two answer tokens a row
    turns = torch.tensor([[-1, 0, 0]]).repeat(mask.shape[0], 1)
    adv = mask.float() * 2.0  # advantage 2 on the answer tokens
    logp = [[math.log(p)] for p in probs for _ in range(rows)] + [None]
    stats = sample_labels(adv, mask, turns, logp, tau=0.1, rng=random.Random(0))
    assert adv[-1].tolist() == [0.0, 2.0, 2.0]  # not a search's row
    assert (adv[:, 0] == 0).all()  # off the trained tokens nothing moves
    by_p = adv[:-1, 1].view(len(probs), rows)  # [P, rows]
    assert (by_p[0] == 2.0).all() and (by_p[1] == 2.0).all()  # p <= 0.9: all kept
    for k, p in enumerate(probs[2:], start=2):
        q = (1 - p) / 0.1
        kept = by_p[k] != 0
        assert torch.allclose(by_p[k][kept], torch.tensor(2.0 / q))
        assert float(kept.float().mean()) == pytest.approx(q, abs=4 * math.sqrt(q / rows))
        assert float(by_p[k].mean()) == pytest.approx(2.0, rel=0.12)  # unbiased
    want = (2 + 0.5 + 0.1) / 4
    assert stats["search/label_keep_frac"] == pytest.approx(want, abs=0.01)
    assert stats["search/label_weight_max"] == pytest.approx(10.0)
    with pytest.raises(ValueError, match="tau"):
        sample_labels(adv, mask, turns, logp, tau=0.0, rng=random.Random(0))


def test_an_expert_iteration_step_trains_the_sampled_answers_at_their_weights(
    tmp_path, monkeypatch
) -> None:
    """`algo.search_label_tau` 0.1 on a search whose answers the policy gave p = 0.5 and
    0.95 in turn (a random model is sure of nothing): the first are all trained at weight 1,
    about half the others at weight 2, and only the kept rows run a forward pass."""
    trainer = Trainer(_search_config("trainer.num_steps=1", "algo.search_label_tau=0.1"), tmp_path)
    trained_rows = []
    real_rows, real_collect = learner.credited_rows, trainer.source.collect

    def collect(step, seeds):
        result = real_collect(step, seeds)
        for traj in result.trajectories:
            info = traj.reset_info[SEARCH_KEY]
            info["answer_logp"] = [math.log(0.5 if t % 2 == 0 else 0.95) for t in range(20)]
        return result

    def credited_rows(batch):  # the rows the update trains
        out = real_rows(batch)
        trained_rows.append(out.numel())
        return out

    monkeypatch.setattr(trainer.source, "collect", collect)
    monkeypatch.setattr(learner, "credited_rows", credited_rows)
    metrics, updated = _one_step(trainer, monkeypatch)
    (batch,) = updated
    trained = batch.loss_mask.bool()
    kept = ((batch.advantages != 0) & trained).any(dim=1)
    turn = torch.where(trained, batch.turn_ids, -1).max(dim=1).values  # [B]
    sure = turn % 2 == 1
    assert sure.any() and (~sure).any()
    assert kept[~sure].all() and 0 < int(kept[sure].sum()) < int(sure.sum())
    assert metrics["search/label_keep_frac"] == pytest.approx(float(kept.float().mean()))
    assert sum(trained_rows) == int(kept.sum())  # the dropped rows run no forward
    for row in kept.nonzero().squeeze(-1).tolist():
        weight = 2.0 if sure[row] else 1.0
        assert torch.allclose(batch.advantages[row][trained[row]], torch.tensor(weight))


def test_label_sampling_needs_the_search() -> None:
    with pytest.raises(ConfigError, match="search_label_tau.*expert-iteration"):
        load_config(
            overrides=["env.name=sokoban", "model.name=tiny", "algo.search_label_tau=0.1"],
            base=load_preset("grpo"),
        )
