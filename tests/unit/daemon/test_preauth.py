"""No slot before the credential: idle TCP sockets never starve real callers, and the log stays small.

munged is tests/helpers/fake_munge.py here; tests/slurm/test_tcp_flood.py runs
the flood against a real harpd with the cluster's munged.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from contextlib import ExitStack
from typing import Any

import pytest

from harp_submit import client
from harpd.daemon.handlers import Handlers
from harpd.daemon.refusals import RefusalLog
from harpd.daemon.tcp_door import TcpDoor
from tests.helpers.fake_munge import FakeMunge
from tests.helpers.wait import wait_for

HEALTH = {"op": "health"}


def _idle(stack: ExitStack, port: int, n: int, source: str) -> list[socket.socket]:
    """``n`` connections to the port from ``source`` (a loopback address), each sending nothing."""
    out = []
    for _ in range(n):
        s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        s.bind((source, 0))
        s.settimeout(10)
        s.connect(("127.0.0.1", port))
        out.append(s)
    return out


@pytest.fixture
def munged() -> FakeMunge:
    return FakeMunge()


@pytest.fixture
def tcp_server(serve, store, munged):
    def start(handlers: Handlers | None = None, **kw: Any):
        door = TcpDoor("127.0.0.1:0", munged)
        return serve(handlers=handlers or Handlers(store), doors=[door], **kw), door

    return start


def test_hundreds_of_idle_connections_hold_no_slot(tcp_server, munged) -> None:
    running, door = tcp_server(max_clients=4, max_unauthenticated=1000, max_unauthenticated_per_peer=400)
    with ExitStack() as stack:
        _idle(stack, door.port, 300, "127.0.0.2")
        wait_for("300 connections waiting", lambda: len(running.server.preauth) == 300, interval=0.02)
        assert running.server.active == 0  # not one worker slot
        assert running.call(HEALTH)["ok"] is True  # the Unix socket
        assert client.call_tcp(("127.0.0.1", door.port), HEALTH, 10, munged.as_user(1001))["ok"] is True


def test_a_flood_from_the_same_host_pushes_out_its_own_idle_sockets(tcp_server, munged, caplog) -> None:
    running, door = tcp_server(max_clients=4, max_unauthenticated_per_peer=8, refusal_log_interval_s=60)
    with ExitStack() as stack, caplog.at_level(logging.WARNING, logger="harpd.server"):
        held = _idle(stack, door.port, 200, "127.0.0.1")
        wait_for(
            "oldest pushed out",
            lambda: len(running.server.preauth) <= 8 and running.server.refusals.total >= 192,
            interval=0.02,
        )
        # a real client on the same host still gets in: it pushes out the oldest idle socket
        assert client.call_tcp(("127.0.0.1", door.port), HEALTH, 10, munged.as_user(1001))["ok"] is True
        closed = sum(1 for s in held[:150] if s.recv(4096).startswith(b'{"ok":false'))
        assert closed == 150  # each pushed-out socket got one answer line saying why
    lines = [r.getMessage() for r in caplog.records]
    assert 1 <= len(lines) <= 5, lines  # the first five at once, the rest summed up at the end of the interval
    assert all("127.0.0.1" in line for line in lines)


def test_a_silent_connection_is_closed_after_the_auth_deadline(tcp_server) -> None:
    running, door = tcp_server(auth_timeout_s=0.5)
    with socket.create_connection(("127.0.0.1", door.port), timeout=20) as s:
        start = time.monotonic()
        answer = s.recv(4096)
        assert b"no credential and request within 0.5s" in answer
        assert s.recv(4096) == b"" and time.monotonic() - start < 15
    assert len(running.server.preauth) == 0


def test_the_unix_socket_keeps_its_reserved_slots(tcp_server, store, munged) -> None:
    """TCP callers (authenticated ones too) take at most max_clients - unix_reserved_clients slots."""
    release = threading.Event()

    class Slow(Handlers):
        def handle(self, peer, req):
            if peer.host is not None:  # TCP callers hold their slot until released
                release.wait(30)
            return super().handle(peer, req)

    running, door = tcp_server(handlers=Slow(store), max_clients=3, unix_reserved_clients=1)
    results: list[Any] = []
    slow = [
        threading.Thread(
            target=lambda: results.append(client.call_tcp(("127.0.0.1", door.port), HEALTH, 30, munged.as_user(1001)))
        )
        for _ in range(2)
    ]
    try:
        for t in slow:
            t.start()
        wait_for("two TCP callers in their slots", lambda: running.server.active == 2, interval=0.02)
        with pytest.raises(client.HarpdUnavailable, match=r"unsealed|busy"):
            client.call_tcp(("127.0.0.1", door.port), HEALTH, 10, munged.as_user(1001))
        assert running.call(HEALTH)["ok"] is True  # the reserved slot
    finally:
        release.set()
        for t in slow:
            t.join(30)
    assert [r["ok"] for r in results] == [True, True]


def _answer(s: socket.socket) -> bytes:
    """The server's answer line (or what came before it closed)."""
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf


def test_a_garbage_request_is_refused_and_frees_its_peer_count(tcp_server, munged) -> None:
    running, door = tcp_server(max_unauthenticated_per_peer=2)
    preauth = running.server.preauth
    for _ in range(5):  # more than the per-peer limit, one after another: each is let in and refused
        # the worker frees the peer's count just after it answers: on a loaded host the next
        # connection can come first, so wait until the last one is freed (what this test is about)
        wait_for("the peer's count freed", lambda: preauth._count("127.0.0.1") == 0)
        with socket.create_connection(("127.0.0.1", door.port), timeout=10) as s:
            s.sendall(b"\x00\xff garbage\nmore garbage\n")
            assert b"credential refused" in _answer(s)  # the whole line: a loaded host may send it in pieces
    assert client.call_tcp(("127.0.0.1", door.port), HEALTH, 10, munged.as_user(1001))["ok"] is True


def test_an_oversized_unauthenticated_request_is_cut_off(tcp_server) -> None:
    running, door = tcp_server(max_request_bytes=1000)
    with socket.create_connection(("127.0.0.1", door.port), timeout=10) as s:
        s.sendall(b"x" * 5000)
        assert b"request over 1000 bytes" in s.recv(4096)
    assert len(running.server.preauth) == 0


def test_refusal_log_sums_up_an_interval() -> None:
    now = [0.0]
    records: list[str] = []

    class Log:
        def warning(self, fmt, *args):
            records.append(fmt % args)

    refusals = RefusalLog(Log(), 10.0, clock=lambda: now[0], burst=2)  # type: ignore[arg-type]
    for i in range(1002):
        refusals.refused("busy", f"10.0.0.{i % 3}:{4000 + i}", "64 clients")
    refusals.refused("credential refused", "[fe80::1]:5", "bad")
    assert records == ["refused 10.0.0.0:4000 (busy): 64 clients", "refused 10.0.0.1:4001 (busy): 64 clients"]
    now[0] = 11.0
    refusals.flush()
    assert len(records) == 3 and "refused 1001 more connection(s)" in records[2]
    assert "busy: 1000" in records[2] and "10.0.0.2 (334)" in records[2] and "[fe80::1] (1)" in records[2]
    refusals.flush()
    assert len(records) == 3 and refusals.total == 1003
    now[0] = 30.0
    for i in range(2):
        refusals.refused("busy", f"10.0.0.9:{i}", "64 clients")  # after a quiet interval: a whole burst again
    assert records[-2:] == ["refused 10.0.0.9:0 (busy): 64 clients", "refused 10.0.0.9:1 (busy): 64 clients"]
    refusals.refused("busy", "10.0.0.9:2", "64 clients")
    now[0] = 41.0
    for i in range(3, 6):  # the flood goes on: its summary, then one whole line, not a burst
        refusals.refused("busy", f"10.0.0.9:{i}", "64 clients")
    assert records[-2:] == [
        "refused 1 more connection(s) in the last 11s (busy: 1); top peers: 10.0.0.9 (1)",
        "refused 10.0.0.9:3 (busy): 64 clients",
    ]
