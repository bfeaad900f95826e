"""torch's CPU threads, chosen from the cores this process may really use; slow steps named.

torch starts one intra-op thread per core it sees. On a machine whose cores other processes
also use, those threads wait on each other: a step of the Sokoban warm start's SFT took
15.6 and 18.7 s with 2 threads, 1.0 and 2.0 s with 1, on 2 cores other jobs kept busy
(medians of about 30 steps, load 7 to 19; docs/troubleshooting.md). So the count is chosen, once a process, from

- the CPUs the process may run on (`os.sched_getaffinity`),
- the cgroup's CPU quota (`cpu.max` of cgroup v2, `cpu.cfs_quota_us / cpu.cfs_period_us`
  of v1): a container limited to 2 CPUs on a 64-core host gets 2, not 64,
- the CPUs the machine has idle: its count less the CPUs its processes keep busy now
  (sampled from `/proc/stat` over a quarter second; elsewhere the 1-minute load average),
  rounded; never below 1. The load average lags: just after `scripts/install.sh` it still
  counts the finished install as a busy core, and a run started then took 1 thread on a
  2-core machine with nothing else running (its RL steps took 38 s; the shipped run's 17 s).

`trainer.num_threads` (or `num_threads` of `agentrl sft`) above 0, or `OMP_NUM_THREADS` in
the environment, is taken as it is. A run on vllm-cpu also gets the line of where vLLM's worker
threads go (`agentrl.rollout.vllm_engine.vllm_cpu_placement`), right after this one.

>>> budget = CpuBudget(num_affinity=2, quota=None, num_machine=2, load=1.1)
>>> choice = choose_threads(0, budget, omp=None)
>>> choice.num_threads, choice.line()
(1, 'threads: 1 (2 CPUs usable, 1.1 busy leaves 0.9 idle; set trainer.num_threads to change)')
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class CpuBudget:
    """What bounds the CPUs this process can use."""

    num_affinity: int
    """CPUs the process may run on (`os.sched_getaffinity(0)`)."""
    quota: float | None
    """The cgroup's CPU quota in CPUs (`cpu.max` 200000 100000: 2.0); None: no quota."""
    num_machine: int
    """CPUs of the machine (`os.cpu_count()`), which `load` is measured over."""
    load: float | None
    """CPUs the machine's processes keep busy (`busy_cpus`, else the 1-minute load
    average); None where unknown."""

    @property
    def num_usable(self) -> int:
        """CPUs the process may use: its affinity, capped by the quota (at least 1)."""
        cap = self.num_affinity if self.quota is None else math.floor(self.quota)
        return max(1, min(self.num_affinity, cap))

    @property
    def idle(self) -> float | None:
        """CPUs the machine leaves idle (its count less its load); None where unknown."""
        return None if self.load is None else max(0.0, self.num_machine - self.load)


@dataclass(frozen=True)
class ThreadChoice:
    """How many intra-op threads torch uses, and why."""

    num_threads: int
    source: str
    """`auto`, `OMP_NUM_THREADS` or the config key that set it."""
    budget: CpuBudget
    key: str = "trainer.num_threads"
    """The config key that changes it, named in `line()`."""

    def line(self) -> str:
        """One line for the first screen, e.g. `threads: 1 (2 CPUs usable, ...)`."""
        b = self.budget
        parts = [f"{b.num_usable} CPU{'s' if b.num_usable != 1 else ''} usable"]
        if b.quota is not None:
            parts.append(f"cgroup quota {b.quota:g}")
        if b.idle is not None:
            parts.append(f"{b.load:.1f} busy leaves {b.idle:.1f} idle")
        if self.source == "auto":
            how = f"set {self.key} to change"
        elif self.source == "OMP_NUM_THREADS":
            how = "from OMP_NUM_THREADS"
        else:
            how = f"from {self.source}"
        return f"threads: {self.num_threads} ({', '.join(parts)}; {how})"


def cgroup_quota(
    root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")
) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (the smallest on its path up to the
    root), or None without one. cgroup v2 reads `cpu.max`; v1 `cpu.cfs_quota_us` and
    `cpu.cfs_period_us` under `cpu/` (or `cpu,cpuacct/`)."""
    v2, v1 = "/", "/"
    try:
        for entry in proc_cgroup.read_text().splitlines():
            num, controllers, path = entry.split(":", 2)
            if num == "0" and not controllers:
                v2 = path
            elif "cpu" in controllers.split(","):
                v1 = path
    except (OSError, ValueError):
        pass
    quotas = []
    for folder in _up_to_root(root, v2):
        quotas.append(_v2_quota(folder / "cpu.max"))
    for base in (root / "cpu", root / "cpu,cpuacct"):
        for folder in _up_to_root(base, v1):
            quotas.append(_v1_quota(folder))
    found = [q for q in quotas if q is not None]
    return min(found) if found else None


def _up_to_root(base: Path, path: str) -> list[Path]:
    """`base/path` and its parents up to `base`, those that exist (a container often sees
    only its own cgroup, mounted at `base`)."""
    parts = [p for p in path.strip("/").split("/") if p and p != ".."]
    folders = [base.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]
    return [f for f in folders if f.is_dir()]


def _v2_quota(path: Path) -> float | None:
    try:
        quota, period = path.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1_quota(folder: Path) -> float | None:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def busy_cpus(
    window: float = 0.25,
    stat: Path = Path("/proc/stat"),
    sleep: Callable[[float], None] = time.sleep,
) -> float | None:
    """CPUs the machine's processes keep busy now: the share of CPU time not idle over
    `window` seconds (this process sleeps through it), times the CPU count; None where
    `/proc/stat` cannot be read.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "stat"  # user nice system idle iowait irq ...
    >>> _ = path.write_text("cpu  100 0 0 100 0 0 0 0\\ncpu0 0\\ncpu1 0\\n")
    >>> after = "cpu  150 0 0 150 0 0 0 0\\ncpu0 0\\ncpu1 0\\n"
    >>> busy_cpus(stat=path, sleep=lambda s: path.write_text(after))  # half of 2 CPUs' time
    1.0
    >>> busy_cpus(stat=path.with_name("none")) is None
    True
    """

    def read() -> tuple[int, int, int]:
        lines = stat.read_text().splitlines()
        values = [int(v) for v in lines[0].split()[1:9]]
        cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
        return sum(values), values[3] + values[4], cpus

    try:
        total, idle, _ = read()
        sleep(window)
        total_after, idle_after, cpus = read()
    except (OSError, ValueError, IndexError):
        return None
    if total_after <= total or cpus == 0:
        return None
    return cpus * (1.0 - (idle_after - idle) / (total_after - total))


def read_cpu_budget(
    *,
    affinity: Callable[[], set[int]] | None = None,
    cgroup_root: Path = CGROUP_ROOT,
    proc_cgroup: Path = Path("/proc/self/cgroup"),
    busy: Callable[[], float | None] | None = None,
    loadavg: Callable[[], tuple[float, float, float]] | None = None,
) -> CpuBudget:
    """This process's `CpuBudget` (the callables and paths are replaced in tests)."""
    try:
        num_affinity = len((affinity or (lambda: os.sched_getaffinity(0)))())
    except (AttributeError, OSError):  # no sched_getaffinity (macOS)
        num_affinity = os.cpu_count() or 1
    load = (busy or busy_cpus)()
    if load is None:
        try:
            load = (loadavg or os.getloadavg)()[0]
        except (AttributeError, OSError):
            load = None
    return CpuBudget(
        num_affinity=max(1, num_affinity),
        quota=cgroup_quota(cgroup_root, proc_cgroup),
        num_machine=max(num_affinity, os.cpu_count() or 1),
        load=load,
    )


def choose_threads(
    requested: int, budget: CpuBudget, *, omp: str | None, key: str = "trainer.num_threads"
) -> ThreadChoice:
    """`requested` when above 0, else `OMP_NUM_THREADS` (`omp`) when it is a positive int,
    else the usable CPUs capped by the idle ones (rounded, at least 1)."""
    if requested > 0:
        return ThreadChoice(requested, key, budget, key)
    if omp is not None and omp.strip().isdigit() and int(omp) > 0:
        return ThreadChoice(int(omp), "OMP_NUM_THREADS", budget, key)
    num = budget.num_usable
    if budget.idle is not None:
        num = min(num, max(1, math.floor(budget.idle + 0.5)))
    return ThreadChoice(num, "auto", budget, key)


_auto: ThreadChoice | None = None
"""The process's choice without a requested count (made once)."""
_last_logged: int | None = None
"""The thread count whose line was logged last."""
_vllm_logged = False
"""Whether the line of vLLM's thread placement was logged (once a process)."""


def set_torch_threads(
    requested: int = 0, *, key: str = "trainer.num_threads", engine: str | None = None
) -> ThreadChoice:
    """Choose torch's intra-op threads (`choose_threads`), set them, and log the choice's
    line when the count differs from the one logged before; with `engine="vllm"` on a
    machine without CUDA where vLLM is installed, also the line of where vLLM's worker
    threads will go (once a process).

    Without a requested count the choice is made once a process: the trainer after a warm
    start keeps the warm start's, instead of counting the load of its own threads as
    another process's.
    """
    global _auto, _last_logged, _vllm_logged
    import torch

    if requested > 0 or _auto is None:
        omp = os.environ.get("OMP_NUM_THREADS")
        choice = choose_threads(requested, read_cpu_budget(), omp=omp, key=key)
        if requested <= 0:
            _auto = choice
    else:
        choice = _auto
    if choice.num_threads != _last_logged:
        _last_logged = choice.num_threads
        log.info("%s", choice.line())
    if engine == "vllm" and not _vllm_logged and _on_vllm_cpu():
        from agentrl.rollout.vllm_engine import vllm_cpu_placement

        _vllm_logged = True
        log.info("%s", vllm_cpu_placement().line())
    torch.set_num_threads(choice.num_threads)
    return choice


def _on_vllm_cpu() -> bool:
    """vLLM is installed and no CUDA device is seen (so vllm-cpu places the threads)."""
    import importlib.util

    import torch

    return importlib.util.find_spec("vllm") is not None and not torch.cuda.is_available()


# -- slow steps -------------------------------------------------------------------------------
SLOW_FACTOR = 3.0
"""A step this many times the median of the run's earlier steps is slow."""
MIN_STEPS = 5
"""Steps timed before one can be called slow."""
WINDOW = 100
"""The median is over at most this many of the latest steps."""


class SlowStepWatch:
    """Warns once when a step takes more than `SLOW_FACTOR` times the median of the run's
    earlier steps (after `MIN_STEPS`), naming the likely cause: other processes on the
    cores (the load), threads, or swapping.

    >>> watch = SlowStepWatch(num_threads=2, read=lambda: (None, None))
    >>> [watch.observe(i, 1.0) for i in range(1, 6)]
    [None, None, None, None, None]
    >>> print(watch.observe(6, 4.0))  # doctest: +ELLIPSIS
    step 6 took 4.0 s, 4.0x the median of the 5 steps before (1.0 s)...
    """

    def __init__(
        self,
        *,
        num_threads: int,
        key: str = "trainer.num_threads",
        what: str = "step",
        read: Callable[[], tuple[float | None, int | None]] | None = None,
    ) -> None:
        self.num_threads = num_threads
        self.key = key
        self.what = what
        self.seconds: deque[float] = deque(maxlen=WINDOW)
        self.warned = False
        self._read = read or _load_and_swap
        self._swapped = self._read()[1]

    def observe(self, step: int, seconds: float) -> str | None:
        """Record one step's time; the warning (also logged) the first time one is slow."""
        if self.warned:
            return None
        earlier = sorted(self.seconds)
        self.seconds.append(seconds)
        swapped = self._read()
        if len(earlier) < MIN_STEPS:
            self._swapped = swapped[1]
            return None
        median = earlier[len(earlier) // 2]
        if seconds <= SLOW_FACTOR * median:
            self._swapped = swapped[1]
            return None
        self.warned = True
        message = (
            f"{self.what} {step} took {seconds:.1f} s, {seconds / median:.1f}x the median of the "
            f"{len(earlier)} steps before ({median:.1f} s): {self._cause(*swapped)}"
        )
        log.warning("%s", message)
        return message

    def _cause(self, load: float | None, swapped: int | None) -> str:
        causes = []
        if swapped is not None and self._swapped is not None and swapped > self._swapped:
            pages = swapped - self._swapped
            causes.append(
                f"the machine is swapping ({pages} pages in or out): free memory or lower "
                "the batch size / micro_batch_tokens"
            )
        cpus = os.cpu_count() or 1
        if load is not None and load > cpus and load - self.num_threads >= 0.5:
            causes.append(
                f"other processes use the cores (load {load:.1f} on {cpus} CPUs)"
                + (
                    f"; {self.num_threads} threads wait on each other there: set "
                    f"{self.key}=1 (or OMP_NUM_THREADS=1)"
                    if self.num_threads > 1
                    else ""
                )
            )
        elif self.num_threads > 1:
            causes.append(
                f"{self.num_threads} threads may wait on each other if the cores are shared: "
                f"try {self.key}=1"
            )
        if not causes:
            return "no cause seen (no swapping, cores not busy); see docs/troubleshooting.md"
        return "; ".join(causes) + " (docs/troubleshooting.md)"


def _load_and_swap() -> tuple[float | None, int | None]:
    """The 1-minute load average, and the pages swapped in and out since boot."""
    try:
        load: float | None = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = None
    try:
        fields = dict(line.split()[:2] for line in Path("/proc/vmstat").read_text().splitlines())
        swapped: int | None = int(fields.get("pswpin", 0)) + int(fields.get("pswpout", 0))
    except (OSError, ValueError):
        swapped = None
    return load, swapped
