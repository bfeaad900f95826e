"""Builds the `tiny` model: a small random Qwen2 and a locally trained byte-level BPE tokenizer.

Everything here is deterministic: the corpus is fixed text, BPE training runs on one thread,
and the weights come from a fixed torch seed, so every build writes the same files.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

TINY_VERSION = 4
"""Bump when the tiny model's files change; the cache folder is `tiny-v<version>`."""

TINY_SEED = 1234
"""Seed for the tiny model's random weights."""

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""ChatML, as Qwen2.5 writes it (without the default system prompt)."""

_SOKOBAN_ROWS = (
    "######",
    "#_P__#",
    "#_X__#",
    "#__O_#",
    "#____#",
    "######",
    "#P_X_O#",
    "#__√__#",
)

_WORDS = """
You are solving the Sokoban puzzle. You are the player P. Push every box X onto a target O.
A box on a target is shown as √, the player on a target as S, walls as # and empty floor as _.
Valid actions are Up, Down, Left and Right. Answer with <answer>Up || Left</answer>.
Think step by step inside <think> ... </think>, then give the final answer.
The box is now on the target. Invalid action. You pushed the box into a wall. Try again.
Solve the math problem. Put the final answer in \\boxed{} or <answer>42</answer>.
What is 12 + 35? What is 7 * 8? Compute 144 / 12 - 3. If x + 5 = 17, what is x?
A train travels 60 miles per hour for 2.5 hours. How far does it travel? The answer is 150.
Natalia sold clips to 48 of her friends in April, and then she sold half as many in May.
Write a Python function that returns the sum of a list. Read the input from stdin.
def solve(nums: list[int]) -> int:
    total = 0
    for x in nums:
        if x % 2 == 0:
            total += x
    return total

import sys
def main():
    data = sys.stdin.read().split()
    n = int(data[0])
    print(sum(int(v) for v in data[1:n + 1]))

if __name__ == "__main__":
    main()
```python
print("hello world")
```
Tool call: {"name": "search", "arguments": {"query": "weather"}}. The tool returned a result.
Guess my number. Reply with <answer>N</answer>. higher lower Correct! The number is in [1, 100].
user assistant system tool Observation: Reward: Turn Step Success Failed Error Traceback
The quick brown fox jumps over the lazy dog. Yes no maybe true false None return
"""


_COMMON = """
the of and to in is that for it as with was on be at by this had not are but from or have an
they which one you were her all she there would their we him been has when who will more no if
out so said what up its about into than them can only other new some could time these two may
then do first any my now such like our over man me even most made after also did many before
must through back years where much your way well down should because each just those people how
too little state good very make world still own see men work long get here between both life
being under never day same another know while last might us great old year off come since against
go came right used take three number value list string count total result return print input
output file line word letter move push pull left right up down wall box target player goal puzzle
grid row column cell position state action reward episode step turn policy model agent train test
problem answer question solution compute add subtract multiply divide sum product difference equal
greater less integer float even odd prime square root minute hour mile dollar apple orange friend
"""

_CODE = """
class Solution: def __init__(self): self.items = [] while True: break continue elif else try
except ValueError as e: raise finally: with open(path) as f: yield lambda x: x + 1 assert len(a)
from collections import defaultdict, Counter import math import re import json
result = [x * x for x in range(10) if x % 3 == 0] d = {"key": "value"} s.split(",") s.strip()
for i, (a, b) in enumerate(zip(xs, ys)): dp[i][j] = max(dp[i - 1][j], dp[i][j - 1]) + grid[i][j]
"""


def corpus() -> list[str]:
    """The fixed training text for the tiny tokenizer: env prompts, math, code, grids."""
    lines = [line for line in _WORDS.splitlines() if line.strip()]
    lines += [" ".join(_SOKOBAN_ROWS), "\n".join(_SOKOBAN_ROWS)]
    words = _COMMON.split()
    lines += [" ".join(words[i : i + 12]) for i in range(0, len(words), 5)]
    lines += [w.capitalize() + "." for w in words] + [line for line in _CODE.splitlines() if line]
    lines += [" ".join(str(n) for n in range(k, 1000, 37)) for k in range(37)]
    lines += [f"{a} + {b} = {a + b}" for a in range(0, 100, 7) for b in range(0, 100, 11)]
    lines += [f"{a} * {b} = {a * b}" for a in range(2, 13) for b in range(2, 13)]
    lines += [f"<answer>{i}</answer> \\boxed{{{i}}}" for i in range(0, 200, 3)]
    for special in SPECIAL_TOKENS:
        lines.append(f"{special}user\nhello{special}\n{special}assistant\n")
    # Repeat so common pieces have enough counts to merge.
    return lines * 3


_INIT_LOCK = threading.Lock()

GRID_CHARS = "#_OXPS√"
"""Cell symbols of the text grid envs (Sokoban, FrozenLake-style maps)."""


def _byte_decoder() -> dict[str, int]:
    """The inverse of byte-level BPE's byte -> printable character map."""
    from tokenizers import pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    # ByteLevel maps bytes 33-126, 161-172, 174-255 to themselves, the rest to 256+.
    kept = [*range(33, 127), *range(161, 173), *range(174, 256)]
    moved = [b for b in range(256) if b not in kept]
    table = {chr(b): b for b in kept} | {chr(256 + i): b for i, b in enumerate(moved)}
    assert set(table) == set(alphabet)
    return table


def _without_grid_merges(tokenizer_json: str) -> str:
    """Drop every BPE merge whose result is two or more grid symbols (`GRID_CHARS`).

    Then a text grid is one token per cell under any pre-tokenizer, including the one
    transformers' `Qwen2Tokenizer` installs when it loads the folder, so a model can read rows
    and columns by position. The vocabulary (and so every id) stays as trained.
    """
    import json

    data = json.loads(tokenizer_json)
    decode = _byte_decoder()

    def grid_only(token: str) -> bool:
        try:
            text = bytes(decode[c] for c in token).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            return False
        return len(text) > 1 and all(c in GRID_CHARS for c in text)

    merges = data["model"]["merges"]
    pairs = [m.split(" ") if isinstance(m, str) else m for m in merges]
    data["model"]["merges"] = [
        m for m, (a, b) in zip(merges, pairs, strict=True) if not grid_only(a + b)
    ]
    return json.dumps(data)


def build_tokenizer(dest: Path) -> None:
    """Train the byte-level BPE ChatML tokenizer on `corpus()` and save it to `dest`."""
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # single-threaded BPE training: same merges
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=2048,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok = Tokenizer.from_str(_without_grid_merges(tok.to_str()))
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    hf_tok.chat_template = CHATML_TEMPLATE
    hf_tok.model_max_length = 4096
    hf_tok.save_pretrained(dest)


def build_qwen2(
    dest: Path,
    *,
    hidden_size: int,
    intermediate_size: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    initializer_range: float = 0.02,
    seed: int = TINY_SEED,
) -> None:
    """Write a random-weight Qwen2 (config, safetensors, generation config) with the locally
    trained ChatML tokenizer to `dest`. Deterministic: same arguments, same files."""
    import torch
    from transformers import (
        GenerationConfig,
        PreTrainedTokenizerFast,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    build_tokenizer(dest)
    tok = PreTrainedTokenizerFast.from_pretrained(dest)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=4096,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        initializer_range=initializer_range,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        dtype="float32",
    )
    with _INIT_LOCK:  # torch's global RNG: concurrent builds in one process must not interleave
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config).eval()
    model.generation_config = GenerationConfig(
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, do_sample=True
    )
    model.save_pretrained(dest)


def build_tiny(dest: Path) -> None:
    """Write the `tiny` model: hidden 128, 4 layers (~1 M weights + a 2,048-id vocabulary).

    Small enough for tests and CPU smoke runs, big enough to learn 6x6 Sokoban from the
    solver's episodes (`agentrl train --env sokoban`'s warm start).
    """
    build_qwen2(
        dest,
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,  # head_dim 32: the smallest the vLLM CPU backend supports
        num_key_value_heads=2,
    )
