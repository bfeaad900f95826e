"""Hypothesis properties of episode token records over random multi-turn conversations."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.trajectory.bridge import ChatBridge, EpisodeTokens
from agentrl.trajectory.testing import TEMPLATES, build_tokenizer

BRIDGES = {family: ChatBridge(build_tokenizer(family)) for family in TEMPLATES}
VOCAB = len(BRIDGES["chatml"].tokenizer)

text = st.text(alphabet="abc xyz<>/\n.", min_size=0, max_size=12)
observation = st.one_of(
    text,
    st.lists(
        st.fixed_dictionaries({"role": st.sampled_from(["user", "tool"]), "content": text}),
        min_size=1,
        max_size=3,
    ),
)
turn = st.tuples(
    st.lists(st.integers(0, VOCAB - 1), min_size=0, max_size=8),  # sampled ids
    st.booleans(),  # stopped on the end-of-turn id
    observation,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    family=st.sampled_from(sorted(TEMPLATES)),
    system_prompt=st.sampled_from(["", "Sys."]),
    first=text,
    turns=st.lists(turn, min_size=1, max_size=4),
)
def test_sampled_ids_verbatim_and_masks_exact(family, system_prompt, first, turns) -> None:
    bridge = BRIDGES[family]
    episode = EpisodeTokens(bridge, system_prompt, first)
    prompts, sampled_all = [], []
    for t, (ids, stopped, obs) in enumerate(turns):
        ids = ids + [bridge.stop_token_ids[0]] if stopped else ids
        logp = [-(i % 7) / 3 for i in range(len(ids))]
        prompts.append(episode.prompt_ids)
        sampled_all.append((ids, logp))
        episode.add_completion(ids, logp, t)
        if t < len(turns) - 1:
            episode.add_observation(obs, episode.next_ids(obs, ids), t)
    samples = episode.samples()
    if episode.per_turn:
        assert len(samples) == len(turns)
        for sample, prompt, (ids, logp) in zip(samples, prompts, sampled_all, strict=False):
            assert sample.token_ids == prompt + ids
            assert sample.loss_mask == [0] * len(prompt) + [1] * len(ids)
            assert sample.sampler_logp[len(prompt) :] == logp
        return
    (sample,) = samples
    for prompt, (ids, logp) in zip(prompts, sampled_all, strict=True):
        # the engine was given a prefix of the final sample, and its ids follow verbatim
        assert sample.token_ids[: len(prompt)] == prompt
        span = slice(len(prompt), len(prompt) + len(ids))
        assert sample.token_ids[span] == ids
        assert sample.loss_mask[span] == [1] * len(ids)
        assert sample.sampler_logp[span] == logp
    assert sum(sample.loss_mask) == sum(len(ids) for ids, _ in sampled_all)
    assert len(sample.loss_mask) == len(sample.token_ids) == len(sample.sampler_logp)
    assert all(
        lp == 0.0 for lp, m in zip(sample.sampler_logp, sample.loss_mask, strict=True) if not m
    )
    assert sample.turn_ids[: len(prompts[0])] == [-1] * len(prompts[0])
