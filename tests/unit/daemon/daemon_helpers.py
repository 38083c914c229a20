"""Raw socket client helpers for the daemon tests (no harp_submit dependency:
these tests check the wire format itself), and a way to be ``nobody``."""

from __future__ import annotations

import json
import os
import socket
from typing import Any


def call(path: str, request: Any, timeout: float = 10.0) -> dict[str, Any]:
    """One request, one answer: dict/list → JSON line; bytes sent as they are."""
    data = request if isinstance(request, bytes) else json.dumps(request).encode() + b"\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(data)
        return read_answer(s)


def read_answer(s: socket.socket) -> dict[str, Any]:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    assert buf.endswith(b"\n"), f"answer not newline-terminated: {buf!r}"
    assert buf.count(b"\n") == 1
    return json.loads(buf)


def as_nobody(fn: Any) -> Any:
    """Run fn() in a forked child as nobody; return its JSON-able result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            out = fn()
        except BaseException as e:  # report everything to the parent
            out = {"child_error": repr(e)}
            code = 1
        os.write(w, json.dumps(out).encode())
        os.close(w)
        os._exit(code)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)
