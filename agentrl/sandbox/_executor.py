"""The executor that runs as PID 1 inside each warm sandbox container (standard library only).

The host starts a container with `python3 -I -u -c <this file's source> <limits as JSON>` and
keeps the container's stdin/stdout attached. Each request is one frame on stdin (4-byte
big-endian length, then JSON); each response is one frame on stdout (4-byte length, a JSON
header, then the raw stdout and stderr bytes the header announces).

Per request the executor makes a fresh work directory, forks the program into a new session
with rlimits and a raised OOM score, reads its output up to a cap, kills the whole process
group at the deadline, then kills every other process in the container (`kill(-1, SIGKILL)`
from PID 1 spares only PID 1), reaps them and deletes the work directory. It reports how many
processes outlived the program so the host can replace a container that misbehaved.

Being PID 1 of its PID namespace with no signal handlers, the executor never receives a
signal sent from inside the container, so the program cannot kill it; it also marks itself non-dumpable so the program, which runs
as the same user, cannot ptrace it.
"""

import base64
import io
import json
import os
import resource
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import time
import traceback

try:
    import ctypes

    _LIBC = ctypes.CDLL(None)
except Exception:  # pragma: no cover - ctypes missing from a stripped image
    _LIBC = None
import runpy

LIMITS = json.loads(sys.argv[1]) if __name__ == "__main__" and len(sys.argv) > 1 else {}
WORK_ROOT = LIMITS.get("work_root", "/work")
MAX_OUTPUT = int(LIMITS.get("max_output_bytes", 1 << 20))
MAX_FILE = int(LIMITS.get("max_file_bytes", 32 << 20))
MAX_OPEN_FILES = int(LIMITS.get("max_open_files", 256))
ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORK_ROOT,
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "PYTHONHASHSEED": "0",
    "OMP_NUM_THREADS": "1",
}


def _set_dumpable(flag):
    if _LIBC is not None:
        _LIBC.prctl(4, int(flag), 0, 0, 0)  # PR_SET_DUMPABLE = 4


def _read_exact(stream, n):
    chunks = []
    while n:
        chunk = stream.read(n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _write_frame(out, header, *blobs):
    data = json.dumps(header).encode()
    out.write(struct.pack(">I", len(data)) + data)
    for blob in blobs:
        out.write(blob)
    out.flush()


def _oom_kills():
    for path, key in (
        ("/sys/fs/cgroup/memory.events", "oom_kill"),
        ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"),
    ):
        try:
            with open(path) as f:
                for line in f:
                    name, _, value = line.partition(" ")
                    if name == key:
                        return int(value)
        except OSError:
            continue
    return 0


def _other_pids():
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]


def _kill_all_others():
    """Kill and reap every process but this one; True when none is left."""
    for _ in range(50):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if not _other_pids():
            return True
        time.sleep(0.002)
    return not _other_pids()


def _child_setup(timeout):
    def setup():
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE, MAX_FILE))
        resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_OPEN_FILES, MAX_OPEN_FILES))
        cpu = int(timeout) + 2
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        except OSError:
            pass
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)

    return setup


class _ForkedPython:
    """A `Popen`-like handle for Python code run in a fork of this interpreter (no exec).

    Skipping a fresh interpreter's start-up is what makes a trivial run take a few ms.
    """

    def __init__(self, code_path, stdin, workdir, timeout):
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child never returns from here
            os.setsid()
            os.dup2(stdin.fileno(), 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.closerange(3, MAX_OPEN_FILES + 64)
            _run_python_child(code_path, workdir, timeout)
        os.close(out_w)
        os.close(err_w)
        self.stdout = os.fdopen(out_r, "rb", buffering=0)
        self.stderr = os.fdopen(err_r, "rb", buffering=0)
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired("python", timeout)
            time.sleep(0.001)
        return self.returncode


def _run_python_child(code_path, workdir, timeout):
    code = 1
    try:
        os.chdir(workdir)
        _child_setup(timeout)()
        os.environ.clear()
        os.environ.update(ENV)
        _set_dumpable(True)  # like a fresh process; PID 1 stays non-dumpable
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(
            io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace"
        )
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False),
            encoding="utf-8",
            errors="backslashreplace",
            line_buffering=True,
        )
        sys.argv = [code_path]
        sys.path[0] = workdir
        try:
            runpy.run_path(code_path, run_name="__main__")
            code = 0
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:
            etype, value, tb = sys.exc_info()
            while tb is not None and tb.tb_frame.f_code.co_filename != code_path:
                tb = tb.tb_next  # hide the executor's own frames
            traceback.print_exception(etype, value, tb)
            code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(code & 0xFF)


def _run(req, seq):
    timeout = float(req.get("timeout", 10.0))
    workdir = os.path.join(WORK_ROOT, f"run-{seq}")
    os.mkdir(workdir, 0o700)
    for name, blob in (req.get("files") or {}).items():
        path = os.path.normpath(os.path.join(workdir, name))
        if not path.startswith(workdir + "/"):
            raise ValueError(f"file name {name!r} leaves the work directory")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(blob))
    stdin_path = os.path.join(workdir, ".stdin")
    with open(stdin_path, "wb") as f:
        f.write(base64.b64decode(req.get("stdin") or ""))
    if req.get("argv"):
        argv = list(req["argv"])
    else:
        code_path = os.path.join(workdir, "main.py")
        with open(code_path, "wb") as f:
            f.write(req.get("code", "").encode("utf-8", "surrogateescape"))
        argv = ["python3", code_path]

    oom_before = _oom_kills()
    start = time.monotonic()
    deadline = start + timeout
    with open(stdin_path, "rb") as stdin:
        try:
            if not req.get("argv") and LIMITS.get("fork_python", True):
                proc = _ForkedPython(code_path, stdin, workdir, timeout)
            else:
                proc = subprocess.Popen(
                    argv,
                    stdin=stdin,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=workdir,
                    env=ENV,
                    start_new_session=True,
                    preexec_fn=_child_setup(timeout),
                )
        except OSError as e:
            return {"exit_code": 127, "error": str(e)}, b"", str(e).encode()
    bufs = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    truncated = False
    timed_out = False
    sel = selectors.DefaultSelector()
    for f in bufs:
        sel.register(f, selectors.EVENT_READ)
    exited_at = None
    while sel.get_map():
        now = time.monotonic()
        if now >= deadline:
            timed_out = True
            break
        if proc.poll() is not None:
            # Background children may hold the pipes open: drain briefly, then stop.
            exited_at = exited_at or now
            if now - exited_at > 0.05:
                break
        for key, _ in sel.select(min(deadline - now, 0.05)):
            chunk = os.read(key.fileobj.fileno(), 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            buf = bufs[key.fileobj]
            room = MAX_OUTPUT - len(buf)
            if len(chunk) > room:
                truncated = True
                chunk = chunk[: max(room, 0)]
            buf += chunk
    sel.close()
    if timed_out:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        exit_code = proc.wait(timeout=max(0.0, deadline - time.monotonic()) + 0.1)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        exit_code = proc.wait()
    duration = time.monotonic() - start
    leftover = len(_other_pids())
    clean = _kill_all_others()
    for f in bufs:
        f.close()
    oom_killed = _oom_kills() > oom_before
    shutil.rmtree(workdir, ignore_errors=True)
    header = {
        "exit_code": exit_code,
        "timed_out": timed_out,
        "oom_killed": oom_killed,
        "truncated": truncated,
        "duration": duration,
        "leftover_processes": leftover,
        "clean": clean,
    }
    return header, bytes(bufs[proc.stdout]), bytes(bufs[proc.stderr])


def main():
    _set_dumpable(False)
    # With no handler installed, PID 1 never receives these from inside its namespace.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    seq = 0
    while True:
        size = _read_exact(inp, 4)
        if size is None:
            return
        body = _read_exact(inp, struct.unpack(">I", size)[0])
        if body is None:
            return
        req = json.loads(body)
        if req.get("op") == "ping":
            _write_frame(out, {"ok": True, "others": len(_other_pids())})
            continue
        seq += 1
        try:
            header, stdout, stderr = _run(req, seq)
        except Exception as e:
            _kill_all_others()
            header, stdout, stderr = {"exit_code": 126, "error": repr(e)}, b"", repr(e).encode()
        header["stdout_len"] = len(stdout)
        header["stderr_len"] = len(stderr)
        _write_frame(out, header, stdout, stderr)


if __name__ == "__main__":
    main()
