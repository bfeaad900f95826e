"""Latency of a trivial Python call: warm DockerSandbox pool vs a cold `docker run`.

Prints p50/p95 in ms for each, and executions/s with 2 concurrent callers on the warm pool.
Usage: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sandbox_latency.py [--n 100]
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p95 of `samples`, in milliseconds."""
    qs = statistics.quantiles(samples, n=20)
    return statistics.median(samples) * 1000, qs[18] * 1000


def main() -> None:
    """Run the three measurements and print a small table."""
    from agentrl.sandbox import DockerSandbox
    from agentrl.sandbox.docker import connect

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100, help="warm calls to time")
    parser.add_argument("--cold", type=int, default=10, help="cold docker runs to time")
    parser.add_argument("--image", default="agentrl-sandbox:latest")
    args = parser.parse_args()

    code = "print(1)"
    with DockerSandbox(pool_size=2, image=args.image) as sandbox:
        for _ in range(5):
            sandbox.run(code)
        warm = []
        for _ in range(args.n):
            start = time.perf_counter()
            result = sandbox.run(code)
            warm.append(time.perf_counter() - start)
            assert result.stdout == "1\n", result
        start = time.perf_counter()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda _: sandbox.run(code), range(args.n)))
        throughput = args.n / (time.perf_counter() - start)

    client = connect()
    cold = []
    for _ in range(args.cold):
        start = time.perf_counter()
        client.containers.run(
            args.image,
            ["python3", "-c", code],
            network_mode="none",
            remove=True,
            read_only=True,
            cap_drop=["ALL"],
            user="1000:1000",
        )
        cold.append(time.perf_counter() - start)

    w50, w95 = percentiles(warm)
    c50, c95 = percentiles(cold)
    print(f"{'path':<28}{'p50 ms':>10}{'p95 ms':>10}")
    print(f"{'warm pool (DockerSandbox)':<28}{w50:>10.1f}{w95:>10.1f}")
    print(f"{'cold docker run':<28}{c50:>10.1f}{c95:>10.1f}")
    print(f"warm pool, 2 concurrent callers: {throughput:.1f} executions/s")


if __name__ == "__main__":
    main()
