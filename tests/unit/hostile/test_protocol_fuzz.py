"""The socket is the trust boundary: hostile bytes get an error line, never a crash.

Three layers, each fuzzed with hypothesis:

* ``protocol.parse_request`` on arbitrary bytes and on mutated valid
  requests: it returns a validated model or raises ``ProtocolError``, nothing
  else (any other exception would reach the server's catch-all, which logs a
  traceback and hangs up without an answer);
* ``Handlers.handle`` on every request that does validate: it answers, never
  raises, and the answer encodes to one JSON line;
* a live ``Server`` over a real socket, fed random bytes in random chunks,
  sometimes closing early: every complete request gets exactly one JSON line
  with a boolean ``ok``, and the daemon answers ``health`` afterwards.

The bench script ``bench/fuzz_protocol.py`` runs the same properties far
longer (atheris, coverage-guided) against a real harpd process.
"""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harpd import protocol as p
from harpd.daemon.handlers import AdminActions, Handlers, Peer
from harpd.daemon.server import Server, ServerLimits
from harpd.store import Store
from tests.helpers.fake_slurm import FakeSlurm
from tests.helpers.wait import wait_for

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
SOCKET_FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))

VALID = [
    {"v": 1, "op": "health"},
    {"v": 1, "op": "status", "job_id": "12"},
    {
        "v": 1,
        "op": "predict",
        "job": {
            "partition": "short",
            "request": {"time_s": 600, "mem_mb": 100},
            "commands": ["srun ./a.out"],
            "harp_lines": ["#HARP dnn model=x"],
        },
    },
    {
        "v": 1,
        "op": "register",
        "job_id": "12_3",
        "job": {"argv": ["-t", "5", "x.sh"], "sbatch_env": {"SBATCH_TIMELIMIT": "5"}},
        "original": {"time_s": 300},
        "submitted": {"time_s": 300},
        "decision": {"changes": [{"option": "time", "value": "00:05:00"}], "limits": {"partition": "short"}},
    },
    {"v": 1, "op": "import", "path": "/nonexistent/trace.swf"},
    {"v": 1, "op": "retrain"},
    {"v": 1, "op": "reload"},
]

# JSON values that stress a validator: odd types, huge and tiny numbers, long and odd strings
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, -1, 2**31, 2**63, 2**64, 10**4000]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(
        ["", "12", "12_3", "12+1", "-1", "1e9", "0-01:00:00", "4G", "x" * 5000, "\x00", "\u2028", "../../etc/passwd"]
    ),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=25,
)
KEYS = [
    "v",
    "op",
    "job",
    "job_id",
    "path",
    "original",
    "submitted",
    "decision",
    "request",
    "changes",
    "limits",
    "time_s",
    "mem_mb",
    "partition",
    "argv",
    "sbatch_env",
    "harp_lines",
    "commands",
    "option",
    "value",
    "array_size",
    "cpus_per_task",
    "gres",
    "explain",
    "model",
]


def _dumps(obj: object) -> bytes:
    # allow_nan: NaN/Infinity are what a hostile client may well send
    return json.dumps(obj, allow_nan=True).encode()


@st.composite
def mutated_requests(draw) -> bytes:
    """A valid request with keys replaced, deleted or added at any depth."""
    req = json.loads(json.dumps(draw(st.sampled_from(VALID))))
    for _ in range(draw(st.integers(1, 4))):
        node = req
        path = draw(st.lists(st.sampled_from(KEYS), max_size=3))
        for key in path[:-1]:
            nxt = node.get(key) if isinstance(node, dict) else None
            if not isinstance(nxt, dict):
                break
            node = nxt
        key = path[-1] if path else draw(st.sampled_from(KEYS))
        action = draw(st.sampled_from(["set", "delete", "add"]))
        if action == "delete":
            node.pop(key, None)
        else:
            node[key if action == "set" else draw(st.text(max_size=8))] = draw(json_values)
    return _dumps(req)


def _parse(data: bytes):
    try:
        return p.parse_request(data)
    except p.ProtocolError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg and len(msg) <= 300, msg
        return None


@FUZZ
@given(st.binary(max_size=2000))
def test_parse_request_random_bytes(data: bytes) -> None:
    _parse(data)


@FUZZ
@given(json_values)
def test_parse_request_random_json(value: object) -> None:
    _parse(_dumps(value))


@FUZZ
@given(mutated_requests())
def test_parse_request_mutated_requests(data: bytes) -> None:
    _parse(data)


def test_parse_request_known_nasties() -> None:
    nasties = [
        b'{"v": ' + b"9" * 5000 + b"}",  # int over Python's 4300-digit limit: a ValueError, not JSONDecodeError
        b'{"op": "status", "job_id": ' + b"1" * 5000 + b"}",
        b"[" * 100_000 + b"]" * 100_000,  # recursion
        b'{"op": "health", "v": NaN}',
        b'{"op": "health", "v": Infinity}',
        b'{"op": "health", "v": true}',
        b'{"op": "health", "op": "retrain"}',  # duplicate keys: the last one wins in json.loads
        b'{"op": "status", "job_id": "1\\n2"}',
        b'{"op": "status", "job_id": "12; touch /tmp/x"}',
        b'{"op": "import", "path": "\\u0000"}',
        b"\xef\xbb\xbf{\"op\": \"health\"}",
    ]
    for data in nasties:
        got = _parse(data)
        if got is not None:
            assert got.op in p.OPS
    # a shell-ish or multi-line job id never validates
    assert _parse(b'{"op": "status", "job_id": "12; touch /tmp/x"}') is None
    assert _parse(b'{"op": "status", "job_id": "1\\n2"}') is None


# ------------------------------------------------------------------ handlers


@pytest.fixture(scope="module")
def handlers():
    d = tempfile.mkdtemp(prefix="hf-")
    store = Store.open(Path(d) / "harp.db")
    h = Handlers(
        store,
        slurm=FakeSlurm(),
        actions=AdminActions(retrain=lambda: {"trained": 0}, reload=lambda: None, importer=lambda path, store: 0),
    )
    yield h
    store.close()
    shutil.rmtree(d, ignore_errors=True)


USER = Peer(pid=1, uid=4242, gid=4242, user="fuzzer", groups=frozenset({4242}))


@FUZZ
@given(mutated_requests())
def test_handlers_answer_every_valid_request(handlers, data: bytes) -> None:
    req = _parse(data)
    if req is None:
        return
    answer = handlers.handle(USER, req)
    line = p.encode(answer)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    obj = json.loads(line)
    assert isinstance(obj["ok"], bool)
    if req.op in p.ADMIN_OPS:  # a plain user never gets an admin action done
        assert obj["ok"] is False and "admin" in obj["error"]
    if not obj["ok"]:
        assert "internal error" not in obj["error"], obj["error"]


# ---------------------------------------------------------------- live socket


@pytest.fixture(scope="module")
def live_server():
    d = tempfile.mkdtemp(prefix="hfz-", dir="/tmp")
    store = Store.open(Path(d) / "harp.db")
    srv = Server(
        Path(d) / "s.sock", Handlers(store), limits=ServerLimits(request_timeout_s=2.0, max_request_bytes=64 * 1024)
    )
    srv.bind()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    t.join(15)
    srv.close()
    store.close()
    shutil.rmtree(d, ignore_errors=True)


def _exchange(path: str, chunks: list[bytes], close_write: bool) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(path)
        try:
            for c in chunks:
                s.sendall(c)
            if close_write:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before reading everything
        buf = b""
        try:
            while chunk := s.recv(65536):
                buf += chunk
        except ConnectionResetError:
            pass
        return buf


payloads = st.one_of(
    st.binary(max_size=3000),
    mutated_requests(),
    st.builds(_dumps, json_values),
    st.sampled_from([b"", b"\n", b"\n\n\n", b"{", b"\x00" * 100, b"{}" * 1000]),
)


@SOCKET_FUZZ
@given(payload=payloads, cuts=st.lists(st.integers(0, 3000), max_size=4), newline=st.booleans())
def test_live_server_answers_one_line_to_anything(live_server, payload: bytes, cuts: list[int], newline: bool) -> None:
    data = payload + (b"\n" if newline else b"")
    points = sorted({c for c in cuts if 0 < c < len(data)})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]
    answer = _exchange(str(live_server.path), chunks, close_write=True)
    request = data.split(b"\n", 1)[0]
    if not request.strip():
        # nothing but blanks before the first newline: the server takes it as a probe (as a
        # connect-and-close from a second harpd checking for a live one) and may just close
        assert answer in (b"",) or answer.endswith(b"\n")
        return
    assert answer.endswith(b"\n") and answer.count(b"\n") == 1, answer[:200]
    obj = json.loads(answer)
    assert isinstance(obj["ok"], bool)
    if not obj["ok"]:
        assert obj["error"] and "internal error" not in obj["error"], obj["error"]


def test_live_server_survives_the_fuzzing(live_server) -> None:
    for nasty in (b'{"v": ' + b"9" * 5000 + b"}\n", b"\xff" * 70_000, b"[" * 50_000 + b"\n"):
        answer = _exchange(str(live_server.path), [nasty], close_write=True)
        assert json.loads(answer)["ok"] is False
    ok = json.loads(_exchange(str(live_server.path), [b'{"v":1,"op":"health"}\n'], close_write=False))
    assert ok["ok"] is True and ok["store"] == "ok"
    # no connection thread left hanging (each ends just after closing its socket: allow a moment)
    wait_for("every connection thread to end", lambda: live_server.active == 0, interval=0.01)
