"""The chat-template bridge: env text to token ids, rendered once, never re-rendered.

The first prompt is the chat template over `system_prompt` + the first observation, with
the generation prompt. After each turn the sampled ids are kept verbatim and the new
observation is appended as the template's *delta*: what the template writes after an
assistant turn for the new messages, plus the next generation prompt. The delta is found by
rendering a conversation whose last assistant turn is a placeholder and taking the text after
the placeholder; token-prefix checks prove the split falls on a token boundary.

Tool envs expose JSON schemas on `env.tools`; they reach the template as `tools=` (the
Qwen2.5/Hermes templates write them into the system turn). A template that ignores `tools`
(plain ChatML, as the `tiny` model has) gets the same Hermes-style tool block appended to
the system message instead, so the model always sees the tools it may call. Tool results
come back as `tool` role messages and are rendered as the template's delta like any other.

Some templates re-render history (Qwen3 drops `<think>...</think>` from earlier assistant
turns). `ChatBridge.prefix_preserving` is False for those, and `EpisodeTokens` then keeps one
`Sample` per turn, each with the full prompt the engine was given.

>>> from agentrl.trajectory.testing import build_tokenizer
>>> bridge = ChatBridge(build_tokenizer("chatml"))
>>> bridge.prefix_preserving, bridge.decode(bridge.end_of_turn_ids)
(True, '<|im_end|>\\n')
>>> bridge.decode(bridge.observation_ids("", "a", "b", sampled_ids=bridge.end_of_turn_ids[:1]))
'\\n<|im_start|>user\\nb<|im_end|>\\n<|im_start|>assistant\\n'
"""

from __future__ import annotations

import bisect
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from agentrl.envs.base import Observation
from agentrl.trajectory.types import Sample

log = logging.getLogger(__name__)

PLACEHOLDER = "AgentrlPlaceholderTurn"
"""Stand-in assistant text used to find where the template's delta starts."""

_PROBE_TURNS: list[tuple[str, str]] = [
    ("<think>\nPlan the move.\n</think>\n\nUp", "The box moved up."),
    ("Left", "A wall blocks the way."),
]
"""Assistant actions and env replies used to test a template for prefix preservation."""

_PROBE_TOOL_TURNS: list[tuple[str, Observation]] = [
    (
        'Let me check.\n<tool_call>\n{"name": "probe", "arguments": {"x": 1}}\n</tool_call>',
        [{"role": "tool", "content": "1"}, {"role": "tool", "content": "2"}],
    ),
    ("<answer>3</answer>", "Episode finished."),
]
"""Extra probe turns when tools are given: a tool call answered by two `tool` messages."""

_PROBE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "probe",
        "description": "A tool used to probe the chat template.",
        "parameters": {
            "type": "object",
            "properties": {"x": {"type": "integer"}},
            "required": ["x"],
        },
    },
}

Tools = Sequence[Mapping[str, Any]]
"""Tool schemas (OpenAI style, `{"type": "function", "function": {...}}`), as `env.tools`."""


def tools_block(tools: Tools) -> str:
    """The Hermes-style tool description for templates that ignore `tools=`.

    It tells the model the signatures and the `<tool_call>` format the tool envs parse.
    """
    lines = "\n".join(json.dumps(dict(t), ensure_ascii=False) for t in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{lines}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


class TemplateError(ValueError):
    """The tokenizer has no usable chat template."""


def to_messages(observation: Observation) -> list[dict[str, str]]:
    """An observation as chat messages: plain text becomes one `user` message."""
    if isinstance(observation, str):
        return [{"role": "user", "content": observation}]
    return [{"role": m["role"], "content": m["content"]} for m in observation]


def _first_messages(
    system_prompt: str, observation: Observation, tools_text: str = ""
) -> list[dict[str, str]]:
    """System message (with `tools_text` appended, for templates that ignore tools) + obs."""
    system = "\n\n".join(part for part in (system_prompt, tools_text) if part)
    head = [{"role": "system", "content": system}] if system else []
    return head + to_messages(observation)


_PROMPT_CACHE_SIZE = 1024
"""First prompts kept by `ChatBridge.prompt_ids` (oldest dropped first)."""


def _observation_key(observation: Observation) -> str:
    if isinstance(observation, str):
        return observation
    return json.dumps([[m["role"], m["content"]] for m in observation])


def _tools_key(tools: Tools | None) -> str:
    return json.dumps([dict(t) for t in tools], sort_keys=True) if tools else ""


class ChatBridge:
    """Turns env observations into token ids through one tokenizer's chat template."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', tokenizer)!r} has no chat "
                "template; set tokenizer.chat_template or use a chat (instruct) model"
            )
        self.tokenizer = tokenizer
        self._prompt_cache: dict[tuple[str, str, str], list[int]] = {}
        self._backend_checked = False
        self._backend_checked = self._backend_matches_wrapper()
        self.end_of_turn_ids: list[int] = self._end_of_turn_ids()
        """Ids the template writes right after an assistant message (e.g. `<|im_end|>\\n`)."""
        eos = tokenizer.eos_token_id
        stops = [self.end_of_turn_ids[0]] if self.end_of_turn_ids else []
        if eos is not None and eos not in stops:
            stops.append(int(eos))
        self.stop_token_ids: tuple[int, ...] = tuple(stops)
        """Ids that end a turn; pass them to the engine as stop ids."""
        self.renders_tools: bool = self._renders_tools()
        """Whether the template writes `tools=` schemas itself; if not, the bridge appends
        `tools_block(tools)` to the system message."""
        self._probes: dict[str, tuple[bool, str | None]] = {}
        self.prefix_preserving, self.probe_error = self.probe()
        """Whether appending deltas reproduces the template's own rendering, and why not
        (for conversations without tools; `probe(tools)` checks a tool conversation)."""

    # -- rendering -------------------------------------------------------------------------
    def render_text(
        self,
        messages: Sequence[dict[str, str]],
        add_generation_prompt: bool,
        tools: Tools | None = None,
    ) -> str:
        """The template's text for `messages` (`tools` go to the template if it renders them)."""
        extra: dict[str, Any] = {}
        if tools and self.renders_tools:
            extra["tools"] = [dict(t) for t in tools]
        return self.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=add_generation_prompt, **extra
        )

    def _renders_tools(self) -> bool:
        messages = [{"role": "user", "content": "x"}]
        try:
            with_tools = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, tools=[_PROBE_TOOL]
            )
        except Exception as e:  # a template that rejects `tools=`: describe them ourselves
            log.debug("chat template rejects tools=: %s", e)
            return False
        return with_tools != self.render_text(messages, add_generation_prompt=True)

    def first_messages(
        self, system_prompt: str, observation: Observation, tools: Tools | None = None
    ) -> list[dict[str, str]]:
        """The first prompt's messages; the tool block is in the system message when the
        template ignores `tools=`."""
        text = tools_block(tools) if tools and not self.renders_tools else ""
        return _first_messages(system_prompt, observation, text)

    def encode(self, text: str) -> list[int]:
        """Ids for template text (special tokens in the text are parsed, none are added)."""
        backend = self._plain_backend()
        if backend is not None:
            return list(backend.encode(text, add_special_tokens=False).ids)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _plain_backend(self) -> Any:
        """The fast tokenizer's `tokenizers.Tokenizer`, when calling it directly gives what
        transformers' wrapper would; else None.

        The wrapper's Python costs about as much as encoding a short text, and the bridge
        encodes one text per turn. The backend is used only if it matched the wrapper on a
        rendered conversation when the bridge was built (`_backend_matches_wrapper`) and has
        no truncation or padding left on it by another caller (the wrapper would reset them).
        """
        if not self._backend_checked:
            return None
        backend = self.tokenizer.backend_tokenizer
        if (
            backend.truncation is not None
            or backend.padding is not None
            or backend.encode_special_tokens
            != bool(getattr(self.tokenizer, "split_special_tokens", False))
        ):
            return None
        return backend

    def _backend_matches_wrapper(self) -> bool:
        """Whether the backend gives the wrapper's ids and offsets on a rendered conversation
        (a tokenizer class may add its own steps to the wrapper)."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None or not getattr(self.tokenizer, "is_fast", False):
            return False
        messages = _first_messages("You solve puzzles.", "Start the puzzle.") + [
            {"role": "assistant", "content": f"{PLACEHOLDER} Up\n"},
            {"role": "user", "content": "The box moved up. 12 steps left!\n\n  Next?"},
        ]
        text = self.render_text(messages, add_generation_prompt=True)
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        direct = backend.encode(text, add_special_tokens=False)  # right after the wrapper
        offsets = [tuple(o) for o in enc["offset_mapping"]]
        return list(enc["input_ids"]) == direct.ids and offsets == direct.offsets

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        """Text of `ids`, for display and for the env; never re-encoded for training."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def prompt_ids(
        self, system_prompt: str, observation: Observation, tools: Tools | None = None
    ) -> list[int]:
        """The first prompt: system prompt (+ tools) + first observation + generation prompt.

        Cached per (system prompt, observation, tools): the episodes of a group share their
        first prompt, which is then rendered and tokenized once."""
        key = (system_prompt, _observation_key(observation), _tools_key(tools))
        ids = self._prompt_cache.get(key)
        if ids is None:
            ids = self.render_ids(self.first_messages(system_prompt, observation, tools), tools)
            if len(self._prompt_cache) >= _PROMPT_CACHE_SIZE:
                self._prompt_cache.pop(next(iter(self._prompt_cache)))  # the oldest entry
            self._prompt_cache[key] = ids
        return list(ids)

    def render_ids(
        self, messages: Sequence[dict[str, str]], tools: Tools | None = None
    ) -> list[int]:
        """A whole conversation with the generation prompt (the per-turn-sample prompt)."""
        return self.encode(self.render_text(messages, add_generation_prompt=True, tools=tools))

    def _suffix_after_placeholder(
        self, messages: list[dict[str, str]], gen: bool, tools: Tools | None = None
    ) -> list[int]:
        text = self.render_text(messages, add_generation_prompt=gen, tools=tools)
        cut = text.rfind(PLACEHOLDER)
        if cut < 0:
            raise TemplateError("the chat template does not render assistant message content")
        cut += len(PLACEHOLDER)
        return self._ids_after(text, cut)

    def _ids_after(self, text: str, cut: int) -> list[int]:
        """The ids of `text[cut:]` as they are in the tokenization of the whole `text`.

        A fast tokenizer encodes `text` once and its character offsets show whether a token
        boundary falls at `cut` (no token straddles it). Slow tokenizers encode the head, the
        tail and the whole text and compare.
        """
        boundary_error = TemplateError(
            "the chat template's text after an assistant message does not start on a "
            f"token boundary (after {PLACEHOLDER!r}: {text[cut : cut + 20]!r})"
        )
        if getattr(self.tokenizer, "is_fast", False):
            backend = self._plain_backend()
            if backend is not None:
                encoding = backend.encode(text, add_special_tokens=False)
                ids, offsets = encoding.ids, encoding.offsets
            else:
                enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
                ids, offsets = list(enc["input_ids"]), enc["offset_mapping"]
            ends = [end for _, end in offsets]
            if len(offsets) == len(ids) and ends == sorted(ends):  # non-decreasing
                split = bisect.bisect_right(ends, cut)  # the first token ending past `cut`
                if split < len(ids) and offsets[split][0] < cut:
                    raise boundary_error
                return ids[split:]
        head, tail = self.encode(text[:cut]), self.encode(text[cut:])
        if self.encode(text) != head + tail:
            raise boundary_error
        return tail

    def _end_of_turn_ids(self) -> list[int]:
        messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": PLACEHOLDER}]
        return self._suffix_after_placeholder(messages, gen=False)

    # -- the delta -------------------------------------------------------------------------
    def observation_ids(
        self,
        system_prompt: str,
        first_observation: Observation,
        observation: Observation,
        *,
        sampled_ids: Sequence[int],
        tools: Tools | None = None,
    ) -> list[int]:
        """Ids to append after a turn's sampled ids: the template's delta for `observation`.

        `observation` may be a list of `tool` messages (Qwen2.5 folds consecutive ones into
        one user turn of `<tool_response>` blocks). If the sampled ids already end with the
        template's end-of-turn id (the engine stopped on it), it is not repeated; if
        generation stopped by length, the end-of-turn ids are part of the returned ids (they
        are prompt ids, never trained on).
        """
        context = self.first_messages(system_prompt, first_observation, tools)
        messages = context + [{"role": "assistant", "content": PLACEHOLDER}]
        after = self._suffix_after_placeholder(
            messages + to_messages(observation), gen=True, tools=tools
        )
        return after[self.covered_by_sampled(sampled_ids, after) :]

    def covered_by_sampled(self, sampled_ids: Sequence[int], after_ids: Sequence[int]) -> int:
        """How many leading end-of-turn ids of `after_ids` the sampled ids already end with."""
        eot = self.end_of_turn_ids
        for k in range(min(len(eot), len(sampled_ids), len(after_ids)), 0, -1):
            if list(sampled_ids[-k:]) == list(after_ids[:k]) == list(eot[:k]):
                return k
        return 0

    # -- prefix-preservation probe ---------------------------------------------------------
    def probe(self, tools: Tools | None = None) -> tuple[bool, str | None]:
        """Whether prompt + actions + deltas equal the template's own full rendering.

        With `tools`, the probe conversation carries the schemas and adds a turn answered by
        two `tool` messages. Results are cached per tool set. Returns (ok, where it differs).
        """
        key = _tools_key(tools)
        if key not in self._probes:
            self._probes[key] = self._probe(tools)
        return self._probes[key]

    def _probe(self, tools: Tools | None) -> tuple[bool, str | None]:
        turns: list[tuple[str, Observation]] = list(_PROBE_TURNS)
        if tools:
            turns += _PROBE_TOOL_TURNS
        for system_prompt in ("You solve puzzles.", ""):
            first_messages = self.first_messages(system_prompt, "Start the puzzle.", tools)
            messages = list(first_messages)
            built = self.render_text(messages, add_generation_prompt=True, tools=tools)
            for action, reply in turns:
                probe = first_messages + [{"role": "assistant", "content": PLACEHOLDER}]
                text = self.render_text(probe + to_messages(reply), True, tools=tools)
                built += action + text[text.rfind(PLACEHOLDER) + len(PLACEHOLDER) :]
                messages = messages + [{"role": "assistant", "content": action}]
                messages = messages + to_messages(reply)
                full = self.render_text(messages, add_generation_prompt=True, tools=tools)
                if full != built:
                    return False, _first_difference(built, full)
        return True, None


def _first_difference(built: str, full: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(built, full, strict=False)) if a != b), None)
    if at is None:
        at = min(len(built), len(full))
    return (
        f"appending deltas gives {built[max(0, at - 15) : at + 25]!r} but the template renders "
        f"{full[max(0, at - 15) : at + 25]!r} (char {at})"
    )


class EpisodeTokens:
    """The growing token record of one episode, built through a `ChatBridge`.

    In single-sequence mode (prefix-preserving template) `prompt_ids` is always the whole
    sequence so far, so each engine request is exactly a prefix of the final sample. In
    per-turn mode each turn gets its own sample: the template's full rendering of the
    conversation so far, then the sampled ids. Per-turn mode is used when the template is not
    prefix-preserving, and when `history_turns` is set: then a prompt renders only the system
    message, the last `history_turns` turns and the new observation.
    """

    def __init__(
        self,
        bridge: ChatBridge,
        system_prompt: str,
        first_observation: Observation,
        tools: Tools | None = None,
        history_turns: int | None = None,
    ):
        self.bridge = bridge
        self.system_prompt = system_prompt
        self.first_observation = first_observation
        self.tools: list[dict[str, Any]] = [dict(t) for t in tools] if tools else []
        """The env's tool schemas, rendered into the first prompt."""
        ok, self.probe_error = bridge.probe(self.tools)
        self.template_ok = ok
        """False when the template is not prefix-preserving for this conversation."""
        self.history_turns = history_turns
        self.per_turn = not ok or history_turns is not None
        self._messages = bridge.first_messages(system_prompt, first_observation, self.tools)
        head = 1 if self._messages and self._messages[0]["role"] == "system" else 0
        self._obs_starts = [head]  # where each observation's messages begin in `_messages`
        self._seq = Sample([], [], [], [])
        self._done: list[Sample] = []
        self._sampled_into_current = False
        first_ids = bridge.prompt_ids(system_prompt, first_observation, self.tools)
        self._append(self._seq, first_ids, turn=-1)

    @staticmethod
    def _append(sample: Sample, ids: Sequence[int], turn: int) -> None:
        sample.token_ids.extend(ids)
        sample.loss_mask.extend([0] * len(ids))
        sample.sampler_logp.extend([0.0] * len(ids))
        sample.turn_ids.extend([turn] * len(ids))

    @property
    def prompt_ids(self) -> list[int]:
        """The ids to send to the engine for the next turn."""
        return list(self._seq.token_ids)

    def add_completion(
        self, token_ids: Sequence[int], logp: Sequence[float], turn: int, *, train: bool = True
    ) -> None:
        """Record sampled ids verbatim (mask 1) with their sampler logprobs.

        `train=False` records them with mask 0: in the conversation, never trained on (the
        random answers of a noisy expert)."""
        if len(token_ids) != len(logp):
            raise ValueError(f"completion has {len(token_ids)} ids but {len(logp)} logprobs")
        self._seq.token_ids.extend(token_ids)
        self._seq.loss_mask.extend([int(train)] * len(token_ids))
        self._seq.sampler_logp.extend(float(x) for x in logp)
        self._seq.turn_ids.extend([turn] * len(token_ids))
        self._sampled_into_current = True
        if self.per_turn:
            text = self.bridge.decode(token_ids, skip_special_tokens=True)
            self._messages.append({"role": "assistant", "content": text})

    def next_ids(self, observation: Observation, sampled_ids: Sequence[int]) -> list[int]:
        """The ids that `add_observation` would add (to check the context budget first)."""
        if self.per_turn:
            return self.bridge.render_ids(self._window(to_messages(observation)), self.tools)
        return self.bridge.observation_ids(
            self.system_prompt,
            self.first_observation,
            observation,
            sampled_ids=sampled_ids,
            tools=self.tools,
        )

    def _window(self, new: list[dict[str, str]]) -> list[dict[str, str]]:
        """The next prompt's messages: everything, or the system message + the last
        `history_turns` turns + the new observation `new`."""
        if self.history_turns is None:
            return self._messages + new
        starts = [*self._obs_starts, len(self._messages)]
        start = starts[max(0, len(starts) - 1 - self.history_turns)]
        return self._messages[: self._obs_starts[0]] + self._messages[start:] + new

    def next_length(self, ids: Sequence[int]) -> int:
        """Length of the next prompt if `ids` (from `next_ids`) are added."""
        return len(ids) if self.per_turn else len(self._seq) + len(ids)

    def add_observation(self, observation: Observation, ids: Sequence[int], turn: int) -> None:
        """Append the observation's ids from `next_ids` (mask 0) and start the next prompt."""
        if self.per_turn:
            self._done.append(self._seq)
            self._obs_starts.append(len(self._messages))
            self._messages.extend(to_messages(observation))
            self._seq = Sample([], [], [], [])
            self._sampled_into_current = False
            turn = -1  # a per-turn sample's prompt is all prompt
        self._append(self._seq, ids, turn)

    def samples(self) -> list[Sample]:
        """The finished samples (the last one includes everything recorded so far)."""
        last = [self._seq] if self._sampled_into_current else []
        return [*self._done, *last]

    def __len__(self) -> int:
        return len(self._seq)
