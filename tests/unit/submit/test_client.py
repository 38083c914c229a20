"""The socket client: where harpd is, the hard deadline, and every way an answer can be unusable."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from submit_fakes import FakeHarpd, decision

from harp_submit import client, config_file


def test_socket_path_order(tmp_path) -> None:
    cfg = tmp_path / "harpd.toml"
    cfg.write_text('[server]\nsocket = "/srv/harp/from-config.sock"\n')
    assert client.socket_path({"HARP_SOCKET": "/x.sock", "HARP_CONFIG": str(cfg)}) == "/x.sock"
    assert client.socket_path({"HARP_CONFIG": str(cfg)}) == "/srv/harp/from-config.sock"
    assert client.socket_path({"HARP_CONFIG": str(tmp_path / "missing.toml")}) == client.DEFAULT_SOCKET
    cfg.write_text("[server\nsocket=")  # broken TOML: harpd would refuse it; the client just uses the default
    assert client.socket_path({"HARP_CONFIG": str(cfg)}) == client.DEFAULT_SOCKET
    cfg.write_text("[store]\npath = '/x.db'\n")
    assert client.socket_path({"HARP_CONFIG": str(cfg)}) == client.DEFAULT_SOCKET


def test_timeout_from_environment() -> None:
    assert client.timeout_s({}) == (2.0, None)
    assert client.timeout_s({"HARP_TIMEOUT": "0.25"}) == (0.25, None)
    for bad in ("abc", "0", "-1", "nan", "1e9"):
        value, warning = client.timeout_s({"HARP_TIMEOUT": bad})
        assert value == 2.0 and warning and "HARP_TIMEOUT" in warning


def test_call_round_trip(short_dir) -> None:
    with FakeHarpd(short_dir / "h.sock", decision()) as server:
        answer = client.call(server.path, {"op": "predict", "job": {"job_name": "x"}}, 2.0)
    assert answer["ok"] is True and answer["decision"]["model"] == "fake"
    assert server.requests == [{"v": 1, "op": "predict", "job": {"job_name": "x"}}]
    assert server.raw[0].endswith(b"}")  # one line, compact


def test_no_daemon_is_reported_at_once(short_dir) -> None:
    """A missing socket is known at once: the client does not sit out its (here one hour's) timeout."""
    t0 = time.monotonic()
    with pytest.raises(client.HarpdUnavailable) as info:
        client.call(str(short_dir / "absent.sock"), {"op": "health"}, 3600.0)
    assert time.monotonic() - t0 < 60  # generous for a busy machine, far below the timeout
    assert "not running" in info.value.reason and not info.value.reachable


def test_a_dead_socket_file_is_named_as_such(short_dir) -> None:
    path = str(short_dir / "dead.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()  # the file stays, nobody listens: a SIGKILLed harpd's socket
    with pytest.raises(client.HarpdUnavailable) as info:
        client.call(path, {"op": "health"}, 2.0)
    # not "no socket at": the socket file is there, the connection was refused
    assert info.value.reason == f"harpd is not answering at {path} (connection refused; stale socket?)"
    assert not info.value.reachable
    with pytest.raises(client.HarpdUnavailable) as info:
        client.call(str(short_dir / "absent.sock"), {"op": "health"}, 2.0)
    assert info.value.reason == f"harpd is not running (no socket at {short_dir / 'absent.sock'})"


class StepClock:
    """A clock that moves only when read, or when a test moves it: deadlines without racing real time."""

    def __init__(self, step: float = 0.0):
        self.now = 1000.0
        self.step = step
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        self.now += self.step
        return self.now


def test_a_stalled_daemon_costs_at_most_the_timeout(short_dir) -> None:
    with FakeHarpd(short_dir / "h.sock") as server:
        server.delay_s = 60.0  # far longer than anything the client may wait
        t0 = time.monotonic()
        with pytest.raises(client.HarpdUnavailable) as info:
            client.call(server.path, {"op": "predict", "job": {}}, 0.3)
        elapsed = time.monotonic() - t0
    # socket timeouts never fire early; the upper bound is slack for a busy machine, far below the stall
    assert 0.25 < elapsed < 30
    assert "within 0.3 s" in info.value.reason and info.value.reachable


def test_the_deadline_is_measured_on_the_clock_given(short_dir) -> None:
    """Each reading of the clock moves it 1 s: a 2.5 s budget is spent before harpd's answer is read."""
    clock = StepClock(step=1.0)
    with FakeHarpd(short_dir / "h.sock") as server:
        with pytest.raises(client.HarpdUnavailable) as info:
            client.call(server.path, {"op": "health"}, 2.5, clock=clock)
        assert "within 2.5 s" in info.value.reason and info.value.reachable
        assert clock.reads >= 2
        # the same call on a clock that stands still is answered: only the clock made it give up
        assert client.call(server.path, {"op": "health"}, 2.5, clock=StepClock())["ok"] is True


def test_the_deadline_is_total_not_per_read(short_dir) -> None:
    """A server trickling its answer one byte at a time must not keep the client past its deadline.

    The clock is the number of bytes sent so far times 0.1 s: after six bytes the
    0.5 s budget is spent, however fast or slow this machine runs the two threads,
    and the answer is 28 bytes long.
    """
    answer = b'{"ok": true, "decision": {}}'
    path = str(short_dir / "trickle.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    sent = [0]

    def trickle() -> None:
        conn, _ = srv.accept()
        conn.recv(65536)
        try:
            for ch in answer:
                conn.sendall(bytes([ch]))
                sent[0] += 1
                time.sleep(0.05)
        except OSError:
            pass
        conn.close()

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    with pytest.raises(client.HarpdUnavailable) as info:
        client.call(path, {"op": "predict"}, 0.5, clock=lambda: 1000.0 + 0.1 * sent[0])
    assert "within 0.5 s" in info.value.reason
    thread.join(30)
    srv.close()
    # the same trickle on a clock that stands still is read to its end: the deadline did it above
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    os.unlink(path)
    srv.bind(path)
    srv.listen(1)
    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    assert client.call(path, {"op": "predict"}, 60.0, clock=StepClock())["ok"] is True
    thread.join(30)
    srv.close()


@pytest.mark.parametrize(
    "raw, words",
    [
        (b"this is not json\n", "not JSON"),
        (b"[1, 2]\n", "not a JSON object"),
        (b'{"ok": false, "error": "predictor exploded\\nbadly"}\n', "harpd refused: predictor exploded badly"),
        (b'{"ok": "yes"}\n', "harpd refused"),
        (b"\n", "without an answer"),
        (None, "without an answer"),
    ],
)
def test_unusable_answers(short_dir, raw: bytes | None, words: str) -> None:
    with FakeHarpd(short_dir / "h.sock") as server:
        server.predict = lambda req: raw
        with pytest.raises(client.HarpdUnavailable) as info:
            client.call(server.path, {"op": "predict"}, 2.0)
    assert words in info.value.reason and info.value.reachable


def test_oversized_answer_is_refused(short_dir) -> None:
    with FakeHarpd(short_dir / "h.sock") as server:
        server.predict = lambda req: b"x" * (client.MAX_ANSWER + 10)
        with pytest.raises(client.HarpdUnavailable) as info:
            client.call(server.path, {"op": "predict"}, 2.0)
    assert "too large" in info.value.reason


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_json_helpers_agree_with_the_json_module(value) -> None:
    text = client.dumps(value)
    assert json.loads(text) == value
    assert client.loads(json.dumps(value)) == value


@pytest.mark.parametrize("text", ["", "x", '{"a":1} x', "[1,", "NaN", '{"a": Infinity}', "[" * 100000])
def test_loads_rejects_non_json(text: str) -> None:
    with pytest.raises(ValueError):
        client.loads(text)


# --- reading [server] socket without importing tomllib (when that is safe) ---------------

REPO_TOML = __import__("pathlib").Path(__file__).resolve().parents[3] / "etc" / "harpd.toml"
KEYS = [("server", "socket"), ("client", "servers")]


def test_the_shipped_config_is_read_without_tomllib() -> None:
    import tomllib

    text = REPO_TOML.read_text()
    data = tomllib.loads(text)
    expected = {(t, k): data[t][k] for t, k in KEYS if k in data.get(t, {})}
    assert ("server", "socket") in expected and config_file.simple_values(text, KEYS) == expected


toml_lines = st.sampled_from(
    [
        "[server]",
        "[store]",
        "[server.extra]",
        "[ server ]",
        "[[jobs]]",
        "# comment",
        "",
        'socket = "/run/a.sock"',
        "socket = '/run/b.sock'",
        'socket = "/c.sock" # note',
        'socket = "a\\\\b"',
        'socket = """/m.sock"""',
        "socket = 5",
        'path = "/var/lib/x.db"',
        'server.socket = "/dotted.sock"',
        'server = { socket = "/inline.sock" }',
        '"socket" = "/quoted.sock"',
        "mode = 0o666",
        "a.b = 1",
    ]
)


@given(st.lists(toml_lines, max_size=8))
def test_the_fast_reader_agrees_with_tomllib_whenever_it_answers(lines: list[str]) -> None:
    import tomllib

    text = "\n".join(lines) + "\n"
    fast = config_file.simple_values(text, [("server", "socket")])
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return  # harpd refuses such a file: no daemon to find either way
    server = data.get("server", {})
    expected = server.get("socket") if isinstance(server, dict) else None
    if fast is not config_file.UNSURE:
        assert fast.get(("server", "socket")) == expected  # type: ignore[attr-defined]
    # and socket_path gives tomllib's answer in every case
    import os
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as fh:
        fh.write(text)
    try:
        got = client.socket_path({"HARP_CONFIG": fh.name})
    finally:
        os.unlink(fh.name)
    assert got == (expected if isinstance(expected, str) and expected else client.DEFAULT_SOCKET)
