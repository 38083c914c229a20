"""harpd over TCP: identity from a MUNGE credential, refusals in one line, answers sealed.

munged is replaced by tests/helpers/fake_munge.py here; tests/slurm/test_tcp_munge.py
runs the same paths against the local cluster's real munged.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from harp_submit import client, route, sealed
from harpd.daemon.handlers import Handlers
from harpd.daemon.server import ServerError
from harpd.daemon.tcp_door import TcpDoor, check_munge, doors_for
from tests.helpers.fake_munge import DeadMunge, FakeMunge

HEALTH = {"op": "health"}


class Recording(Handlers):
    """Handlers that remember who called."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.peers: list[Any] = []

    def handle(self, peer, req):
        self.peers.append(peer)
        return super().handle(peer, req)


@pytest.fixture
def munged() -> FakeMunge:
    return FakeMunge()


@pytest.fixture
def tcp(serve, store, munged):
    """A running server with a TCP door on a free loopback port; (running server, door, handlers)."""
    handlers = Recording(store)
    door = TcpDoor("127.0.0.1:0", munged)
    running = serve(handlers=handlers, doors=[door])
    return running, door, handlers


def _raw(port: int, data: bytes, timeout: float = 10.0) -> list[bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return buf.split(b"\n")[:-1]


def test_a_user_is_known_by_the_credential_and_the_answer_is_sealed(tcp, munged) -> None:
    running, door, handlers = tcp
    user = munged.as_user(1001, 1002)
    answer = client.call_tcp(("127.0.0.1", door.port), HEALTH, 10, user)
    assert answer["ok"] is True
    peer = handlers.peers[-1]
    assert (peer.uid, peer.gid, peer.pid) == (1001, 1002, 0) and peer.host.startswith("127.0.0.1:")
    # the wire: credential line, JSON line, both ways
    data, nonce = sealed.seal_request(user, b'{"v":1,"op":"health"}')
    cred, body = _raw(door.port, data)
    sealed.open_answer(munged, nonce, cred, body, (0,))
    assert b'"ok":true' in body


@pytest.mark.parametrize(
    "how, needle",
    [
        ("tampered", "changed after the credential was made"),
        ("replayed", "credential replayed"),
        ("foreign", "this cluster's MUNGE key"),
        ("forged", "malformed credential"),
        ("bare", "credential refused: no MUNGE credential"),
    ],
)
def test_bad_credentials_are_refused_in_one_line_and_logged_with_the_peer(tcp, munged, caplog, how, needle) -> None:
    running, door, handlers = tcp
    body = b'{"v":1,"op":"health"}'
    maker = munged.with_key("another cluster") if how == "foreign" else munged
    data, _ = sealed.seal_request(maker, body)
    if how == "replayed":
        assert b'"ok":true' in _raw(door.port, data)[1]
    elif how == "tampered":
        data = data.replace(b"health", b"retrain")
    elif how == "forged":
        data = b"MUNGE:AAAAforged:\n" + body + b"\n"
    elif how == "bare":
        data = body + b"\n" + body + b"\n"
    seen = len(handlers.peers)
    with caplog.at_level(logging.WARNING, logger="harpd.server"):
        lines = _raw(door.port, data)
    assert len(lines) == 1 and needle in lines[0].decode(), lines
    assert len(handlers.peers) == seen  # never reached an operation
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1 and "127.0.0.1:" in refusals[0] and needle in refusals[0]


def test_the_client_does_not_believe_a_port_squatter(short_dir: Path, munged) -> None:
    """Something else on harpd's port: unsealed, or sealed by the wrong uid: the job goes in unchanged."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    limits = b'{"ok":true,"changes":[{"option":"time","value":"1"}]}'
    squatter = munged.as_user(1001)

    def squat() -> None:
        for mode in ("unsealed", "wrong uid", "wrong request"):
            conn, _ = listener.accept()
            with conn:
                data = b""
                while data.count(b"\n") < 2:
                    data += conn.recv(65536)
                if mode == "unsealed":
                    conn.sendall(limits + b"\n")
                elif mode == "wrong uid":
                    conn.sendall(sealed.seal_answer(squatter, b"f" * 32, limits))
                else:
                    conn.sendall(sealed.seal_answer(munged, b"f" * 32, limits))

    t = threading.Thread(target=squat, daemon=True)
    t.start()
    reasons = []
    for _ in range(3):
        with pytest.raises(client.HarpdUnavailable) as err:
            client.call_tcp(("127.0.0.1", port), {"op": "predict", "job": {}}, 10, munged)
        assert not err.value.final
        reasons.append(err.value.reason)
    t.join(10)
    listener.close()
    assert "unsealed answer" in reasons[0]
    assert "uid 1001, not by harpd" in reasons[1]
    assert "another request" in reasons[2]


def test_servers_are_tried_in_order_within_one_budget(tcp, munged, monkeypatch) -> None:
    running, door, handlers = tcp
    closed = socket.create_server(("127.0.0.1", 0))
    dead_port = closed.getsockname()[1]
    closed.close()
    where = route.Route("/nonexistent/harpd.sock", (("127.0.0.1", dead_port), ("127.0.0.1", door.port)))
    import harp_submit.munge

    monkeypatch.setattr(harp_submit.munge, "Munge", lambda socket=None: munged)
    assert client.ask(where, HEALTH, 10)["ok"] is True
    # a refusal harpd vouches for ends the search: no other server asked
    with pytest.raises(client.HarpdUnavailable) as err:
        client.call_tcp(("127.0.0.1", door.port), {"op": "status", "job_id": "1"}, 10, munged)
    assert err.value.final and "knows no job 1" in err.value.reason


def test_listen_without_munge_is_one_line_at_start(monkeypatch) -> None:
    monkeypatch.delenv("HARP_MUNGE_SOCKET", raising=False)
    with pytest.raises(ServerError, match=r"server.listen is set but MUNGE does not work here"):
        check_munge(DeadMunge())
    with pytest.raises(ServerError, match=r"server.listen is set but MUNGE does not work here"):
        doors_for(["127.0.0.1:0"], "/nonexistent/munge.sock")
    assert doors_for([], "/nonexistent/munge.sock") == []


def test_a_taken_port_is_one_line(munged) -> None:
    holder = socket.create_server(("127.0.0.1", 0))
    try:
        door = TcpDoor(f"127.0.0.1:{holder.getsockname()[1]}", munged)
        with pytest.raises(ServerError, match="Address already in use"):
            door.bind()
    finally:
        holder.close()


def test_the_real_harpd_refuses_tcp_without_munged(short_dir: Path) -> None:
    cfg = short_dir / "harpd.toml"
    cfg.write_text(
        f'[server]\nsocket = "{short_dir}/h.sock"\nlisten = ["127.0.0.1:16999"]\n'
        f'[store]\npath = "{short_dir}/harp.db"\n[munge]\nsocket = "{short_dir}/no-munged.sock"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARP_")}
    out = subprocess.run(
        [sys.executable, "-m", "harpd.daemon.main", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 1, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harpd: server.listen is set but MUNGE does not work here"), lines
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("server.listen", '["0.0.0.0"]', "not HOST:PORT"),
        ("server.listen", '["0.0.0.0:99999"]', "port must be"),
        ("server.listen", '"0.0.0.0:6820"', "must be a list"),
        ("client.servers", '["harp1:6820", "harp2"]', "'harp2' is not HOST:PORT"),
        ("client.servers", '["::1:6820"]', "IPv6 address in brackets"),
        ("client.harpd_uid", "-1", "at least 0"),
    ],
)
def test_bad_addresses_stop_harpd_naming_the_key(short_dir: Path, key: str, value: str, needle: str) -> None:
    cfg = short_dir / "harpd.toml"
    table, name = key.split(".")
    cfg.write_text(f"[{table}]\n{name} = {value}\n")
    out = subprocess.run(
        [sys.executable, "-m", "harpd.daemon.main", "--config", str(cfg), "--check-config"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and key in out.stderr and needle in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
