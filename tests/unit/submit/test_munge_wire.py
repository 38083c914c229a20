"""harp's own speaker of munged's message format, against a stand-in munged on a Unix socket.

The real munged is in tests/slurm/test_tcp_munge.py (libmunge and this code
read each other's credentials); here: the bytes on the wire, munged's
refusals, and what happens when a munged answers in a format harp does not
speak (libmunge takes over) or not at all.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harp_submit import munge as m


def _message(kind: int, body: bytes, version: int = 4, magic: int = 0x00606D4B) -> bytes:
    return magic.to_bytes(4, "big") + bytes((version, kind, 0)) + len(body).to_bytes(4, "big") + body


class FakeMunged:
    """Reads one request per connection and answers what ``reply`` makes of it."""

    def __init__(self, reply: Callable[[int, bytes], bytes]) -> None:
        self.reply = reply
        self.requests: list[tuple[int, int, bytes]] = []  # (version, kind, body)
        self.dir = tempfile.mkdtemp(prefix="fm-", dir="/tmp")
        self.path = str(Path(self.dir) / "munge.sock")
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            with conn:
                head = b""
                while len(head) < 11:
                    head += conn.recv(11 - len(head))
                n = int.from_bytes(head[7:11], "big")
                body = b""
                while len(body) < n:
                    body += conn.recv(n - len(body))
                self.requests.append((head[4], head[5], body))
                conn.sendall(self.reply(head[5], body))

    def close(self) -> None:
        self.srv.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


@pytest.fixture
def munged() -> Iterator[Callable[[Callable[[int, bytes], bytes]], FakeMunged]]:
    made: list[FakeMunged] = []

    def start(reply: Callable[[int, bytes], bytes]) -> FakeMunged:
        made.append(FakeMunged(reply))
        return made[-1]

    yield start
    for f in made:
        f.close()


def _dec_rsp(payload: bytes, uid: int, gid: int, err: int = 0, text: bytes = b"") -> bytes:
    body = bytes((err, len(text))) + text + bytes((1, 1, 1, 0)) + (300).to_bytes(4, "big")
    body += bytes((4,)) + bytes((127, 0, 0, 1)) + (1).to_bytes(4, "big") + (2).to_bytes(4, "big")
    body += uid.to_bytes(4, "big") + gid.to_bytes(4, "big") + b"\xff" * 8
    return _message(5, body + len(payload).to_bytes(4, "big") + payload)


def test_encode_asks_munged_as_libmunge_does_and_returns_the_credential(munged) -> None:
    cred = b"MUNGE:AwQFAAB=:"
    f = munged(lambda kind, body: _message(3, b"\x00\x00" + (len(cred) + 1).to_bytes(4, "big") + cred + b"\0"))
    got = m.Munge(f.path).encode(b"pay\x00load", ttl=7)
    assert got == cred
    ((version, kind, body),) = f.requests
    assert (version, kind) == (4, 2)
    # cipher, mac, zip munged's defaults, no realm, ttl, anyone may decode, the payload
    assert body == bytes((1, 1, 1, 0)) + (7).to_bytes(4, "big") + b"\xff" * 8 + (8).to_bytes(4, "big") + b"pay\x00load"


def test_decode_reads_the_callers_uid_gid_and_payload(munged) -> None:
    f = munged(lambda kind, body: _dec_rsp(b"harp1 answer", 1001, 1002))
    assert m.Munge(f.path).decode(b"MUNGE:xyz:") == (b"harp1 answer", 1001, 1002)
    ((_, kind, body),) = f.requests
    assert kind == 4 and body == (11).to_bytes(4, "big") + b"MUNGE:xyz:\0"


def test_munged_refusals_keep_munges_error_number(munged) -> None:
    f = munged(lambda kind, body: _dec_rsp(b"", 0, 0, err=17, text=b"Replayed credential\0"))
    with pytest.raises(m.MungeError) as exc:
        m.Munge(f.path).decode(b"MUNGE:xyz:")
    assert exc.value.code == 17 and exc.value.message == "credential replayed (munge error 17)"


def test_no_munged_is_a_socket_error_not_a_traceback() -> None:
    with pytest.raises(m.MungeError) as exc:
        m.Munge("/nonexistent/munge.sock").encode(b"x")
    assert exc.value.code == m.SOCKET and "/nonexistent/munge.sock" in exc.value.message


@pytest.mark.parametrize(
    "answer",
    [
        _message(3, b"\x00\x00" + (4).to_bytes(4, "big") + b"abc\0", version=5),  # a future format
        _message(3, b"\x00\x00", magic=0x12345678),  # not munged at all
        b"",  # closed without a word
    ],
)
def test_a_munged_speaking_another_format_is_left_to_libmunge(munged, monkeypatch, answer: bytes) -> None:
    f = munged(lambda kind, body: answer)
    calls: list[bool] = []

    def library(self: m.Munge, commands: bool = False) -> None:
        calls.append(commands)
        self._lib, self.via = None, "munge/unmunge commands"

    monkeypatch.setattr(m.Munge, "_use_library", library)
    monkeypatch.setattr(m, "_command_encode", lambda socket, payload, ttl: b"MUNGE:from-the-library:")
    mg = m.Munge(f.path)
    assert mg.via == m.WIRE
    assert mg.encode(b"x") == b"MUNGE:from-the-library:"
    assert calls == [False] and mg.via != m.WIRE
    mg.encode(b"y")  # the library from then on: munged is not asked in its old format again
    assert len(f.requests) == 1


def test_the_tcp_path_loads_no_ctypes(munged) -> None:
    cred = b"MUNGE:c:"
    f = munged(lambda kind, body: _message(3, b"\x00\x00" + (len(cred) + 1).to_bytes(4, "big") + cred + b"\0"))
    code = (
        "import sys; from harp_submit.munge import Munge; print(Munge(sys.argv[1]).encode(b'x').decode()); "
        "print('ctypes' in sys.modules)"
    )
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", code, f.path],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["MUNGE:c:", "False"]
