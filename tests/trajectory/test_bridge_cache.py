"""The bridge's speed paths: one encode per delta (offsets), cached first prompts, and the
tokenizer backend called directly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.trajectory.bridge import PLACEHOLDER, ChatBridge, TemplateError
from agentrl.trajectory.testing import PREFIX_PRESERVING_FAMILIES, TEMPLATES, build_tokenizer

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


# -- the direct backend path: the same ids and offsets as transformers' wrapper -------------
BACKEND_TEXT = st.lists(
    st.sampled_from([*"ab xyZ<>|/\n\t.!12ü", "<|im_end|>", "<|im_start|>", "<|eot_id|>", "  "]),
    max_size=20,
).map("".join)
"""Text with special tokens, odd whitespace and non-ASCII, as observations might have."""


@settings(max_examples=40, deadline=None)
@given(family=st.sampled_from(sorted(TEMPLATES)), observation=BACKEND_TEXT, system=BACKEND_TEXT)
def test_backend_path_equals_the_wrapper(family: str, observation: str, system: str) -> None:
    """Encodes and delta ids through the backend equal those through transformers."""
    fast, wrapped = _BRIDGES[family]
    assert fast._plain_backend() is not None and wrapped._plain_backend() is None
    messages = fast.first_messages(system, "Start.") + [
        {"role": "assistant", "content": PLACEHOLDER},
        {"role": "user", "content": observation},
    ]
    text = fast.render_text(messages, add_generation_prompt=True)
    cut = text.rfind(PLACEHOLDER) + len(PLACEHOLDER)
    assert (
        fast.encode(text)
        == wrapped.encode(text)
        == fast.tokenizer.encode(text, add_special_tokens=False)
    )
    assert fast._ids_after(text, cut) == wrapped._ids_after(text, cut)


def test_truncation_left_on_the_backend_is_not_inherited() -> None:
    """Another caller's `truncation=True` stays set on the shared backend; the bridge must
    still see whole texts."""
    bridge = ChatBridge(build_tokenizer("chatml"))
    text = bridge.render_text(bridge.first_messages("You push boxes.", "Start."), True)
    full = bridge.encode(text)
    bridge.tokenizer(["a long enough text for truncation"], truncation=True, max_length=2)
    assert bridge.tokenizer.backend_tokenizer.truncation is not None
    assert bridge._plain_backend() is None
    assert bridge.encode(text) == full
    assert bridge.observation_ids("Sys.", "Start.", "Moved.", sampled_ids=[]) == bridge.encode(
        bridge.render_text(
            bridge.first_messages("Sys.", "Start.")
            + [
                {"role": "assistant", "content": PLACEHOLDER},
                {"role": "user", "content": "Moved."},
            ],
            True,
        ).split(PLACEHOLDER)[1]
    )


def test_a_wrapper_with_its_own_steps_keeps_the_wrapper() -> None:
    """A tokenizer class that changes the text in its wrapper is never bypassed."""
    tok = build_tokenizer("chatml")

    class Lowercasing(type(tok)):  # type: ignore[misc]
        def _encode_plus(self, text, *args, **kwargs):  # type: ignore[no-untyped-def]
            return super()._encode_plus(text.lower(), *args, **kwargs)

    tok.__class__ = Lowercasing
    bridge = ChatBridge(tok)
    assert bridge._plain_backend() is None
    text = "Push The Box<|im_end|>\n"
    assert bridge.encode(text) == tok.encode(text, add_special_tokens=False)
    assert bridge.encode(text) != list(tok.backend_tokenizer.encode(text).ids)


def _bridge_pair(family: str) -> tuple[ChatBridge, ChatBridge]:
    fast, wrapped = ChatBridge(build_tokenizer(family)), ChatBridge(build_tokenizer(family))
    wrapped._backend_checked = False  # always through transformers
    return fast, wrapped


_BRIDGES = {family: _bridge_pair(family) for family in TEMPLATES}
