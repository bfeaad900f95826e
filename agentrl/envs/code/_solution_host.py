"""The untrusted side of the `code` env's test harness (standard library only).

The trusted harness (`_harness.py`) starts this as a fresh interpreter,
`python3 -I -S -c <this source> <request fd> <reply fd> <sys.path as JSON>`, in the sandbox. It never sees a test:
it loads the problem's setup and the model's solution, then answers requests one at a time,
each a frame (4-byte big-endian length, then JSON) on the request fd:

- `{"op": "load", "setup": ..., "solution": ...}`: run both in a fresh namespace;
- `{"op": "get", "name": ...}`: a global the solution defined (never a builtin);
- `{"op": "call", "target": H, "args": [...], "kwargs": [[name, value], ...]}`;
- `{"op": "getattr", "target": H, "name": ...}`;
- `{"op": "len" | "iter" | "getitem" | "contains", "target": H, "arg": ...}`.

Each reply is one frame, `{"id": ..., "ok": value}` or `{"id": ..., "exc": {...}}`. Values
travel as tagged JSON data; an object that is not plain data stays here and is named by a
handle H. Everything in this process is under the solution's control, so the harness treats
each reply as nothing more than the value a function call returned.
"""

import base64
import builtins
import io
import json
import os
import struct
import sys
import traceback

MAX_DEPTH = 100
MAX_NODES = 1_000_000
MAX_MESSAGE = 2000

_handles = {}
_namespace = {}
_SCALARS = (type(None), bool, int, float, str)
_CONVERT = (
    (int, int),
    (float, float),
    (str, str),
    (bytes, bytes),
    (tuple, tuple),
    (list, list),
    (dict, dict),
    (frozenset, frozenset),
    (set, set),
    (complex, complex),
)


class _TooBig(Exception):
    pass


def _handle(obj):
    key = len(_handles) + 1
    _handles[key] = obj
    return {"H": key}


def encode(value, depth=0, budget=None):
    """`value` as tagged JSON data; objects that are not data become handles."""
    budget = budget if budget is not None else [MAX_NODES]
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise _TooBig("the result is too large or too deeply nested to send")
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list:
        return {"L": [encode(v, depth + 1, budget) for v in value]}
    if kind is tuple:
        return {"T": [encode(v, depth + 1, budget) for v in value]}
    if kind is set:
        return {"S": [encode(v, depth + 1, budget) for v in value]}
    if kind is frozenset:
        return {"F": [encode(v, depth + 1, budget) for v in value]}
    if kind is dict:
        return {
            "D": [
                [encode(k, depth + 1, budget), encode(v, depth + 1, budget)]
                for k, v in value.items()
            ]
        }
    if kind is bytes:
        return {"B": base64.b64encode(value).decode()}
    if kind is complex:
        return {"C": [value.real, value.imag]}
    for base, convert in _CONVERT:  # subclasses (Counter, namedtuple, IntEnum) as plain data
        if isinstance(value, base):
            plain = convert(value)
            if type(plain) is base:
                return encode(plain, depth + 1, budget)
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return encode(value.tolist(), depth + 1, budget)  # numpy scalars and arrays
    return _handle(value)


def decode(data):
    """Arguments from the harness: tagged JSON data, handles back to their objects."""
    if type(data) is not dict:
        return data
    ((tag, body),) = data.items()
    if tag == "H":
        return _handles[body]
    if tag == "B":
        return base64.b64decode(body)
    if tag == "C":
        return complex(*body)
    if tag == "D":
        return {decode(k): decode(v) for k, v in body}
    items = [decode(v) for v in body]
    return {"L": list, "T": tuple, "S": set, "F": frozenset}[tag](items)


def describe(exc):
    """An exception as data: its type, the builtin classes it derives from, and its text."""
    try:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    except BaseException:
        text = type(exc).__name__
    bases = [c.__name__ for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c]
    return {"type": type(exc).__name__, "bases": bases, "text": text[:MAX_MESSAGE]}


def _run_source(source, filename):
    exec(compile(source, filename, "exec"), _namespace)


def answer(req):
    """Do what one request asks; return the encoded result."""
    op = req["op"]
    if op == "load":
        _namespace.clear()
        _namespace.update({"__name__": "solution", "__builtins__": builtins})
        _run_source(req["setup"] + "\n", "setup.py")
        _run_source(req["solution"], "solution.py")
        return None
    if op == "get":
        name = req["name"]
        if name.startswith("__") or name not in _namespace:
            raise NameError(f"name {name!r} is not defined")
        return encode(_namespace[name])
    target = _handles[req["target"]]
    if op == "call":
        args = [decode(a) for a in req["args"]]
        kwargs = {k: decode(v) for k, v in req["kwargs"]}
        return encode(target(*args, **kwargs))
    if op == "getattr":
        return encode(getattr(target, req["name"]))
    if op == "len":
        return encode(len(target))
    if op == "iter":
        return encode(list(target))
    if op == "getitem":
        return encode(target[decode(req["arg"])])
    if op == "contains":
        return encode(decode(req["arg"]) in target)
    raise ValueError(f"unknown request {op!r}")


def _read_exact(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main():
    req_fd, reply_fd = int(sys.argv[1]), int(sys.argv[2])
    sys.path[:] = json.loads(sys.argv[3])
    sys.set_int_max_str_digits(0)
    sys.stdin = io.StringIO()
    while True:
        size = _read_exact(req_fd, 4)
        body = size and _read_exact(req_fd, struct.unpack(">I", size)[0])
        if not body:
            os._exit(0)
        req = json.loads(body)
        try:
            reply = {"id": req["id"], "ok": answer(req)}
            data = json.dumps(reply).encode()
        except BaseException as e:  # includes SystemExit from the solution
            data = json.dumps({"id": req["id"], "exc": describe(e)}).encode()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        _write_all(reply_fd, struct.pack(">I", len(data)) + data)


if __name__ == "__main__":
    main()
