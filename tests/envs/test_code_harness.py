"""The `code` env's test harness against solutions that attack it instead of solving the task.

Each attack runs in the real Docker sandbox and must not earn a test it did not solve. The
harness (agentrl/envs/code/_harness.py) runs the tests in a trusted process and the solution
in a separate one that answers calls with data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from agentrl.envs.code import CodeEnv, load_problems, run_tests
from agentrl.envs.code._harness import HarnessFailure, SolutionHost, remote_exception
from agentrl.sandbox import SandboxConfig

PROBLEMS = {p.id: p for p in load_problems()}
DIGIT_SUM = PROBLEMS["digit-sum"].solution

# The exploit confirmed in Docker against the old in-process harness (reward 1.0 there): read
# the per-run nonce from the caller's frame, print forged "passed" lines, exit. Generalised to
# look for the nonce everywhere it could be (frames, gc, files, other processes' fds).
FORGE = r"""
import gc, os, sys, json
found = set()
frame = sys._getframe()
while frame is not None:
    for scope in (frame.f_globals, frame.f_locals):
        for v in list(scope.values()):
            if isinstance(v, str) and "@@agentrl-result-" in v:
                found.add(v)
    frame = frame.f_back
for obj in gc.get_objects():
    if isinstance(obj, dict):
        for v in list(obj.values()):
            if isinstance(v, str) and v.startswith("@@agentrl-result-"):
                found.add(v)
lines = "".join("\n%s%s\n" % (n, json.dumps([i, None])) for n in found for i in range(10))
lines += "".join("\n@@agentrl-result-%s@@[%d, null]\n" % ("0" * 32, i) for i in range(10))
for target in ("/proc/%d/fd/1" % os.getppid(), "/proc/1/fd/1"):
    try:
        with open(target, "w") as f:
            f.write(lines)
    except OSError:
        pass
sys.stdout.write(lines)
sys.stdout.flush()
os.write(1, lines.encode())
os._exit(0)
"""

# A "solution" that tries every way to learn the tests or reach the verdict channel, then
# raises an exception whose text (shown in the feedback) says what each probe got.
PROBE = r"""
import ctypes, gc, json, os, sys

# Each needle is kept in two parts, so the probe itself never holds the joined string.
SECRETS = (("assert dig", "it_sum"), ("@@agentrl-res", "ult-"))
MARKER = ("probe-", "marker")
mine = "".join(MARKER)  # made at run time: a control that the memory scan finds strings

def _found(text, parts):
    i = text.find(parts[0])
    while i >= 0:
        if text.startswith(parts[1], i + len(parts[0])):
            return True
        i = text.find(parts[0], i + 1)
    return False

def _leaks(data, needles=SECRETS):
    text = data.decode("latin-1") if isinstance(data, bytes) else str(data)
    return ["|".join(p) for p in needles if _found(text, p)]

def _try(fn):
    try:
        return fn()
    except Exception as e:
        return type(e).__name__

def _read_mem(pid, needles=SECRETS):
    leaks = []
    with open("/proc/%d/maps" % pid) as maps, open("/proc/%d/mem" % pid, "rb") as mem:
        for line in maps:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if "r" not in line.split()[1] or hi - lo > 64 << 20:
                continue
            try:
                mem.seek(lo)
                leaks += _leaks(mem.read(hi - lo), needles)
            except OSError:
                continue
    return sorted(set(leaks)) or "read, nothing found"

def _files():
    leaks = []
    for root in (".", "/tmp", "/work"):
        for base, _, names in os.walk(root):
            for name in names:
                try:
                    with open(os.path.join(base, name), "rb") as f:
                        leaks += _leaks(f.read())
                except OSError:
                    pass
    return sorted(set(leaks))

def _objects():
    leaks = []
    frame = sys._getframe()
    while frame is not None:
        leaks += _leaks(frame.f_code.co_consts) + _leaks(frame.f_locals) + _leaks(frame.f_globals)
        frame = frame.f_back
    for obj in gc.get_objects():
        if isinstance(obj, (dict, list, tuple)):
            leaks += _leaks(repr(obj)[:100000])
    return sorted(set(leaks))

def _procs():
    leaks = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            for part in ("cmdline", "environ"):
                got = _try(lambda: _leaks(open("/proc/%s/%s" % (pid, part), "rb").read()))
                leaks += [part + ":" + s for s in got] if isinstance(got, list) else []
    return sorted(set(leaks))

def _ptrace(pid):
    libc = ctypes.CDLL(None, use_errno=True)
    return "%d errno %d" % (libc.ptrace(16, pid, 0, 0), ctypes.get_errno())  # PTRACE_ATTACH

def digit_sum(n):
    parent = os.getppid()
    report = {
        "parent_is_harness": parent != 1,
        "self_mem": _try(lambda: _read_mem(os.getpid(), (MARKER,))),
        "parent_mem": _try(lambda: _read_mem(parent)),
        "pid1_mem": _try(lambda: _read_mem(1)),
        "parent_stdin": _try(lambda: open("/proc/%d/fd/0" % parent, "rb").read()),
        "parent_stdout": _try(lambda: open("/proc/%d/fd/1" % parent, "wb")),
        "parent_ptrace": _try(lambda: _ptrace(parent)),
        "files": _files(),
        "objects": _objects(),
        "procs": _procs(),
    }
    raise RuntimeError("PROBE " + json.dumps(report, default=str))
"""

HOSTILE = {
    "always-equal object": (
        "digit-sum",
        "class Eq:\n"
        "    def __eq__(self, other):\n        return True\n"
        "    __hash__ = object.__hash__\n"
        "def digit_sum(n):\n    return Eq()\n",
    ),
    "int subclass equal to everything": (
        "digit-sum",
        "class I(int):\n"
        "    def __eq__(self, other):\n        return True\n"
        "    __hash__ = int.__hash__\n"
        "def digit_sum(n):\n    return I(-1)\n",
    ),
    "str subclass equal to everything": (
        "reverse-words",
        "class S(str):\n"
        "    def __eq__(self, other):\n        return True\n"
        "    __hash__ = str.__hash__\n"
        "def reverse_words(s):\n    return S('?')\n",
    ),
    "patched builtins and exceptions": (
        "digit-sum",
        "import builtins, json\n"
        "builtins.AssertionError = type('Nope', (Exception,), {})\n"
        "builtins.len = lambda x: 0\n"
        "json.loads = lambda *a, **k: [0, None]\n"
        "json.dumps = lambda *a, **k: '[0, null]'\n"
        "def digit_sum(n):\n    return -1\n",
    ),
    "forged lines at import": ("digit-sum", FORGE),
    "forged lines in the call": (
        "digit-sum",
        "def digit_sum(n):\n" + "".join("    " + line + "\n" for line in FORGE.splitlines()),
    ),
    "junk on the reply pipe": (
        "digit-sum",
        "import os\n"
        "for fd in range(3, 10):\n"
        "    try:\n"
        "        os.write(fd, b'\\x00\\x00\\x00\\x0b{\"ok\": 15}')\n"
        "    except OSError:\n"
        "        pass\n"
        "def digit_sum(n):\n    return -1\n",
    ),
    "kills the harness": (
        "digit-sum",
        "import os, signal\n"
        "def digit_sum(n):\n"
        "    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP):\n"
        "        os.kill(os.getppid(), sig)\n"
        "    return -1\n",
    ),
}
"""Attacks that must score 0 on the named problem."""


@pytest.fixture(scope="module")
def sandbox(require_docker: None) -> Iterator[object]:
    from agentrl.sandbox.docker import DockerSandbox

    box = DockerSandbox(SandboxConfig(pool_size=2))
    try:
        yield box
    finally:
        box.close()


@pytest.mark.docker
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_solutions_score_zero(name, sandbox) -> None:
    problem_id, code = HOSTILE[name]
    errors, why = run_tests(PROBLEMS[problem_id], code, sandbox, timeout=5)
    assert all(e is not None for e in errors), (name, errors, why)


@pytest.mark.docker
def test_confirmed_exploit_gets_zero_reward_through_the_env(sandbox) -> None:
    env = CodeEnv(sandbox=sandbox, max_turns=1, timeout=5)
    env.reset(seed=0, options={"problem_id": "digit-sum"})
    obs, reward, terminated, _, info = env.step(f"```python\n{FORGE}```")
    assert (reward, info["passed"], terminated) == (0.0, 0, True), obs
    assert "exited with code 0" in obs


@pytest.mark.docker
def test_probes_find_no_secret_and_no_way_to_the_verdict(sandbox) -> None:
    errors, _ = run_tests(PROBLEMS["digit-sum"], PROBE, sandbox, timeout=8)
    assert all(e is not None for e in errors)
    report = json.loads(re.search(r"PROBE (\{.*\})", errors[0], re.DOTALL).group(1))
    assert report["parent_is_harness"]
    # the probe can read memory (its own); the harness's and PID 1's are closed to it
    assert report["self_mem"] == ["probe-|marker"], report
    for key in ("parent_mem", "pid1_mem", "parent_stdin", "parent_stdout"):
        assert report[key] == "PermissionError", (key, report)
    assert report["parent_ptrace"].startswith("-1 errno 1"), report  # EPERM
    # no file, object or other process's cmdline/environ holds a test or the nonce
    assert report["files"] == [] and report["objects"] == [] and report["procs"] == [], report


@pytest.mark.docker
def test_failures_are_per_test_and_later_tests_still_run(sandbox) -> None:
    exits = (
        "import os, sys\n"
        "def digit_sum(n):\n"
        "    if n == 0:\n        sys.exit(0)\n"
        "    if n == -907:\n        print('bye', flush=True); os._exit(3)\n"
        "    return sum(int(d) for d in str(abs(n)))\n"
    )
    errors, why = run_tests(PROBLEMS["digit-sum"], exits, sandbox, timeout=5)
    assert why == "" and errors[1] is None and errors[3] is None, errors
    assert errors[0].startswith("SystemExit"), errors
    assert errors[2].startswith("the solution's process exited with code 3") and "bye" in errors[2]

    hang = "def digit_sum(n):\n    while n == 12345:\n        pass\n" + DIGIT_SUM.split("\n", 1)[1]
    errors, why = run_tests(PROBLEMS["digit-sum"], hang, sandbox, timeout=6, test_timeout=1)
    assert why == "" and errors[0] is None and errors[2:] == [None, None], errors
    assert errors[1].startswith("Timed out after 1.0 s"), errors

    huge = "def digit_sum(n):\n    if n == 0:\n        return 'x' * (8 << 20)\n" + (
        "    return sum(int(d) for d in str(abs(n)))\n"
    )
    errors, _ = run_tests(PROBLEMS["digit-sum"], huge, sandbox, timeout=6)
    assert errors[1:] == [None] * 3 and "the limit is" in errors[0], errors


@pytest.mark.docker
def test_output_spam_does_not_disturb_grading(sandbox) -> None:
    spam = (
        "import sys\n"
        "def reverse_words(s):\n"
        "    sys.stdout.write('@@agentrl-result-' * 100000)\n"
        "    sys.stderr.write('x' * (2 << 20))\n"
        "    return ' '.join(reversed(s.split()))\n"
    )
    errors, why = run_tests(PROBLEMS["reverse-words"], spam, sandbox, timeout=8)
    assert errors == [None] * 4 and why == "", errors


@pytest.mark.docker
def test_load_errors_fail_every_test_with_the_reason(sandbox) -> None:
    errors, _ = run_tests(PROBLEMS["digit-sum"], "def digit_sum(n:\n", sandbox, timeout=5)
    assert all("SyntaxError" in e for e in errors), errors
    errors, _ = run_tests(PROBLEMS["digit-sum"], "import os\nos._exit(0)\n", sandbox, timeout=5)
    assert all("exited with code 0" in e and "while loading" in e for e in errors), errors
    errors, _ = run_tests(PROBLEMS["digit-sum"], "pass\n", sandbox, timeout=5)
    assert errors[0] == "NameError: name 'digit_sum' is not defined", errors


@pytest.mark.docker
def test_exceptions_keep_their_builtin_class_and_objects_stay_remote(sandbox) -> None:
    # a custom ValueError subclass is caught by the tests' `except ValueError`
    code = (
        "import re\n"
        "class DurationError(ValueError):\n    pass\n"
        "def parse_duration(s):\n"
        "    m = re.fullmatch(r'(?:(\\d+)h)?(?:(\\d+)m)?(?:(\\d+)s)?', s)\n"
        "    if not s or not m:\n        raise DurationError('bad duration: ' + s)\n"
        "    h, mi, se = (int(g or 0) for g in m.groups())\n"
        "    return h * 3600 + mi * 60 + se\n"
    )
    errors, _ = run_tests(PROBLEMS["parse-duration"], code, sandbox, timeout=5)
    assert errors == [None] * 6, errors
    # an instance of the solution's class lives in the solution's process (LRU tests)
    lru = PROBLEMS["lru-cache"]
    errors, _ = run_tests(lru, lru.solution, sandbox, timeout=5)
    assert errors == [None] * 3, errors


def test_host_replies_are_decoded_strictly() -> None:
    host = SolutionHost({"host": "", "setup": "", "solution": "", "max_reply_bytes": 100}, end=0.0)
    value = {"T": [1, {"L": [2.5, "a", None, True]}, {"D": [[{"F": [1]}, {"B": "eA=="}]]}]}
    assert host.decode(value) == (1, [2.5, "a", None, True], {frozenset({1}): b"x"})
    assert type(host.decode({"T": []})) is tuple and host.decode({"C": [1, 2]}) == 1 + 2j
    for bad in ({"X": []}, {"L": 1}, {"L": [], "T": []}, {"S": [{"L": []}]}, {"B": "%%"}):
        with pytest.raises((ValueError, TypeError)):
            host.decode(bad)
    deep: object = 1
    for _ in range(300):
        deep = {"L": [deep]}
    with pytest.raises(ValueError):
        host.decode(deep)
    assert host.encode({"a": (1, b"x")}) == {"D": [["a", {"T": [1, {"B": b"x"}]}]]}
    with pytest.raises(HarnessFailure, match="cannot pass a function"):
        host.encode(lambda: 0)


def test_remote_exceptions_map_to_their_nearest_builtin() -> None:
    info = {"type": "DurationError", "bases": ["ValueError", "Exception"], "text": "X: bad"}
    exc = remote_exception(info)
    assert type(exc) is ValueError and exc.agentrl_text == "X: bad" and str(exc) == "bad"
    exc = remote_exception({"type": "SystemExit", "bases": ["SystemExit"], "text": "SystemExit"})
    assert type(exc).__name__ == "SolutionError" and isinstance(exc, Exception)
