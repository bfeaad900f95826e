"""Shared test fixtures."""

from __future__ import annotations

import importlib.util
import os
import signal
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

# A test run started in the background by a shell (`cmd &` without job control) inherits
# SIGINT ignored, and so would every process a test starts. The tests that press Ctrl-C on a
# child need what a terminal's foreground job has: SIGINT at its default (a handler here is
# reset to the default in children).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def require_part(part: str, why: str | None, switch: str) -> None:
    """Skip when an optional system part is missing (`why` says how to install or start it);
    fail instead where CI requires it (`CI` or the `switch` variable set), so CI skips none."""
    if why is None:
        return
    if os.environ.get("CI") or os.environ.get(switch):
        pytest.fail(f"{part} is required here ({switch} or CI is set): {why}")
    pytest.skip(f"needs {part}: {why} (set {switch}=1 to fail instead of skipping)")


@pytest.fixture(scope="session")
def load_benchmark() -> Callable[[str], ModuleType]:
    """`load_benchmark("name")` imports `benchmarks/name.py` (not a package) as a module."""

    def load(name: str) -> ModuleType:
        path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"_benchmark_{name}", path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="session")
def require_docker() -> None:
    """A Docker daemon and the sandbox image (`AGENTRL_REQUIRE_DOCKER=1` in CI)."""
    from agentrl.sandbox.docker import unavailable_reason

    require_part("Docker", unavailable_reason(), "AGENTRL_REQUIRE_DOCKER")


@pytest.fixture(scope="session")
def require_bwrap() -> None:
    """A working bubblewrap for `LocalSandbox` (`AGENTRL_REQUIRE_BWRAP=1` in CI)."""
    from agentrl.sandbox.local import unavailable_reason

    require_part("bubblewrap", unavailable_reason(), "AGENTRL_REQUIRE_BWRAP")


@pytest.fixture(scope="session")
def require_chromium() -> str:
    """The path of a headless-capable Chromium (`AGENTRL_REQUIRE_CHROMIUM=1` in CI)."""
    from agentrl.trajectory._browser import find_chromium, unavailable_reason

    require_part("Chromium", unavailable_reason(), "AGENTRL_REQUIRE_CHROMIUM")
    return str(find_chromium())


@pytest.fixture(scope="module")
def ray_local():
    """Ray on loopback with 2 CPUs for one test module; engines and actors join it."""
    ray = pytest.importorskip("ray")
    ray.init(
        num_cpus=2,
        num_gpus=0,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
        log_to_driver=False,
    )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """Local folder of the built-in `tiny` model (random Qwen2 + ChatML tokenizer), built once."""
    from agentrl.rollout.models import resolve_model

    return resolve_model("tiny")
