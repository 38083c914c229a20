"""Test doubles for harp-submit: a protocol-speaking harpd and a recording sbatch.

``FakeHarpd`` speaks the socket protocol of docs/design.md (one JSON line in,
one JSON line out, per connection) and can also misbehave on purpose: stall,
answer garbage, close without answering.  It records every request.  It is
standard library only so the Slurm integration test and the benchmark can
use it too (``python submit_fakes.py SOCKET [DECISION_JSON]`` serves until
killed).

``make_fake_sbatch`` writes an executable that records its argv, standard
input, script file and SBATCH_* environment as one JSON line per run, then
prints what a real sbatch 22.05 prints (recorded outputs in fixtures/).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures"

Behaviour = Callable[[dict[str, Any]], "bytes | None"]


def decision(
    *changes: dict[str, Any],
    partition: str = "debug",
    max_time_s: int | None = 86400,
    max_mem_mb: int | None = 8000,
    max_cpus: int | None = 2,
    model: str = "fake",
    explain: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Decision as harpd would send it."""
    return {
        "changes": list(changes),
        "limits": {"partition": partition, "max_time_s": max_time_s, "max_mem_mb": max_mem_mb, "max_cpus": max_cpus},
        "model": model,
        "explain": explain if explain is not None else {"n_similar": 37},
    }


def change(
    option: str, value: str, reason: str = "95th percentile of 37 similar runs", old: str | None = None
) -> dict[str, Any]:
    return {"option": option, "value": value, "old": old, "reason": reason}


class FakeHarpd:
    """A harpd on a Unix socket that answers predict with a fixed decision."""

    def __init__(self, path: str | os.PathLike[str], decision_: dict[str, Any] | None = None):
        self.path = str(path)
        self.decision = decision_ if decision_ is not None else decision()
        self.requests: list[dict[str, Any]] = []
        self.times: list[float] = []  # time.monotonic() at which each request arrived
        self.raw: list[bytes] = []
        self.predict: Behaviour | None = None  # override the predict answer
        self.register: Behaviour | None = None
        self.delay_s = 0.0  # before answering predict
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def __enter__(self) -> FakeHarpd:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.path)
        sock.listen(128)
        sock.settimeout(0.2)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(5)
        if self._sock:
            self._sock.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def arrival(self, op: str) -> float | None:
        """When the first ``op`` request arrived (time.monotonic())."""
        with self._lock:
            for req, t in zip(self.requests, self.times):
                if req.get("op") == op:
                    return t
        return None

    def ops(self, op: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if r.get("op") == op]

    def wait_for(self, op: str, n: int = 1, timeout: float = 60.0) -> list[dict[str, Any]]:
        """The ``op`` requests once at least ``n`` have arrived; AssertionError naming them if not within ``timeout``.

        (The same loop as tests/helpers/wait.py, kept here so this file stays
        standard library only and runnable on its own.)
        """
        deadline = time.monotonic() + timeout
        while True:
            got = self.ops(op)
            if len(got) >= n:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{n} {op} request(s) to the fake harpd: not within {timeout:g} s (arrived: {got!r})"
                )
            time.sleep(0.01)

    def _serve(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            buf = b""
            try:
                while b"\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
            except OSError:
                return
            line = buf.split(b"\n", 1)[0]
            with self._lock:
                self.raw.append(line)
            try:
                req = json.loads(line)
            except ValueError:
                conn.sendall(b'{"ok": false, "error": "not JSON"}\n')
                return
            with self._lock:
                self.requests.append(req)
                self.times.append(time.monotonic())
            op = req.get("op")
            if op == "predict":
                if self.delay_s:
                    time.sleep(self.delay_s)
                out = self.predict(req) if self.predict else _line({"ok": True, "decision": self.decision})
            elif op == "register":
                out = self.register(req) if self.register else _line({"ok": True})
            elif op == "health":
                out = _line({"ok": True, "version": "fake", "store": "ok", "models": {}})
            else:
                out = _line({"ok": False, "error": f"unknown op {op!r}"})
            if out is not None:
                try:
                    conn.sendall(out)
                except OSError:
                    pass


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode() + b"\n"


FAKE_SBATCH = r'''#!{python} -S
"""Fake sbatch: records how it was called, prints what sbatch 22.05 prints."""
import json, os, sys
argv = sys.argv[1:]
stdin = b""
if not os.isatty(0):
    try:
        while True:
            more = os.read(0, 1 << 20)
            if not more:
                break
            stdin += more
    except OSError:
        pass
script = None
for a in argv:
    if not a.startswith("-") and os.path.exists(a) and os.path.isfile(a):
        try:
            with open(a, "rb") as fh:
                script = fh.read().decode("utf-8", "surrogateescape")
        except OSError:
            pass
        break
env = {{k: v for k, v in os.environ.items() if k.startswith("SBATCH_")}}
log = os.environ.get("FAKE_SBATCH_LOG")
if log:
    with open(log, "a") as fh:
        fh.write(json.dumps({{"argv": argv, "stdin": stdin.decode("utf-8", "surrogateescape"),
                             "script": script, "env": env, "cwd": os.getcwd()}}) + "\n")
reject = os.environ.get("FAKE_SBATCH_REJECT")
if reject and (reject in " ".join(argv) or reject in stdin.decode("utf-8", "replace") or reject in (script or "")):
    sys.stderr.write(os.environ.get("FAKE_SBATCH_REJECT_MSG",
                                    "sbatch: error: Batch job submission failed: "
                                    "Requested node configuration is not available\n"))
    sys.exit(1)
jid = os.environ.get("FAKE_SBATCH_JOBID", "4242")
out = os.environ.get("FAKE_SBATCH_OUT")
if os.environ.get("FAKE_SBATCH_OUT_FILE"):
    with open(os.environ["FAKE_SBATCH_OUT_FILE"]) as fh:
        out = fh.read()
if out is None:
    out = jid + "\n" if "--parsable" in argv else "Submitted batch job " + jid + "\n"
sys.stdout.write(out)
sys.stdout.flush()
err = os.environ.get("FAKE_SBATCH_ERR")
if err:
    sys.stderr.write(err)
sig = os.environ.get("FAKE_SBATCH_SIGNAL")
if sig:
    os.kill(os.getpid(), int(sig))
sys.exit(int(os.environ.get("FAKE_SBATCH_RC", "0")))
'''


def make_fake_sbatch(directory: Path) -> Path:
    path = directory / "sbatch"
    path.write_text(FAKE_SBATCH.format(python=sys.executable))
    path.chmod(0o755)
    return path


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


if __name__ == "__main__":  # python submit_fakes.py SOCKET [DECISION_JSON]
    server = FakeHarpd(sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else decision())
    server.start()
    print("ready", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
