"""The untrusted side of the `code` env's test harness (standard library only).

The trusted harness (`_harness.py`) starts this as a fresh interpreter in the sandbox:
`python3 -I -S -c <this source> <request fd> <reply fd> <sys.path joined by os.pathsep>`. It never sees a
test. It loads the problem's setup and the model's solution, then answers requests one at a
time. Each request is a frame on the request fd: a 4-byte big-endian length, then a `marshal`
dump. That is safe here because only the trusted harness writes it. The requests are:

- `{"op": "load", "setup": ..., "solution": ...}`: run both in a fresh namespace;
- `{"op": "get", "name": ...}`: a global the solution defined (never a builtin);
- `{"op": "call", "target": H, "args": [...], "kwargs": [[name, value], ...]}`;
- `{"op": "getattr", "target": H, "name": ...}`;
- `{"op": "len" | "iter" | "getitem" | "contains", "target": H, "arg": ...}`.

Each reply is one frame of JSON text: `{"id": ..., "ok": value}` or `{"id": ..., "exc": {...}}`.
The harness parses JSON and never unmarshals anything from here. Values travel as tagged
data, and an object that is not plain data stays here and is named by a handle H.
Everything in this process is under the solution's control, so the harness treats each
reply as nothing more than the value a function call returned.

Only builtin modules are imported (`json`, `traceback` and `base64` would add about 10 ms to
every run), so the JSON is written by hand with `_json`'s string encoder.
"""

import _json
import binascii
import builtins
import io
import marshal
import os
import sys

MAX_DEPTH = 100
MAX_NODES = 1_000_000
MAX_MESSAGE = 2000

_handles = {}
_namespace = {}
_quote = _json.encode_basestring_ascii
_SEQUENCES = {list: "L", tuple: "T", set: "S", frozenset: "F"}
_CONVERT = (int, float, str, bytes, tuple, list, dict, frozenset, set, complex)


class _TooBig(Exception):
    pass


def _float(x):
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    return float.__repr__(x)


def encode(value, out, depth=0, budget=None):
    """Append `value` to `out` as tagged JSON text; objects that are not data become handles."""
    budget = budget if budget is not None else [MAX_NODES]
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise _TooBig("the result is too large or too deeply nested to send")
    kind = type(value)
    if value is None:
        out.append("null")
    elif kind is bool:
        out.append("true" if value else "false")
    elif kind is int:
        out.append(int.__repr__(value))
    elif kind is float:
        out.append(_float(value))
    elif kind is str:
        out.append(_quote(value))
    elif kind in _SEQUENCES:
        out.append('{"' + _SEQUENCES[kind] + '":[')
        for i, item in enumerate(value):
            if i:
                out.append(",")
            encode(item, out, depth + 1, budget)
        out.append("]}")
    elif kind is dict:
        out.append('{"D":[')
        for i, (k, v) in enumerate(value.items()):
            out.append(",[" if i else "[")
            encode(k, out, depth + 1, budget)
            out.append(",")
            encode(v, out, depth + 1, budget)
            out.append("]")
        out.append("]}")
    elif kind is bytes:
        out.append('{"B":"' + binascii.b2a_base64(value, newline=False).decode("ascii") + '"}')
    elif kind is complex:
        out.append('{"C":[' + _float(value.real) + "," + _float(value.imag) + "]}")
    else:
        for base in _CONVERT:  # subclasses (Counter, namedtuple, IntEnum) as plain data
            if isinstance(value, base):
                plain = base(value)
                if type(plain) is base:
                    return encode(plain, out, depth + 1, budget)
        if kind.__module__ == "numpy" and hasattr(value, "tolist"):
            return encode(value.tolist(), out, depth + 1, budget)  # numpy scalars and arrays
        key = len(_handles) + 1
        _handles[key] = value
        out.append('{"H":' + str(key) + "}")


def decode(data):
    """Arguments from the harness: tagged data, handles back to their objects."""
    if type(data) is not dict:
        return data
    ((tag, body),) = data.items()
    if tag == "H":
        return _handles[body]
    if tag in ("B", "C"):
        return body
    if tag == "D":
        return {decode(k): decode(v) for k, v in body}
    items = [decode(v) for v in body]
    return {"L": list, "T": tuple, "S": set, "F": frozenset}[tag](items)


def describe(exc):
    """An exception as JSON: its type, the builtin classes it derives from, and its text."""
    name = type(exc).__name__
    try:
        message = str(exc)
    except BaseException:
        message = ""
    text = f"{name}: {message}" if message else name
    bases = [c.__name__ for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c]
    quoted = ",".join(_quote(b) for b in bases)
    return f'{{"type":{_quote(name)},"bases":[{quoted}],"text":{_quote(text[:MAX_MESSAGE])}}}'


def answer(req):
    """Do what one request asks; return its result."""
    op = req["op"]
    if op == "load":
        _namespace.clear()
        _namespace.update({"__name__": "solution", "__builtins__": builtins})
        exec(compile(req["setup"] + "\n", "setup.py", "exec"), _namespace)
        exec(compile(req["solution"], "solution.py", "exec"), _namespace)
        return None
    if op == "get":
        name = req["name"]
        if name.startswith("__") or name not in _namespace:
            raise NameError(f"name {name!r} is not defined")
        return _namespace[name]
    target = _handles[req["target"]]
    if op == "call":
        return target(*[decode(a) for a in req["args"]], **{k: decode(v) for k, v in req["kwargs"]})
    if op == "getattr":
        return getattr(target, req["name"])
    if op == "len":
        return len(target)
    if op == "iter":
        return list(target)
    if op == "getitem":
        return target[decode(req["arg"])]
    if op == "contains":
        return decode(req["arg"]) in target
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
    sys.path[:] = sys.argv[3].split(os.pathsep)
    sys.set_int_max_str_digits(0)
    sys.stdin = io.StringIO()
    while True:
        size = _read_exact(req_fd, 4)
        body = size and _read_exact(req_fd, int.from_bytes(size, "big"))
        if not body:
            os._exit(0)
        req = marshal.loads(body)
        try:
            out = ['{"id":' + str(req["id"]) + ',"ok":']
            encode(answer(req), out)
            out.append("}")
        except BaseException as e:  # includes SystemExit from the solution
            out = ['{"id":' + str(req["id"]) + ',"exc":' + describe(e) + "}"]
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        data = "".join(out).encode("ascii")
        _write_all(reply_fd, len(data).to_bytes(4, "big") + data)


if __name__ == "__main__":
    main()
