"""The rollout loop against a scripted engine and scripted envs."""

from __future__ import annotations

import functools
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.rollout.config import RolloutConfig
from agentrl.rollout.loop import rollout
from agentrl.rollout.testing import ScriptedEngine
from agentrl.trajectory.bridge import ChatBridge
from agentrl.trajectory.testing import ScriptedEnv, build_tokenizer, plain_vocab_ids
from agentrl.trajectory.types import Status

TOK = {f: build_tokenizer(f) for f in ("chatml", "llama3", "qwen3")}
BRIDGE = {f: ChatBridge(t) for f, t in TOK.items()}


def _engine(family: str, **kwargs) -> ScriptedEngine:
    kwargs.setdefault("seed", 0)
    return ScriptedEngine(plain_vocab_ids(TOK[family]), **kwargs)


def _run(family: str = "chatml", *, env=ScriptedEnv, seeds=(0, 1), group_size=2, **cfg):
    engine = cfg.pop("engine", None) or _engine(family)
    sampling = cfg.pop("sampling", None)
    progress = cfg.pop("progress", False)
    result = rollout(
        engine, env, TOK[family], list(seeds), group_size=group_size,
        cfg=RolloutConfig(**cfg), sampling=sampling, env_name="scripted", bridge=BRIDGE[family], progress=progress,
    )  # fmt: skip
    return engine, result


def _check_engine_log_matches(engine: ScriptedEngine, result) -> None:
    """Each request's prompt is a prefix of its episode's sample; completions follow verbatim."""
    by_episode: dict[int, list] = {}
    for request, completion in engine.log:
        by_episode.setdefault(int(request.session_id.split("-")[1]), []).append(
            (request, completion)
        )
    for eid, traj in enumerate(result.trajectories):
        calls = by_episode.get(eid, [])
        assert len(calls) == traj.num_turns
        if traj.per_turn_samples:
            assert len(traj.samples) == len(calls)
            pairs = [(s, [c]) for s, c in zip(traj.samples, calls, strict=True)]
        else:
            assert len(traj.samples) == (1 if calls else 0)
            pairs = [(traj.samples[0], calls)] if calls else []
        for sample, sample_calls in pairs:
            for request, completion in sample_calls:
                n = len(request.prompt_ids)
                assert sample.token_ids[:n] == request.prompt_ids
                span = slice(n, n + len(completion.token_ids))
                assert sample.token_ids[span] == completion.token_ids
                assert sample.sampler_logp[span] == completion.logp
                assert all(sample.loss_mask[span])
            assert sum(sample.loss_mask) == sum(len(c.token_ids) for _, c in sample_calls)
        for turn, (_, completion) in zip(traj.turns, calls, strict=True):
            assert turn.num_sampled == len(completion.token_ids)
            assert turn.weight_version == completion.weight_version


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    family=st.sampled_from(sorted(TOK)),
    seed=st.integers(0, 10_000),
    p_stop=st.sampled_from([0.0, 0.5, 1.0]),
    max_new_tokens=st.integers(1, 24),
    max_context_tokens=st.sampled_from([60, 120, 4096]),
)
def test_trainer_ids_equal_engine_ids(family, seed, p_stop, max_new_tokens, max_context_tokens):
    from agentrl.rollout.engine import SamplingParams

    engine = _engine(family, seed=seed, p_stop=p_stop)
    engine, result = _run(
        family, engine=engine, seeds=(seed, seed + 1), max_context_tokens=max_context_tokens,
        sampling=SamplingParams(max_new_tokens=max_new_tokens),
    )  # fmt: skip
    _check_engine_log_matches(engine, result)
    for request, _ in engine.log:
        assert len(request.prompt_ids) + request.params.max_new_tokens <= max_context_tokens
        assert BRIDGE[family].stop_token_ids[0] in request.params.stop_token_ids
    for traj in result.trajectories:
        assert traj.status in (Status.OK, Status.TRUNCATED)
        assert all(len(s) <= max_context_tokens for s in traj.samples)
        assert traj.per_turn_samples == (family == "qwen3")


def test_groups_share_seeds_and_first_observation() -> None:
    _, result = _run(seeds=(7, 9), group_size=3)
    trajs = result.trajectories
    assert [t.group_id for t in trajs] == [0, 0, 0, 1, 1, 1]
    assert [t.seed for t in trajs] == [7, 7, 7, 9, 9, 9]
    assert len({str(t.first_observation) for t in trajs[:3]}) == 1
    assert trajs[0].first_observation != trajs[3].first_observation
    assert result.metrics["rollout/num_episodes"] == 6


def test_env_that_raises_on_step_3_marks_only_its_episode() -> None:
    env = functools.partial(ScriptedEnv, min_steps=5, max_steps=6, fail_on_step=3)
    calm = functools.partial(ScriptedEnv, min_steps=1, max_steps=2)
    factories = iter([env, calm, calm, calm])
    _, result = _run(env=lambda: next(factories)(), seeds=(0, 1), group_size=2)
    first, *rest = result.trajectories
    assert first.status == Status.ENV_ERROR
    assert "scripted env failure on step 3" in first.error
    assert first.num_turns == 3 and first.samples  # the turns before the failure are kept
    assert all(t.status == Status.OK for t in rest)
    assert result.metrics["rollout/env_error_rate"] == 0.25


def test_engine_failure_marks_engine_error() -> None:
    engine = _engine("chatml", fail_on_call=0)
    _, result = _run(engine=engine, seeds=(0,), group_size=1)
    (traj,) = result.trajectories
    assert traj.status == Status.ENGINE_ERROR and "scripted engine failure" in traj.error
    assert traj.num_turns == 0 and traj.samples == []


def test_turn_limit_truncates_with_masks_right() -> None:
    engine, result = _run(env=functools.partial(ScriptedEnv, min_steps=9, max_steps=9), max_turns=3)
    for traj in result.trajectories:
        assert traj.status == Status.TRUNCATED and traj.error == "turn limit (3)"
        assert traj.num_turns == 3
        assert sum(traj.samples[0].loss_mask) == traj.num_sampled_tokens
    _check_engine_log_matches(engine, result)
    assert result.metrics["rollout/truncation_rate"] == 1.0


def test_context_limit_truncates() -> None:
    from agentrl.rollout.engine import SamplingParams

    env = functools.partial(ScriptedEnv, min_steps=9, max_steps=9)
    first_obs, _ = env().reset(seed=0)
    prompt_len = len(BRIDGE["chatml"].prompt_ids(ScriptedEnv.system_prompt, first_obs))
    engine, result = _run(
        env=env, seeds=(0,), group_size=1, max_turns=8, max_context_tokens=prompt_len + 12,
        sampling=SamplingParams(max_new_tokens=20), engine=_engine("chatml", p_stop=0.0),
    )  # fmt: skip
    (traj,) = result.trajectories
    assert traj.status == Status.TRUNCATED and traj.error == "context limit"
    assert len(traj.samples[0]) == prompt_len + 12  # no room for the observation
    assert [r.params.max_new_tokens for r, _ in engine.log] == [12]  # shrunk to what is left
    assert traj.turns[0].finish_reason == "length" and traj.num_turns == 1
    _check_engine_log_matches(engine, result)
    engine, result = _run(
        env=env, max_turns=8, max_context_tokens=150, sampling=SamplingParams(max_new_tokens=20)
    )
    assert all(t.status == Status.TRUNCATED for t in result.trajectories)
    assert all(len(t.samples[0]) <= 150 for t in result.trajectories)
    _check_engine_log_matches(engine, result)


def test_step_timeout_is_env_error_and_episode_timeout_truncates() -> None:
    slow = functools.partial(ScriptedEnv, latency_s=(0.5, 0.5), min_steps=5, max_steps=5)
    _, result = _run(env=slow, seeds=(0,), group_size=1, env_step_timeout_s=0.1)
    assert result.trajectories[0].status == Status.ENV_ERROR
    assert "timed out" in result.trajectories[0].error
    _, result = _run(env=slow, seeds=(0,), group_size=1, episode_timeout_s=0.8)
    (traj,) = result.trajectories
    assert traj.status == Status.TRUNCATED and "time limit" in traj.error
    assert 1 <= traj.num_turns <= 2


def test_episodes_run_concurrently() -> None:
    slow = functools.partial(ScriptedEnv, latency_s=(0.2, 0.2), min_steps=3, max_steps=3)
    start = time.monotonic()
    _, result = _run(env=slow, seeds=(0, 1, 2, 3), group_size=2)
    wall = time.monotonic() - start
    assert all(t.num_turns == 3 for t in result.trajectories)
    assert wall < 8 * 3 * 0.2 / 3  # serial would take 4.8 s
    assert result.metrics["rollout/env_s"] >= 8 * 3 * 0.2 * 0.9


def test_weight_version_and_metrics() -> None:
    engine = _engine("chatml")
    engine.update_weights({}, 5)
    _, result = _run(engine=engine, seeds=(0, 1, 2), group_size=2, progress=True)
    assert all(turn.weight_version == 5 for t in result.trajectories for turn in t.turns)
    m = result.metrics
    assert m["rollout/success_rate"] == 1.0 and m["rollout/mean_reward"] == 1.0
    turns = sum(t.num_turns for t in result.trajectories)
    assert m["rollout/turns_per_episode"] == turns / 6
    invalid = sum(not turn.info["valid"] for t in result.trajectories for turn in t.turns)
    assert m["rollout/parse_failure_rate"] == pytest.approx(invalid / turns)
    assert m["rollout/tokens_per_s"] > 0 and m["rollout/num_sampled_tokens"] > 0


def test_non_prefix_preserving_template_warns_and_reports() -> None:
    import agentrl.rollout.loop as loop

    loop._warned_templates.clear()
    with pytest.warns(UserWarning, match="not prefix-preserving"):
        engine, result = _run("qwen3")
    assert result.metrics["rollout/per_turn_sample_rate"] == 1.0
    _check_engine_log_matches(engine, result)


def test_process_pool_envs() -> None:
    env = functools.partial(ScriptedEnv, fail_on_step=2, min_steps=3, max_steps=3)
    _, result = _run(env=env, env_executor="process", num_env_workers=2, seeds=(0, 1))
    assert all(t.status == Status.ENV_ERROR for t in result.trajectories)
    assert all("failure on step 2" in t.error for t in result.trajectories)
    assert all(t.num_turns == 2 and t.turns[0].info["valid"] for t in result.trajectories)


@pytest.mark.parametrize("family", sorted(TOK))
@pytest.mark.parametrize("history_turns", [0, 1])
def test_history_window_prompts_keep_system_and_last_turns(family, history_turns) -> None:
    """`history_turns=k`: one sample per turn whose prompt is the template's rendering of the
    system message, the last k turns and the new observation; sampled ids stay verbatim."""
    env = functools.partial(ScriptedEnv, min_steps=4, max_steps=5)
    engine, result = _run(family, env=env, history_turns=history_turns, max_turns=6)
    _check_engine_log_matches(engine, result)
    bridge = BRIDGE[family]
    for traj in result.trajectories:
        assert traj.per_turn_samples and len(traj.samples) == traj.num_turns >= 4
        messages = bridge.first_messages(traj.system_prompt, traj.first_observation)
        head, turns = messages[:1], [messages[1:]]  # ScriptedEnv always has a system prompt
        for t, (sample, turn) in enumerate(zip(traj.samples, traj.turns, strict=True)):
            window = turns[-1 - history_turns :] if t else turns
            expected = bridge.render_ids([m for part in (head, *window) for m in part])
            prompt_len = sample.loss_mask.index(1)
            assert sample.token_ids[:prompt_len] == expected
            answer = {"role": "assistant", "content": bridge.decode(
                sample.token_ids[prompt_len:], skip_special_tokens=True)}  # fmt: skip
            if turn.observation is not None and not turn.terminated:
                obs = turn.observation
                obs = [{"role": "user", "content": obs}] if isinstance(obs, str) else obs
                turns[-1] = [*turns[-1], answer]
                turns.append([{"role": m["role"], "content": m["content"]} for m in obs])
    assert result.metrics["rollout/per_turn_sample_rate"] == 1.0


class _InfoEnv(ScriptedEnv):
    """A scripted env whose reset info names the seed, as Sokoban's names `optimal_len`."""

    def reset(self, *, seed=None, options=None):
        observation, _ = super().reset(seed=seed, options=options)
        return observation, {"optimal_len": seed % 10}


def test_trajectories_keep_the_reset_info() -> None:
    _, result = _run(env=_InfoEnv, seeds=(3, 14), group_size=2)
    assert [t.reset_info for t in result.trajectories] == [{"optimal_len": n} for n in (3, 3, 4, 4)]
