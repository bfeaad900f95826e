"""The bridge's speed paths: one encode per delta (offsets), cached first prompts."""

from __future__ import annotations

import pytest

from agentrl.trajectory.bridge import PLACEHOLDER, ChatBridge, TemplateError
from agentrl.trajectory.testing import PREFIX_PRESERVING_FAMILIES, build_tokenizer

OBSERVATIONS = [
    "The box moved right.",
    " leading space, then ünïcödé and digits 12345",
    [{"role": "user", "content": "Blocked."}, {"role": "user", "content": "Next?"}],
    "",
]


@pytest.mark.parametrize("family", PREFIX_PRESERVING_FAMILIES)
def test_one_encode_delta_equals_separate_encodes(family: str) -> None:
    """The offsets split gives exactly the ids of encoding the tail on its own."""
    bridge = ChatBridge(build_tokenizer(family))
    assert bridge.tokenizer.is_fast
    for observation in OBSERVATIONS:
        messages = bridge.first_messages("You push boxes.", "Start.") + [
            {"role": "assistant", "content": PLACEHOLDER}
        ]
        messages += (
            [{"role": "user", "content": observation}]
            if isinstance(observation, str)
            else observation
        )
        text = bridge.render_text(messages, add_generation_prompt=True)
        cut = text.rfind(PLACEHOLDER) + len(PLACEHOLDER)
        head, tail = bridge.encode(text[:cut]), bridge.encode(text[cut:])
        assert bridge.encode(text) == head + tail
        assert bridge._ids_after(text, cut) == tail


def test_a_token_across_the_cut_is_an_error() -> None:
    bridge = ChatBridge(build_tokenizer("chatml"))
    text = "Right<|im_end|>\n"
    with pytest.raises(TemplateError, match="token boundary"):
        bridge._ids_after(text, len("Right<|im"))
    assert bridge._ids_after(text, len("Right")) == bridge.encode("<|im_end|>\n")


def test_first_prompt_is_rendered_once_per_key(monkeypatch: pytest.MonkeyPatch) -> None:
    bridge = ChatBridge(build_tokenizer("qwen2.5"))
    renders = []
    original = bridge.render_text
    monkeypatch.setattr(
        bridge, "render_text", lambda *a, **k: renders.append(1) or original(*a, **k)
    )
    expected = bridge.render_ids(bridge.first_messages("Sys.", "Start."))
    renders.clear()
    first = bridge.prompt_ids("Sys.", "Start.")
    first.append(-1)  # callers own the returned list; the cache is unaffected
    assert bridge.prompt_ids("Sys.", "Start.") == expected
    assert len(renders) == 1
    assert bridge.prompt_ids("Sys.", "Other start.") != expected  # another key renders anew
    assert bridge.prompt_ids("Sys.", [{"role": "user", "content": "Start."}]) == expected
    assert len(renders) == 3
