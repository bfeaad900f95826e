"""The trusted side of the `code` env's test harness (standard library only).

This file runs as the sandbox program. The model's code never runs in this process. The flow:

1. The harness marks itself non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`), so a process of the
   same uid can neither ptrace it nor open its `/proc/<pid>/mem`, `fd/` or `environ`. It also
   ignores every catchable signal.
2. It reads its input from stdin as JSON: the tests, the setup, the solution, the source of the
   solution host, a per-run nonce and the limits. Then it deletes every file in its work
   directory and drops writable directories from `sys.path`. After that, nothing the
   solution can reach on disk holds a test or the nonce.
3. It starts the solution host (`_solution_host.py`) as a fresh interpreter, `python3 -I -S -c`,
   so no copy of this memory is made (a fork would copy the secrets; so would a fork made
   before reading stdin, because this process is itself a fork of the sandbox's executor,
   which held the request). The host gets only a request pipe and a reply pipe, and
   its stdout and stderr go to a third pipe that this process drains and caps. It does not
   inherit this process's stdout, which is the only channel back to the grader.
4. Each test runs *here*, in this interpreter, as trusted code. A name the solution defines is
   a `Remote` proxy. Calling it sends the arguments to the host as data and gets back plain
   data (None, bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset), or
   a handle to an object that is not data (an instance of a solution class), or an exception
   as its type name and text. So every comparison, `assert` and `except` runs on data built
   by this process. A result with an always-true `__eq__` arrives as a handle, and a handle
   equals only itself.
5. Each test has a time limit. A host that dies, hangs, answers too much or answers junk
   fails only the current test. It is killed and a fresh one serves the next test.
6. After each test one line goes to stdout: `nonce + json([index, error or None])`.

The host learns only the arguments of the calls made to it, never an expected value or the
test's source.
"""

import ast
import base64
import binascii
import builtins
import json
import marshal
import os
import select
import signal
import struct
import subprocess
import sys
import time
import traceback

try:
    import ctypes
except ImportError:  # pragma: no cover - a stripped image
    ctypes = None

MAX_ERROR_CHARS = 2000
OUTPUT_KEEP = 4096
MAX_DEPTH = 200
_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4
_IGNORED = (
    "SIGINT SIGTERM SIGHUP SIGQUIT SIGUSR1 SIGUSR2 SIGALRM SIGTSTP SIGTTIN SIGTTOU "
    "SIGVTALRM SIGPROF SIGPIPE"
).split()


class HarnessFailure(BaseException):
    """The current test cannot pass: the host broke the protocol, or the harness cannot do it.

    A BaseException, so a test's `except Exception` cannot swallow it.
    """


class SolutionError(Exception):
    """An exception the solution raised whose class is not a builtin exception."""


def make_undumpable():
    """Mark this process non-dumpable; True when the kernel confirms it."""
    if ctypes is None:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        return libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) == 0
    except Exception:
        return False


def read_input():
    """The run's input from stdin (then stdin points at /dev/null)."""
    chunks = []
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return json.loads(b"".join(chunks))


def scrub():
    """Delete the work directory's files (this program, the stdin copy); trust no writable path."""
    for name in os.listdir("."):
        try:
            os.unlink(name)
        except OSError:
            pass
    cwd = os.getcwd()

    def trusted(path):  # root can write anywhere, but then the sandbox protects nothing anyway
        if not os.path.isabs(path) or os.path.commonpath([path, cwd]) == cwd:
            return False
        return os.geteuid() == 0 or not os.access(path, os.W_OK)

    sys.path[:] = [p for p in sys.path if trusted(p)]
    sys.path_importer_cache.clear()


def error_text(exc):
    """The feedback line for an exception that ended a test."""
    if isinstance(exc, HarnessFailure):
        text = str(exc)
    else:
        text = getattr(exc, "agentrl_text", None)
        if not isinstance(text, str):
            text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return (text or type(exc).__name__)[:MAX_ERROR_CHARS]


def remote_exception(info):
    """The exception to raise here for one the host reported (its nearest builtin class)."""
    text = info["text"][:MAX_ERROR_CHARS]
    message = text.split(": ", 1)[1] if ": " in text else text
    exc = None
    for name in info["bases"]:
        cls = getattr(builtins, name, None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            try:
                exc = cls(message)
                break
            except Exception:
                continue
    if exc is None:
        exc = SolutionError(message)
    exc.agentrl_text = text
    return exc


class Remote:
    """A proxy for an object that lives in the solution's process (a function, an instance)."""

    __slots__ = ("_host", "_key", "_generation")

    def __init__(self, host, key):
        self._host, self._key, self._generation = host, key, host.generation

    def _ask(self, op, **fields):
        if self._generation != self._host.generation:
            raise HarnessFailure("an object from an earlier solution process was used")
        return self._host.ask(op, target=self._key, **fields)

    def __call__(self, *args, **kwargs):
        encode = self._host.encode
        return self._ask(
            "call",
            args=[encode(a) for a in args],
            kwargs=[[k, encode(v)] for k, v in kwargs.items()],
        )

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._ask("getattr", name=name)

    def __len__(self):
        n = self._ask("len")
        if type(n) is not int or n < 0:
            raise TypeError("__len__ of the solution's object did not return an int >= 0")
        return n

    def __iter__(self):
        items = self._ask("iter")
        if type(items) is not list:
            raise TypeError("the solution's object is not iterable")
        return iter(items)

    def __getitem__(self, key):
        return self._ask("getitem", arg=self._host.encode(key))

    def __contains__(self, item):
        return bool(self._ask("contains", arg=self._host.encode(item)))

    def __bool__(self):
        return True

    def __repr__(self):
        return f"<object #{self._key} of the solution>"


class SolutionHost:
    """The solution's process, reached only through a request pipe and a reply pipe."""

    def __init__(self, spec, end):
        self.source = spec["host"]
        self.setup = spec["setup"]
        self.solution = spec["solution"]
        self.max_reply = int(spec["max_reply_bytes"])
        self.end = end
        self.proc = None
        self.generation = 0
        self.seq = 0
        self.load_error = None
        self.broken = None
        self.deadline = end
        self.timeout_text = ""
        self.output = bytearray()

    # -- process life ----------------------------------------------------------------------
    def begin_test(self, test_timeout):
        """Start a test's clock: it may use `test_timeout` s, within the run's budget."""
        now = time.monotonic()
        self.broken = None
        self.deadline = min(now + test_timeout, self.end)
        if self.deadline < self.end:
            self.timeout_text = f"Timed out after {test_timeout:.1f} s (the time limit per test)"
        else:
            self.timeout_text = "Timed out: the time limit for all tests ran out"

    def ensure_loaded(self):
        """A live host with the setup and solution loaded (starts one if needed)."""
        if self.load_error is not None:
            raise HarnessFailure(self.load_error)
        if self.proc is not None:
            return
        self.start()
        try:
            self.ask("load", setup=self.setup, solution=self.solution)
        except HarnessFailure as e:
            self.load_error = self.broken = f"{e} (while loading the solution)"
            raise HarnessFailure(self.load_error) from None
        except Exception as e:
            self.load_error = error_text(e)
            self.stop()
            raise HarnessFailure(self.load_error) from None

    def start(self):
        req_r, self.req_w = os.pipe()
        self.reply_r, reply_w = os.pipe()
        self.out_r, out_w = os.pipe()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.getcwd()}
        env.update(LANG="C.UTF-8", OMP_NUM_THREADS="1")
        # -S skips `site` (5 ms); the host gets this process's scrubbed sys.path instead
        paths = os.pathsep.join(sys.path)
        argv = [sys.executable, "-I", "-S", "-c", self.source, str(req_r), str(reply_w), paths]
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=out_w,
                pass_fds=(req_r, reply_w),
                start_new_session=True,
                env=env,
            )
        except OSError as e:
            self._close_fds()
            raise HarnessFailure(f"could not start the solution's process: {e}") from None
        finally:
            for fd in (req_r, reply_w, out_w):
                os.close(fd)
        for fd in (self.req_w, self.reply_r, self.out_r):
            os.set_blocking(fd, False)
        self.out_open = True
        self.output = bytearray()
        self.generation += 1

    def stop(self):
        """Kill the host (and its process group) and forget it."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        self._close_fds()
        self.proc = None

    def _close_fds(self):
        for name in ("req_w", "reply_r", "out_r"):
            fd = getattr(self, name, None)
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
                setattr(self, name, None)

    def fail(self, why):
        """The host broke the protocol: fail the current test and kill the host."""
        self.broken = why
        self.stop()
        return HarnessFailure(why)

    # -- the pipes -------------------------------------------------------------------------
    def _drain_output(self):
        try:
            chunk = os.read(self.out_r, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            self.out_open = False
        room = OUTPUT_KEEP - len(self.output)
        if room > 0:
            self.output += chunk[:room]

    def _wait(self, fd, write):
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise self.fail(self.timeout_text)
            readers = [self.out_r] if self.out_open else []
            if not write:
                readers.append(fd)
            r, w, _ = select.select(readers, [fd] if write else [], [], left)
            if self.out_r in r:
                self._drain_output()
            if fd in r or fd in w:
                return

    def _died(self):
        try:
            code = self.proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            return self.fail("the solution's process closed its reply pipe")
        while self.out_open:
            select.select([self.out_r], [], [], 0.05)
            before = len(self.output)
            self._drain_output()
            if len(self.output) == before and self.out_open:
                break
        if code < 0:
            why = f"the solution's process was killed by signal {-code}"
        else:
            why = f"the solution's process exited with code {code}"
        out = self.output.decode("utf-8", "replace").strip()
        if out:
            why += "; its output:\n" + out[:1000]
        return self.fail(why)

    def _send(self, data):
        view = memoryview(data)
        while view:
            self._wait(self.req_w, write=True)
            try:
                view = view[os.write(self.req_w, view) :]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                raise self._died() from None

    def _recv(self, n):
        buf = bytearray()
        while len(buf) < n:
            self._wait(self.reply_r, write=False)
            try:
                chunk = os.read(self.reply_r, min(n - len(buf), 1 << 20))
            except BlockingIOError:
                continue
            if not chunk:
                raise self._died()
            buf += chunk
        return bytes(buf)

    def ask(self, op, **fields):
        """One request to the host; its result as data here, or the exception it raised."""
        if self.broken is not None:
            raise HarnessFailure(self.broken)
        if self.proc is None:
            raise HarnessFailure("the solution's process is not running")
        self.seq += 1
        data = marshal.dumps(dict(fields, op=op, id=self.seq))
        self._send(struct.pack(">I", len(data)) + data)
        (size,) = struct.unpack(">I", self._recv(4))
        if size > self.max_reply:
            raise self.fail(f"the solution's result is {size} bytes; the limit is {self.max_reply}")
        try:
            reply = json.loads(self._recv(size))
            if type(reply) is not dict or reply.get("id") != self.seq:
                raise ValueError("reply to another request")
            if set(reply) == {"id", "exc"}:
                info = reply["exc"]
                if not (
                    type(info) is dict
                    and type(info.get("text")) is str
                    and type(info.get("bases")) is list
                    and all(type(b) is str for b in info["bases"])
                ):
                    raise ValueError("bad exception record")
                failure = remote_exception(info)
            elif set(reply) == {"id", "ok"}:
                return self.decode(reply["ok"])
            else:
                raise ValueError("unknown reply")
        except (ValueError, TypeError, KeyError, RecursionError, binascii.Error) as e:
            raise self.fail(f"the solution's process sent a malformed reply ({e})") from None
        raise failure

    # -- values ----------------------------------------------------------------------------
    def decode(self, data, depth=0):
        """Tagged JSON from the host as plain data of exact builtin types (handles as Remote)."""
        kind = type(data)
        if data is None or kind in (bool, int, float, str):
            return data
        if depth > MAX_DEPTH or kind is not dict or len(data) != 1:
            raise ValueError("not a tagged value")
        ((tag, body),) = data.items()
        if tag == "H" and type(body) is int:
            return Remote(self, body)
        if tag == "B" and type(body) is str:
            return base64.b64decode(body, validate=True)
        if tag == "C" and type(body) is list and [type(x) for x in body] in _COMPLEX_PARTS:
            return complex(*body)
        if type(body) is not list:
            raise ValueError(f"bad {tag!r} value")
        if tag == "D":
            out = {}
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise ValueError("bad dict item")
                out[self.decode(pair[0], depth + 1)] = self.decode(pair[1], depth + 1)
            return out
        make = {"L": list, "T": tuple, "S": set, "F": frozenset}.get(tag)
        if make is None:
            raise ValueError(f"unknown tag {tag!r}")
        return make(self.decode(v, depth + 1) for v in body)

    def encode(self, value):
        """A test's value as tagged data for the host (Remote proxies as their handles)."""
        kind = type(value)
        if value is None or kind in (bool, int, float, str):
            return value
        if kind is Remote:
            if value._generation != self.generation:
                raise HarnessFailure("an object from an earlier solution process was used")
            return {"H": value._key}
        for base, tag in _TAGS:
            if isinstance(value, base):
                if base is dict:
                    return {"D": [[self.encode(k), self.encode(v)] for k, v in value.items()]}
                if base is bytes:
                    return {"B": bytes(value)}
                if base is complex:
                    return {"C": complex(value)}
                return {tag: [self.encode(v) for v in value]}
        for base in (int, float, str):  # subclasses such as IntEnum members
            if isinstance(value, base):
                return self.encode(base(value))
        raise HarnessFailure(f"the harness cannot pass a {kind.__name__} to the solution")


_COMPLEX_PARTS = [[a, b] for a in (int, float) for b in (int, float)]
_TAGS = (
    (list, "L"),
    (tuple, "T"),
    (set, "S"),
    (frozenset, "F"),
    (dict, "D"),
    (bytes, "B"),
    (complex, "C"),
)


def free_names(tree, known):
    """Names a test reads that neither builtins, the setup nor the test itself define."""
    loads, stores = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loads if isinstance(node.ctx, ast.Load) else stores).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            stores.add(node.name)
    return sorted(n for n in loads - stores if n not in known and not hasattr(builtins, n))


def run_test(host, code, names, namespace, test_timeout):
    """Run one compiled test; None when it passed, else the error text."""
    host.begin_test(test_timeout)
    try:
        host.ensure_loaded()
        for name in names:
            try:
                namespace[name] = host.ask("get", name=name)
            except Exception:  # not defined by the solution: the test raises NameError
                namespace.pop(name, None)
        exec(code, dict(namespace))
        error = None
    except BaseException as e:
        error = error_text(e)
    return host.broken if host.broken is not None else error


def main():
    safe = make_undumpable()
    for name in _IGNORED:
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    spec = read_input()
    scrub()
    sys.set_int_max_str_digits(50_000)
    start = time.monotonic()
    tests = spec["tests"]
    nonce = spec["nonce"]

    def report(index, error):
        os.write(1, ("\n" + nonce + json.dumps([index, error]) + "\n").encode())

    fatal = None if safe else "the harness could not make itself non-dumpable; nothing was run"
    namespace = {"__name__": "tests", "__builtins__": builtins}
    if fatal is None:
        try:
            exec(compile(spec["setup"] + "\n", "setup.py", "exec"), namespace)
        except BaseException as e:
            fatal = f"the problem's setup failed: {error_text(e)}"
    if fatal is not None:
        for i in range(len(tests)):
            report(i, fatal)
        return
    known = set(namespace)
    setup_names = free_names(ast.parse(spec["setup"] + "\n"), known)
    host = SolutionHost(spec, start + float(spec["budget"]))
    for i, test in enumerate(tests):
        if time.monotonic() >= host.end:
            report(i, "not run: the time limit for all tests ran out")
            continue
        try:
            tree = ast.parse(test, "test")
            code = compile(tree, "test", "exec")
        except SyntaxError as e:
            report(i, f"the test does not compile: {error_text(e)}")
            continue
        names = sorted(set(free_names(tree, known)) | set(setup_names))
        report(i, run_test(host, code, names, namespace, float(spec["test_timeout"])))
    host.stop()


if __name__ == "__main__":
    main()
