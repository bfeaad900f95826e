"""The chat-template bridge on real template families (local tokenizers, no downloads)."""

from __future__ import annotations

import pytest

from agentrl.trajectory.bridge import ChatBridge, EpisodeTokens, TemplateError
from agentrl.trajectory.testing import PREFIX_PRESERVING_FAMILIES, build_tokenizer

CONVERSATION = [
    ("Start: the box is left of the target.", "Right", "The box moved right."),
    ("", "Up", [{"role": "user", "content": "Blocked."}, {"role": "user", "content": "Next?"}]),
    ("", "Left", "Solved."),
]


@pytest.mark.parametrize("family", PREFIX_PRESERVING_FAMILIES)
def test_template_is_prefix_preserving(family: str) -> None:
    bridge = ChatBridge(build_tokenizer(family))
    assert bridge.prefix_preserving, bridge.probe_error
    assert bridge.stop_token_ids[0] == bridge.end_of_turn_ids[0]


def test_think_dropping_template_is_detected() -> None:
    bridge = ChatBridge(build_tokenizer("qwen3"))
    assert not bridge.prefix_preserving
    assert "<think>" in (bridge.probe_error or "")


@pytest.mark.parametrize("family", PREFIX_PRESERVING_FAMILIES)
@pytest.mark.parametrize("system_prompt", ["You push boxes.", ""])
def test_bridge_equals_the_templates_own_rendering(family: str, system_prompt: str) -> None:
    """Prompt + actions (stopped on end-of-turn) + deltas == the template's full rendering."""
    tok = build_tokenizer(family)
    bridge = ChatBridge(tok)
    first = CONVERSATION[0][0]
    episode = EpisodeTokens(bridge, system_prompt, first)
    messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
        {"role": "user", "content": first}
    ]
    for t, (_, action, reply) in enumerate(CONVERSATION):
        sampled = tok.encode(action, add_special_tokens=False) + [bridge.stop_token_ids[0]]
        expected = tok.encode(
            tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
            add_special_tokens=False,
        )
        assert episode.prompt_ids == expected
        episode.add_completion(sampled, [-1.0] * len(sampled), t)
        messages.append({"role": "assistant", "content": action})
        messages.extend([{"role": "user", "content": reply}] if isinstance(reply, str) else reply)
        episode.add_observation(reply, episode.next_ids(reply, sampled), t)
    full = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert episode.prompt_ids == tok.encode(full, add_special_tokens=False)


@pytest.mark.parametrize("family", ["qwen2.5", "smollm2"])
def test_default_system_prompt_is_rendered(family: str) -> None:
    bridge = ChatBridge(build_tokenizer(family))
    text = bridge.decode(bridge.prompt_ids("", "hello"))
    assert ("You are Qwen" if family == "qwen2.5" else "You are a helpful AI assistant") in text
    assert "You are Qwen" not in bridge.decode(bridge.prompt_ids("Be brief.", "hello"))


def test_qwen_tool_messages_fold_into_one_user_turn() -> None:
    bridge = ChatBridge(build_tokenizer("qwen2.5"))
    obs = [{"role": "tool", "content": "42"}, {"role": "tool", "content": "7"}]
    ids = bridge.observation_ids("", "go", obs, sampled_ids=bridge.end_of_turn_ids[:1])
    text = bridge.decode(ids)
    assert text == (
        "\n<|im_start|>user\n<tool_response>\n42\n</tool_response>\n<tool_response>\n7\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("family", ["chatml", "llama3"])
def test_end_of_turn_added_unmasked_when_stopped_by_length(family: str) -> None:
    tok = build_tokenizer(family)
    bridge = ChatBridge(tok)
    episode = EpisodeTokens(bridge, "", "go")
    sampled = tok.encode("abc", add_special_tokens=False)  # no end-of-turn: cut by length
    episode.add_completion(sampled, [-0.5] * len(sampled), 0)
    ids = episode.next_ids("more", sampled)
    assert ids[: len(bridge.end_of_turn_ids)] == bridge.end_of_turn_ids
    episode.add_observation("more", ids, 0)
    (sample,) = episode.samples()
    assert sum(sample.loss_mask) == len(sampled)
    # stopped on the end-of-turn id: it is sampled (mask 1) and not repeated
    stopped = sampled + [bridge.stop_token_ids[0]]
    again = bridge.observation_ids("", "go", "more", sampled_ids=stopped)
    assert again == ids[1:]


def test_per_turn_samples_for_non_prefix_preserving_template() -> None:
    tok = build_tokenizer("qwen3")
    bridge = ChatBridge(tok)
    episode = EpisodeTokens(bridge, "sys", "go")
    assert episode.per_turn
    first_prompt = episode.prompt_ids
    a1 = tok.encode("<think>\nhm\n</think>\n\nUp", add_special_tokens=False) + [2]
    episode.add_completion(a1, [-1.0] * len(a1), 0)
    episode.add_observation("wall", episode.next_ids("wall", a1), 0)
    # the second prompt is the template's own rendering, with the <think> dropped
    expected = tok.apply_chat_template(
        [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "<think>\nhm\n</think>\n\nUp"},
            {"role": "user", "content": "wall"},
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert "<think>" not in expected
    assert episode.prompt_ids == tok.encode(expected, add_special_tokens=False)
    a2 = [5, 6, 2]
    episode.add_completion(a2, [-0.1, -0.2, -0.3], 1)
    s1, s2 = episode.samples()
    assert s1.token_ids == first_prompt + a1 and s1.loss_mask == [0] * len(first_prompt) + [
        1
    ] * len(a1)
    assert s2.token_ids[-3:] == a2 and sum(s2.loss_mask) == 3 and s2.sampler_logp[-1] == -0.3


def test_tokenizer_without_template_is_rejected() -> None:
    tok = build_tokenizer("chatml")
    tok.chat_template = None
    with pytest.raises(TemplateError, match="no chat template"):
        ChatBridge(tok)
