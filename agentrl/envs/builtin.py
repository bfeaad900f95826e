"""Registers the envs that ship with agentrl; `agentrl/envs/__init__.py` imports it once."""

from agentrl.envs.registry import register

# Each built-in env module registers lazily by string, so listing envs imports nothing heavy.

register(
    "guess-number",
    "agentrl.envs.guess_number:GuessNumber",
    source="agentrl",
    summary="Find a hidden integer in 1..100; the env answers higher or lower.",
)
register(
    "sokoban",
    "agentrl.envs.sokoban.env:SokobanEnv",
    source="agentrl",
    summary="Sokoban 6x6, 1 box, 10 actions in up to 5 turns (RAGEN setting).",
)
register(
    "sokoban-8x8-2box",
    "agentrl.envs.sokoban.env:SokobanEnv",
    source="agentrl",
    summary="Sokoban 8x8, 2 boxes, 20 actions in up to 5 turns.",
    room_size=8,
    num_boxes=2,
    max_actions=20,
)
register(
    "sokoban-10x10-3box",
    "agentrl.envs.sokoban.env:SokobanEnv",
    source="agentrl",
    summary="Sokoban 10x10, 3 boxes, 30 actions in up to 8 turns (large room).",
    room_size=10,
    num_boxes=3,
    max_actions=30,
    max_turns=8,
    max_actions_per_turn=5,
)
register(
    "sokoban-ragen-6x6",
    "agentrl.envs.sokoban.env:SokobanEnv",
    source="agentrl",
    summary="RAGEN's 512 reference 6x6/1-box rooms (seed k = RAGEN's seed k).",
    rooms_file="ragen",
    rooms_set="6x6_1box",
)
register(
    "code",
    "agentrl.envs.code.env:CodeEnv",
    source="agentrl",
    requires=("docker",),
    summary="Python problems with hidden unit tests, run in the Docker sandbox; revise on failure.",
)
register(
    "tool-calc",
    "agentrl.envs.tool.env:CalculatorEnv",
    source="agentrl",
    summary="Large-number arithmetic with a calculator tool (Hermes/Qwen2.5 tool calls).",
)
register(
    "tool-python",
    "agentrl.envs.tool.env:PythonToolEnv",
    source="agentrl",
    requires=("docker",),
    requires_unless={"tool": False},  # the no-tool control runs no code
    summary="Counting, products, range sums (tasks=[...]) with a sandboxed Python tool (Hermes/Qwen2.5 tool calls).",
)
register(
    "math",
    "agentrl.envs.math.env:MathEnv",
    source="agentrl",
    summary="Verifiable math: data_path=FILE or generator=arithmetic|linear|countdown; \\boxed{} answers.",
)
register(
    "math-arithmetic",
    "agentrl.envs.math.env:MathEnv",
    source="agentrl",
    summary="Generated arithmetic, difficulty 1-5 (exact answers, fractions at 4+).",
    generator="arithmetic",
)
register(
    "math-linear",
    "agentrl.envs.math.env:MathEnv",
    source="agentrl",
    summary="Generated linear equations in x, difficulty 1-5.",
    generator="linear",
)
register(
    "math-multiturn",
    "agentrl.envs.math.env:MathEnv",
    source="agentrl",
    summary="Generated arithmetic with feedback and up to 3 attempts (discounted reward).",
    generator="arithmetic",
    multi_turn=True,
)
register(
    "countdown",
    "agentrl.envs.math.env:MathEnv",
    source="agentrl",
    summary="Reach a target with given numbers (+-*/, each at most once); <answer>expr</answer>.",
    generator="countdown",
    answer_format="answer_tag",
)
register(
    "math-tool",
    "agentrl.envs.math.env:MathEnv",
    source="agentrl",
    requires=("docker",),
    summary="Generated arithmetic (level 3) with a sandboxed Python tool before the boxed answer.",
    generator="arithmetic",
    difficulty=3,
    tools=True,
)
