"""Gradings per second of the math grader on typical answers.

Run: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/math_grading.py [--seconds 3] [--workers 1]`

Three mixes: plain numbers (the in-process fast path), symbolic answers (math-verify in the
worker pool), and a realistic mix of whole responses graded by `MathEnv.step`
(80% numbers, 20% symbolic; half of them wrong).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

NUMERIC = [
    ("42", "42"),
    ("0.5", "\\frac{1}{2}"),
    ("x = -3", "-3"),
    ("1,000", "1000"),
    ("17/4", "4.25"),
    ("50\\%", "0.5"),
    ("13", "12"),
    ("\\frac{3}{7}", "3/7"),
]
SYMBOLIC = [
    ("\\sqrt{2}/2", "\\frac{1}{\\sqrt{2}}"),
    ("2\\sqrt{3}", "\\sqrt{12}"),
    ("(1, 2]", "(1,2]"),
    ("\\{1, 2\\}", "\\{2, 1\\}"),
    ("x^2 + 2x + 1", "(x+1)^2"),
    ("\\frac{\\pi}{3}", "\\pi/3"),
    ("3\\sqrt{2}", "\\sqrt{2}"),
    ("5 \\text{ cm}", "5"),
]


def rate(fn: Callable[[int], object], seconds: float, threads: int = 1) -> float:
    """Calls of `fn(i)` per second over about `seconds` (with `threads` concurrent callers)."""
    done = 0
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        while time.perf_counter() - start < seconds:
            list(pool.map(fn, range(done, done + 8 * threads)))
            done += 8 * threads
    return done / (time.perf_counter() - start)


def main() -> None:
    """Print gradings/s for each mix."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    parser.add_argument("--workers", type=int, default=1, help="grading worker processes")
    args = parser.parse_args()

    from agentrl.envs import make
    from agentrl.envs.math import Grader, GradingConfig

    grader = Grader(GradingConfig(num_workers=args.workers))
    t0 = time.perf_counter()
    grader.grade(*SYMBOLIC[0])  # start the worker pool
    print(f"worker pool start (math-verify import): {time.perf_counter() - t0:.2f} s")

    numeric = rate(lambda i: grader.grade(*NUMERIC[i % len(NUMERIC)]), args.seconds)
    print(f"plain numbers (fast path):      {numeric:10.0f} gradings/s")
    symbolic = rate(
        lambda i: grader.grade(*SYMBOLIC[i % len(SYMBOLIC)]), args.seconds, threads=args.workers
    )
    print(f"symbolic (math-verify, {args.workers} proc): {symbolic:10.1f} gradings/s")

    distinct = rate(
        lambda i: grader.grade(f"{i}\\sqrt{{2}}/2", f"\\frac{{{i}}}{{\\sqrt{{2}}}}"),
        args.seconds,
        threads=args.workers,
    )
    print(f"symbolic, all distinct (no cache): {distinct:7.1f} gradings/s")

    env = make("math", grading={"num_workers": args.workers})
    env.reset(seed=0)
    responses = [
        f"Let me think step by step... so the answer is \\boxed{{{a}}}." for a, _ in NUMERIC
    ]
    mix = [(r, ref) for r, (_, ref) in zip(responses, NUMERIC, strict=True)] * 4 + [
        (f"...thus \\boxed{{{a}}}", ref) for a, ref in SYMBOLIC[:8]
    ]

    def whole(i: int) -> object:
        text, ref = mix[i % len(mix)]
        env.problem = env.problem.__class__("q", ref)  # type: ignore[attr-defined]
        env.done = False  # type: ignore[attr-defined]
        return env.step(text)

    print(f"env.step, 80/20 mix:            {rate(whole, args.seconds):10.1f} steps/s")


if __name__ == "__main__":
    main()
