"""torch's threads chosen from affinity, cgroup quota and load; the slow-step warning."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
import torch

from agentrl.runtime import threads
from agentrl.runtime.threads import (
    CpuBudget,
    SlowStepWatch,
    cgroup_quota,
    choose_threads,
    read_cpu_budget,
    set_torch_threads,
)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _proc(tmp_path: Path, text: str = "0::/\n") -> Path:
    _write(tmp_path / "proc_cgroup", text)
    return tmp_path / "proc_cgroup"


@pytest.mark.parametrize(
    ("cpu_max", "quota"), [("200000 100000\n", 2.0), ("150000 100000", 1.5), ("max 100000", None)]
)
def test_cgroup_v2_quota(tmp_path, cpu_max, quota) -> None:
    _write(tmp_path / "cg" / "cpu.max", cpu_max)
    assert cgroup_quota(tmp_path / "cg", _proc(tmp_path)) == quota


def test_cgroup_v2_takes_the_smallest_quota_on_the_process_path(tmp_path) -> None:
    root = tmp_path / "cg"
    _write(root / "cpu.max", "max 100000")
    _write(root / "user.slice" / "cpu.max", "400000 100000")
    _write(root / "user.slice" / "job" / "cpu.max", "100000 100000")
    assert cgroup_quota(root, _proc(tmp_path, "0::/user.slice/job\n")) == 1.0
    assert cgroup_quota(root, _proc(tmp_path, "0::/user.slice\n")) == 4.0


@pytest.mark.parametrize("folder", ["cpu", "cpu,cpuacct"])
def test_cgroup_v1_quota(tmp_path, folder) -> None:
    root = tmp_path / "cg"
    _write(root / folder / "cpu.cfs_quota_us", "300000\n")
    _write(root / folder / "cpu.cfs_period_us", "100000\n")
    proc = _proc(tmp_path, "4:memory:/x\n2:cpu,cpuacct:/\n0::/\n")
    assert cgroup_quota(root, proc) == 3.0


def test_cgroup_v1_without_a_quota_and_no_cgroup_at_all(tmp_path) -> None:
    root = tmp_path / "cg"
    _write(root / "cpu" / "cpu.cfs_quota_us", "-1\n")
    _write(root / "cpu" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_quota(root, _proc(tmp_path, "1:cpu:/\n")) is None
    assert cgroup_quota(tmp_path / "none", tmp_path / "no_such_file") is None


def test_read_cpu_budget_from_fakes(tmp_path) -> None:
    _write(tmp_path / "cg" / "cpu.max", "150000 100000")
    budget = read_cpu_budget(
        affinity=lambda: {0, 1, 2, 3},
        cgroup_root=tmp_path / "cg",
        proc_cgroup=_proc(tmp_path),
        busy=lambda: 0.25,
        loadavg=lambda: (0.5, 0.4, 0.3),
    )
    assert (budget.num_affinity, budget.quota, budget.load) == (4, 1.5, 0.25)
    assert budget.num_usable == 1  # the quota's whole CPUs
    no_stat = read_cpu_budget(busy=lambda: None, loadavg=lambda: (0.5, 0.4, 0.3))
    assert no_stat.load == 0.5  # the load average where /proc/stat cannot be read


def test_busy_cpus_sees_a_core_kept_busy_now() -> None:
    """A child process spinning on one core counts as about one busy CPU (the machine's
    other work adds to it, so only the lower bound is checked)."""
    import subprocess
    import sys

    from agentrl.runtime.threads import busy_cpus

    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        assert busy_cpus(window=0.5) >= 0.8
    finally:
        spinner.kill()
        spinner.wait()


def _budget(affinity=2, quota=None, machine=2, load=None) -> CpuBudget:
    return CpuBudget(num_affinity=affinity, quota=quota, num_machine=machine, load=load)


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        (_budget(), 2),  # load unknown: the usable CPUs
        (_budget(load=0.2), 2),  # an idle 2-core machine
        (_budget(load=1.1), 1),  # another job on one of the two cores
        (_budget(load=7.8), 1),  # far more work than cores: never below 1
        (_budget(affinity=64, quota=2.0, machine=64, load=30.0), 2),  # a container's quota
        (_budget(affinity=8, machine=8, load=3.0), 5),
        (_budget(affinity=4, quota=0.5, machine=4), 1),
    ],
)
def test_automatic_choice(budget, expected) -> None:
    choice = choose_threads(0, budget, omp=None)
    assert (choice.num_threads, choice.source) == (expected, "auto")


def test_a_requested_count_and_omp_num_threads_win() -> None:
    busy = _budget(load=7.8)
    assert choose_threads(3, busy, omp="1").num_threads == 3
    assert choose_threads(3, busy, omp="1").source == "trainer.num_threads"
    assert choose_threads(0, busy, omp="4").num_threads == 4
    assert choose_threads(0, busy, omp="4").source == "OMP_NUM_THREADS"
    assert choose_threads(0, busy, omp="junk").source == "auto"


def test_the_line_says_why_and_how_to_change_it() -> None:
    choice = choose_threads(0, _budget(quota=2.0, load=1.2), omp=None)
    assert choice.line() == (
        "threads: 1 (2 CPUs usable, cgroup quota 2, 1.2 busy leaves 0.8 idle; "
        "set trainer.num_threads to change)"
    )
    assert choose_threads(0, _budget(), omp="2", key="num_threads").line() == (
        "threads: 2 (2 CPUs usable; from OMP_NUM_THREADS)"
    )
    assert choose_threads(4, _budget(), omp=None).line().endswith("from trainer.num_threads)")


def test_set_torch_threads_chooses_once_and_logs_once(monkeypatch, caplog) -> None:
    monkeypatch.setattr(threads, "_auto", None)
    monkeypatch.setattr(threads, "_last_logged", None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    loads = iter([0.1, 9.0])
    monkeypatch.setattr(
        threads,
        "read_cpu_budget",
        lambda: _budget(load=next(loads)),
    )
    before = torch.get_num_threads()
    try:
        with caplog.at_level(logging.INFO, logger="agentrl.runtime.threads"):
            first = set_torch_threads(0)
            again = set_torch_threads(0, key="num_threads")  # the warm start's, kept
        assert first.num_threads == again.num_threads == torch.get_num_threads() == 2
        assert [r.message for r in caplog.records] == [first.line()]
        assert set_torch_threads(1).num_threads == torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def _watch(load=None, swapped=None, num_threads=2):
    state = {"load": load, "swapped": swapped}
    watch = SlowStepWatch(num_threads=num_threads, read=lambda: (state["load"], state["swapped"]))
    return watch, state


def test_no_warning_before_enough_steps_or_for_steps_near_the_median() -> None:
    watch, _ = _watch()
    assert all(watch.observe(i, 10.0 if i == 1 else 1.0) is None for i in range(1, 6))
    assert watch.observe(6, 2.9) is None


def test_a_slow_step_warns_once_naming_the_load_and_threads(monkeypatch, caplog) -> None:
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    watch, state = _watch(load=0.5)
    for i in range(1, 6):
        watch.observe(i, 1.0)
    state["load"] = 7.5
    with caplog.at_level(logging.WARNING, logger="agentrl.runtime.threads"):
        message = watch.observe(6, 10.0)
        assert watch.observe(7, 20.0) is None  # once
    assert message is not None and caplog.records[0].message == message
    assert message.startswith("step 6 took 10.0 s, 10.0x the median of the 5 steps before")
    assert "other processes use the cores (load 7.5 on 2 CPUs)" in message
    assert "set trainer.num_threads=1" in message


def test_a_slow_step_names_swapping() -> None:
    watch, state = _watch(swapped=100, num_threads=1)
    for i in range(1, 6):
        watch.observe(i, 1.0)
    state["swapped"] = 5100
    message = watch.observe(6, 5.0)
    assert message is not None and "swapping (5000 pages in or out)" in message
    assert "threads" not in message


def test_a_slow_step_with_no_cause_seen_says_so() -> None:
    watch, _ = _watch(load=0.1, swapped=0, num_threads=1)
    for i in range(1, 6):
        watch.observe(i, 1.0)
    message = watch.observe(6, 5.0)
    assert message is not None and "no cause seen" in message


def test_train_prints_the_choice_on_its_first_screen(tmp_path) -> None:
    """Without OMP_NUM_THREADS (which conftest sets), the run chooses and says why."""
    import os
    import re
    import subprocess
    import sys

    here = Path(__file__).resolve().parents[1] / "train"  # trainer_envs
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PYTHONPATH"] = f"{here}{os.pathsep}{env.get('PYTHONPATH', '')}"
    args = [
        "train", "--env", "trainer_envs:VowelCount", "--model", "tiny", "--steps", "1",
        "--run-dir", str(tmp_path / "run"), "--set", "trainer.num_groups=1",
        "--set", "rollout.group_size=2", "--set", "rollout.sampling.max_new_tokens=4",
    ]  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", *args],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if "threads: " in line]
    assert len(lines) == 1, result.stderr
    assert re.search(
        r"threads: \d+ \(\d+ CPUs? usable.*; set trainer.num_threads to change\)", lines[0]
    )
