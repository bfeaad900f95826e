"""The bridge with tools: `tools=` schemas in the first prompt, `tool` messages as deltas.

`QWEN25_TOOLS_TEMPLATE` is written here after Qwen2.5-Instruct's template (tools in the system
turn, assistant `tool_calls`, consecutive `tool` messages folded into one user turn of
`<tool_response>` blocks). Every check compares the bridge's ids with the template's own
rendering of the whole conversation, token for token.
"""

from __future__ import annotations

import pytest

from agentrl.envs import make
from agentrl.rollout._engine_tiny import CHATML_TEMPLATE as TINY_CHATML_TEMPLATE
from agentrl.trajectory.bridge import ChatBridge, EpisodeTokens, tools_block
from agentrl.trajectory.testing import build_tokenizer

QWEN25_TOOLS_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}"
    "{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.'"
    " + '\\n\\nYou are provided with function signatures within <tools></tools> XML tags:"
    "\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and'"
    " + ' arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n'"
    ' + \'{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call>\''
    " + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. "
    "You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first)"
    " or (message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' }}{{- tool_call.name }}'
    "{{- '\", \"arguments\": ' }}{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}"
    "{{- '<|im_start|>user' }}"
    "{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""A Qwen2.5-style tool-calling chat template (Hermes `<tool_call>` format)."""

# A template that is prefix-preserving for user turns but marks the *latest* tool result,
# so a tool message renders differently once the conversation moves on.
LATEST_TOOL_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'tool' %}"
    "{{- '<|im_start|>tool\\n' + message.content }}"
    "{%- if loop.last %}{{- ' (latest)' }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def tokenizer(name: str):
    """Local tokenizers: the Qwen2.5 tool template, the tiny model's ChatML, and others."""
    templates = {
        "qwen2.5-tools": QWEN25_TOOLS_TEMPLATE,
        "tiny-chatml": TINY_CHATML_TEMPLATE,
        "latest-tool": LATEST_TOOL_TEMPLATE,
    }
    if name in templates:
        tok = build_tokenizer("qwen2.5")
        tok.chat_template = templates[name]
        return tok
    return build_tokenizer(name)


TOOLS = make("tool-calc").tools
CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "12 * 7"}}\n</tool_call>'
CONVERSATION = [
    ("Let me compute it.\n" + CALL, [{"role": "tool", "content": "84"}]),
    (
        CALL + "\n" + CALL.replace("12 * 7", "84 - 1"),
        [{"role": "tool", "content": "84"}, {"role": "tool", "content": "83"}],
    ),
    ("<answer>83</answer>", "Episode finished."),
]
"""(action, observation) turns: one tool result, two tool results, a plain user message."""


def test_tool_aware_and_tool_blind_templates_are_told_apart() -> None:
    assert ChatBridge(tokenizer("qwen2.5-tools")).renders_tools
    for name in ("tiny-chatml", "chatml", "llama3"):
        assert not ChatBridge(tokenizer(name)).renders_tools, name


def test_first_prompt_renders_tools_through_the_template() -> None:
    tok = tokenizer("qwen2.5-tools")
    bridge = ChatBridge(tok)
    messages = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "What is 12 * 7?"},
    ]
    expected = tok.apply_chat_template(
        messages, tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    ids = bridge.prompt_ids("Use tools.", "What is 12 * 7?", TOOLS)
    assert ids == tok.encode(expected, add_special_tokens=False)
    text = bridge.decode(ids)
    assert "<tools>" in text and '"name": "calculate"' in text and "Use tools." in text
    assert text.count("# Tools") == 1  # the bridge adds no second copy of the tools


@pytest.mark.parametrize("name", ["tiny-chatml", "llama3"])
def test_tool_blind_template_gets_the_tools_in_the_system_message(name: str) -> None:
    tok = tokenizer(name)
    bridge = ChatBridge(tok)
    for system_prompt in ("Use tools.", ""):
        text = bridge.decode(bridge.prompt_ids(system_prompt, "What is 12 * 7?", TOOLS))
        assert tools_block(TOOLS) in text
        assert '"name": "calculate"' in text and "<tool_call>" in text
        assert text.count("# Tools") == 1
    # without tools nothing is added
    assert "# Tools" not in bridge.decode(bridge.prompt_ids("Use tools.", "hi"))


def _full_conversation(system_prompt: str, first: str, bridge: ChatBridge) -> list[dict]:
    if bridge.renders_tools:
        return ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
            {"role": "user", "content": first}
        ]
    system = "\n\n".join(p for p in (system_prompt, tools_block(TOOLS)) if p)
    return [{"role": "system", "content": system}, {"role": "user", "content": first}]


@pytest.mark.parametrize("name", ["qwen2.5-tools", "tiny-chatml", "chatml", "llama3"])
@pytest.mark.parametrize("system_prompt", ["Use the calculator.", ""])
def test_tool_episode_equals_the_templates_own_rendering(name: str, system_prompt: str) -> None:
    """Prompt + tool-call actions + tool-message deltas == the full rendering, at every turn."""
    tok = tokenizer(name)
    bridge = ChatBridge(tok)
    first = "What is 12 * 7 - 1?"
    episode = EpisodeTokens(bridge, system_prompt, first, tools=TOOLS)
    assert not episode.per_turn, episode.probe_error
    messages = _full_conversation(system_prompt, first, bridge)
    tools = TOOLS if bridge.renders_tools else None
    num_sampled = 0
    for t, (action, observation) in enumerate(CONVERSATION):
        expected = tok.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=True
        )
        assert episode.prompt_ids == tok.encode(expected, add_special_tokens=False), t
        sampled = tok.encode(action, add_special_tokens=False) + [bridge.stop_token_ids[0]]
        num_sampled += len(sampled)
        episode.add_completion(sampled, [-1.0] * len(sampled), t)
        messages.append({"role": "assistant", "content": action})
        messages.extend(
            [{"role": "user", "content": observation}]
            if isinstance(observation, str)
            else observation
        )
        episode.add_observation(observation, episode.next_ids(observation, sampled), t)
    full = tok.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True
    )
    (sample,) = episode.samples()
    assert sample.token_ids == tok.encode(full, add_special_tokens=False)
    assert sum(sample.loss_mask) == num_sampled


def test_consecutive_tool_messages_fold_into_one_user_turn() -> None:
    bridge = ChatBridge(tokenizer("qwen2.5-tools"))
    obs = [{"role": "tool", "content": "84"}, {"role": "tool", "content": "83"}]
    ids = bridge.observation_ids("", "go", obs, sampled_ids=bridge.end_of_turn_ids[:1], tools=TOOLS)
    assert bridge.decode(ids) == (
        "\n<|im_start|>user\n<tool_response>\n84\n</tool_response>\n<tool_response>\n83\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_template_that_rerenders_tool_results_falls_back_to_per_turn_samples() -> None:
    tok = tokenizer("latest-tool")
    bridge = ChatBridge(tok)
    assert bridge.prefix_preserving  # fine for user turns ...
    ok, why = bridge.probe(TOOLS)
    assert not ok and "(latest)" in (why or "")  # ... but not with tool results
    episode = EpisodeTokens(bridge, "sys", "go", tools=TOOLS)
    assert episode.per_turn
    action, observation = CONVERSATION[0]
    sampled = tok.encode(action, add_special_tokens=False) + [bridge.stop_token_ids[0]]
    episode.add_completion(sampled, [-1.0] * len(sampled), 0)
    episode.add_observation(observation, episode.next_ids(observation, sampled), 0)
    messages = bridge.first_messages("sys", "go", TOOLS)
    messages += [{"role": "assistant", "content": action}, *observation]
    expected = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert episode.prompt_ids == tok.encode(expected, add_special_tokens=False)
    assert "(latest)" in bridge.decode(episode.prompt_ids)
