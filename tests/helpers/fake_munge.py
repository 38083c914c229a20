"""A stand-in for munged in unit tests: same interface as ``harp_submit.munge.Munge``.

Credentials are ``MUNGE:<id>:``, their payload and uid kept here; a decode
refuses what munged would (unknown, replayed, another "key"), so the code
around it is tested without a munged.  tests/slurm/test_tcp_munge.py runs
the same paths against the real one.
"""

from __future__ import annotations

import itertools
import threading

from harp_submit import munge as m


class FakeMunge:
    via = "fake"
    socket = "/fake/munge.sock"

    def __init__(self, uid: int = 0, gid: int = 0, key: str = "cluster") -> None:
        self.uid, self.gid, self.key = uid, gid, key
        self._made: dict[bytes, tuple[bytes, int, int, str]] = {}
        self._used: set[bytes] = set()
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def as_user(self, uid: int, gid: int | None = None) -> FakeMunge:
        """The same "munged", making credentials for another uid (a second user on the node)."""
        other = FakeMunge(uid, uid if gid is None else gid, self.key)
        other._made, other._used, other._ids, other._lock = self._made, self._used, self._ids, self._lock
        return other

    def with_key(self, key: str) -> FakeMunge:
        other = self.as_user(self.uid, self.gid)
        other.key = key
        return other

    def check(self) -> None:
        pass

    def encode(self, payload: bytes, ttl: int = 0) -> bytes:
        with self._lock:
            cred = b"MUNGE:%d:" % next(self._ids)
            self._made[cred] = (payload, self.uid, self.gid, self.key)
        return cred

    def decode(self, cred: bytes) -> tuple[bytes, int, int]:
        with self._lock:
            made = self._made.get(cred)
            if made is None:
                raise m.MungeError(m.BAD_CRED, m.REASONS[m.BAD_CRED])
            if made[3] != self.key:
                raise m.MungeError(m.CRED_INVALID, m.REASONS[m.CRED_INVALID])
            if cred in self._used:
                raise m.MungeError(m.CRED_REPLAYED, m.REASONS[m.CRED_REPLAYED])
            self._used.add(cred)
        return made[0], made[1], made[2]


class DeadMunge(FakeMunge):
    """munged not running on this host."""

    def check(self) -> None:
        raise m.MungeError(m.SOCKET, "Failed to access \"/fake/munge.sock\" (munge error 6)")

    def encode(self, payload: bytes, ttl: int = 0) -> bytes:
        self.check()
        return b""

    def decode(self, cred: bytes) -> tuple[bytes, int, int]:
        self.check()
        return b"", 0, 0
