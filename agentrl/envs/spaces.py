"""Gymnasium spaces for text envs: `AnyText` (any str) and `TextOrMessages` (a str or chat messages).

Gymnasium's `spaces.Text` holds only the characters of its charset, letters and digits by
default, while an env's observations and a model's actions hold any character: spaces,
newlines, `#`, `<`, emoji. These spaces contain what `TokenEnv`s really return and accept, so
Gymnasium's own `check_env` and `gymnasium.make`'s passive checker pass.

>>> space = AnyText()
>>> "#####\\n#P_O#  <answer>Up</answer> 🚀" in space
True
>>> 7 in space
False
>>> messages = TextOrMessages()
>>> [{"role": "tool", "content": "42"}] in messages and "plain text" in messages
True
>>> [{"role": "assistant", "content": "42"}] in messages
False
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium import spaces

MAX_TEXT_CHARS = 1_000_000
"""The longest observation or action text the spaces contain."""

SAMPLE_CHARS = string.printable + "äß→↑上🚀"
"""The characters `sample` draws from: printable ASCII (with whitespace) and a few others."""

MESSAGE_ROLES = ("user", "tool")
"""The roles of the messages an env may return."""

MESSAGE_KEYS = frozenset({"role", "content", "name", "tool_call_id"})
"""The keys a message may hold (`role` and `content` are required)."""


class AnyText(spaces.Text):
    """Every str of `min_length` to `max_length` characters, whatever the characters.

    `sample` draws at most `max_sample_length` characters from `SAMPLE_CHARS`, so a random
    action is short, as a model's answer is.
    """

    def __init__(
        self,
        max_length: int = MAX_TEXT_CHARS,
        *,
        min_length: int = 0,
        max_sample_length: int = 64,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        super().__init__(max_length, min_length=min_length, charset=SAMPLE_CHARS, seed=seed)
        self.max_sample_length = max_sample_length

    def contains(self, x: Any) -> bool:
        """True for every str of an allowed length."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random str of `min_length` to `max_sample_length` characters (a `mask` or
        `probability` works as for `spaces.Text`, over `SAMPLE_CHARS`)."""
        if mask is None and probability is None:
            longest = max(self.min_length, min(self.max_length, self.max_sample_length))
            length = int(self.np_random.integers(self.min_length, longest + 1))
            return super().sample(mask=(length, None))
        return super().sample(mask=mask, probability=probability)

    @property
    def is_np_flattenable(self) -> bool:
        """False: a str of any characters has no fixed-size array form."""
        return False

    def __repr__(self) -> str:
        return f"AnyText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object, /) -> bool:
        return (
            isinstance(other, AnyText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    def __hash__(self) -> int:
        return hash((AnyText, self.min_length, self.max_length))


def is_message(m: Any) -> bool:
    """True for a dict with a `role` in `MESSAGE_ROLES`, a str `content` and no other keys
    than `MESSAGE_KEYS`."""
    return (
        isinstance(m, dict)
        and not set(m) - MESSAGE_KEYS
        and m.get("role") in MESSAGE_ROLES
        and isinstance(m.get("content"), str)
    )


class TextOrMessages(spaces.Space[Any]):
    """A str (a user message), or a non-empty list of chat messages (`{"role", "content"}`,
    role `user` or `tool`): the observations of an env that answers tool calls.
    """

    def __init__(
        self, max_length: int = MAX_TEXT_CHARS, *, seed: int | np.random.Generator | None = None
    ) -> None:
        self.text = AnyText(max_length)
        super().__init__(shape=None, dtype=None, seed=seed)

    def contains(self, x: Any) -> bool:
        """True for a str of at most `max_length` characters or a non-empty list of messages
        whose contents are."""
        if isinstance(x, str):
            return x in self.text
        return (
            isinstance(x, list)
            and len(x) > 0
            and all(is_message(m) and m["content"] in self.text for m in x)
        )

    def sample(self, mask: Any = None, probability: Any = None) -> str | list[dict[str, str]]:
        """A random str, or a list of one to three random messages. A `mask` or `probability`
        constrains the text as for `AnyText`, and the sample is then a str."""
        self.text.seed(int(self.np_random.integers(2**31)))
        if mask is not None or probability is not None:
            return self.text.sample(mask=mask, probability=probability)
        if self.np_random.random() < 0.5:
            return self.text.sample()
        num = int(self.np_random.integers(1, 4))
        roles = self.np_random.choice(MESSAGE_ROLES, size=num)
        return [{"role": str(role), "content": self.text.sample()} for role in roles]

    @property
    def is_np_flattenable(self) -> bool:
        """False: text and message lists have no fixed-size array form."""
        return False

    def __repr__(self) -> str:
        return f"TextOrMessages({self.text.max_length})"

    def __eq__(self, other: object, /) -> bool:
        return isinstance(other, TextOrMessages) and self.text == other.text

    def __hash__(self) -> int:
        return hash((TextOrMessages, self.text.max_length))
