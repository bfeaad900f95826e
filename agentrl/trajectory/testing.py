"""Local test fixtures: real chat-template families on tiny tokenizers, and a scripted env.

The scripted engine is `agentrl.rollout.testing.ScriptedEngine`.

Nothing here downloads anything. Each tokenizer is a byte-level BPE trained in a few
milliseconds on a small corpus, wrapped in `PreTrainedTokenizerFast` with a chat template
copied in spirit from a real model family:

- `chatml`: plain ChatML (`<|im_start|>role\\n...<|im_end|>\\n`).
- `qwen2.5`: ChatML with Qwen2.5's default system prompt and `tool` messages folded into a
  user turn.
- `llama3`: Llama-3 headers (`<|start_header_id|>role<|end_header_id|>\\n\\n...<|eot_id|>`).
- `smollm2`: ChatML with SmolLM2's default system prompt.
- `qwen3`: Qwen3's template, which drops `<think>...</think>` from assistant turns before
  the last user message, so it is *not* prefix-preserving.

>>> tok = build_tokenizer("llama3")
>>> tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
'<|begin_of_text|><|start_header_id|>user<|end_header_id|>\\n\\nhi<|eot_id|>'
"""

from __future__ import annotations

import functools
import time
from typing import Any

from agentrl.envs.base import Message, Observation, TokenEnv

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

QWEN25_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. "
    "You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first)"
    " or (message.role == 'assistant') %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}"
    "{{- '<|im_start|>user' }}"
    "{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

SMOLLM2_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, "
    "trained by Hugging Face<|im_end|>\\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

QWEN3_TEMPLATE = (
    "{%- set ns = namespace(last_query_index=-1) %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' %}{%- set ns.last_query_index = loop.index0 %}{%- endif %}"
    "{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{%- set content = message.content %}"
    "{%- set reasoning = '' %}"
    "{%- if '</think>' in content %}"
    "{%- set reasoning = content.split('</think>')[0].rstrip('\\n')"
    ".split('<think>')[-1].lstrip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{%- if loop.index0 > ns.last_query_index and reasoning %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning + '\\n</think>\\n\\n'"
    " + content + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

TEMPLATES: dict[str, str] = {
    "chatml": CHATML_TEMPLATE,
    "qwen2.5": QWEN25_TEMPLATE,
    "llama3": LLAMA3_TEMPLATE,
    "smollm2": SMOLLM2_TEMPLATE,
    "qwen3": QWEN3_TEMPLATE,
}
"""Chat templates by family name."""

PREFIX_PRESERVING_FAMILIES = ("chatml", "qwen2.5", "llama3", "smollm2")
"""The families whose templates extend a conversation without re-rendering its history."""

_SPECIAL = {
    "chatml": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "qwen2.5": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "smollm2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "qwen3": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
               "<|end_header_id|>", "<|eot_id|>"],
}  # fmt: skip
_EOS = {"llama3": "<|eot_id|>", "chatml": "<|im_end|>", "qwen2.5": "<|im_end|>",
        "smollm2": "<|im_end|>", "qwen3": "<|im_end|>"}  # fmt: skip

_CORPUS = [
    "You are a helpful assistant. Solve the puzzle step by step.",
    "Push the box onto the target. Reply with <answer>Up</answer> or <answer>Left</answer>.",
    "The number is in [1, 100]. higher lower Correct! Use <answer>N</answer>.",
    '<tool_response> {"result": 42} </tool_response> def f(x): return x * 2',
    "The quick brown fox jumps over the lazy dog 0123456789 ###  ...  \n\n\t",
    "user assistant system tool think reasoning answer observation reward",
]


@functools.cache
def _tokenizer_object(special: tuple[str, ...], vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    return tok


def build_tokenizer(family: str, *, vocab_size: int = 400) -> Any:
    """A `PreTrainedTokenizerFast` with the chat template of `family` (see `TEMPLATES`)."""
    from transformers import PreTrainedTokenizerFast

    if family not in TEMPLATES:
        raise ValueError(f"unknown template family {family!r}; known: {', '.join(TEMPLATES)}")
    special = tuple(_SPECIAL[family])
    tok_obj = _tokenizer_object(special, vocab_size)
    extra: dict[str, str] = {}
    if family == "llama3":
        extra["bos_token"] = "<|begin_of_text|>"
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tok_obj.__class__.from_str(tok_obj.to_str()),
        eos_token=_EOS[family],
        pad_token=special[0] if family != "llama3" else "<|end_of_text|>",
        chat_template=TEMPLATES[family],
        **extra,
    )
    if family == "qwen3":
        tok.add_tokens(["<think>", "</think>"])
    return tok


def plain_vocab_ids(tokenizer: Any) -> list[int]:
    """Ids of `tokenizer` that are not special or added tokens."""
    added = set(tokenizer.get_added_vocab().values())
    return [i for i in range(len(tokenizer)) if i not in added]


_WORDS = ["box", "wall", "target", "up", "down", "left", "right", "moved", "blocked", "score"]


class ScriptedEnv(TokenEnv):
    """A test env: it ends with success after a seed-drawn number of steps.

    Observations are a few random words (sometimes as a list of two chat messages), so the
    bridge sees varied deltas. `latency_s` draws a sleep per step from a uniform range (to
    model slow envs), `fail_on_step` raises on that step (1-based), and every third action
    of odd length is reported `valid: False`.
    """

    system_prompt = "Play the scripted game. Reply with one word."
    max_turns = 6

    def __init__(
        self,
        *,
        latency_s: tuple[float, float] = (0.0, 0.0),
        fail_on_step: int | None = None,
        min_steps: int = 1,
        max_steps: int = 6,
        system_prompt: str | None = None,
    ) -> None:
        super().__init__()
        self.latency_s = latency_s
        self.fail_on_step = fail_on_step
        self.min_steps, self.max_steps = min_steps, max_steps
        if system_prompt is not None:
            self.system_prompt = system_prompt  # type: ignore[misc]

    def _words(self) -> str:
        n = int(self.np_random.integers(1, 5))
        return " ".join(_WORDS[int(i)] for i in self.np_random.integers(0, len(_WORDS), n))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Draw how many steps this episode takes to solve."""
        super().reset(seed=seed)
        self.steps = 0
        self.solve_at = int(self.np_random.integers(self.min_steps, self.max_steps + 1))
        return f"Start: {self._words()}", {}

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Count the step, sleep, maybe fail; succeed at the drawn step."""
        self.require_reset()
        self.steps += 1
        lo, hi = self.latency_s
        if hi > 0:
            time.sleep(float(self.np_random.uniform(lo, hi)))
        if self.fail_on_step is not None and self.steps == self.fail_on_step:
            raise RuntimeError(f"scripted env failure on step {self.steps}")
        info: dict[str, Any] = {"valid": not (self.steps % 3 == 0 and len(action) % 2 == 1)}
        if self.steps >= self.solve_at:
            return "Solved.", 1.0, True, False, {**info, "success": True}
        obs: Observation = self._words()
        if self.np_random.random() < 0.3:
            obs = [Message(role="user", content=obs), Message(role="user", content="Next?")]
        return obs, 0.0, False, False, info
