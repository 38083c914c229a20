"""TCP connections before their credential is checked: held by the accept loop, never by a worker.

Anyone who reaches harpd's port can open connections and send nothing.  If
each took a worker slot until its request arrived, a few hundred idle
sockets would hold every slot and harp would answer "busy" to everyone, root
on the Unix socket included.  So a TCP connection first waits here, in the
accept loop's selector, costing a file descriptor and a small buffer:

* its credential line and request line must arrive within ``timeout_s``
  (harp-submit sends both at once, right after connecting);
* at most ``max_per_peer`` connections from one address are waiting or being
  checked at once; one more from that address pushes out its oldest waiting
  one (an idle socket, since a real client's request arrives in
  milliseconds), so a flood from a host can never crowd out a real client
  on the same host for longer than it takes to send a request;
* at most ``max_total`` wait in all; past that the oldest waiting one goes.

Only a connection whose request is whole goes on, to a worker, which checks
the credential (``tcp_door``).  The accept loop is the only caller, except
``checked``, which a worker calls once its connection's credential is
decided.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

__all__ = ["Pending", "PreAuth"]


@dataclass(eq=False)
class Pending:
    """One TCP connection whose request has not arrived whole."""

    conn: socket.socket
    door: object
    addr: object
    host: str  # the peer's address without its port (TCP), "uid N" (Unix): the per-peer limits count by it
    deadline: float
    buf: bytearray = field(default_factory=bytearray)
    uid: int | None = None  # the kernel's word on a Unix-socket caller; None over TCP (its credential says)
    register: bool = False  # a registration (``Server._start``): it takes a worker only from its share


class PreAuth:
    """The waiting room; every method but ``checked`` runs on the accept loop's thread."""

    def __init__(self, timeout_s: float, max_total: int, max_per_peer: int, max_request_bytes: int) -> None:
        self.timeout_s = timeout_s
        self.max_total = max_total
        self.max_per_peer = max_per_peer
        self.max_request_bytes = max_request_bytes
        self._waiting: OrderedDict[socket.socket, Pending] = OrderedDict()  # oldest first
        self._by_host: dict[str, OrderedDict[socket.socket, None]] = {}
        self._lock = threading.Lock()
        self._checking: dict[str, int] = {}  # handed to a worker, credential not yet decided

    def __len__(self) -> int:
        return len(self._waiting)

    def arrive(
        self, conn: socket.socket, door: object, addr: object, host: str
    ) -> tuple[Pending | None, list[Pending]]:
        """Take a new connection: (its entry or None when refused, the waiting ones pushed out for it)."""
        out: list[Pending] = []
        mine = self._by_host.get(host)
        while self._count(host) >= self.max_per_peer:
            if not mine:
                return None, out  # every one of this peer's is being checked: refuse the newcomer
            out.append(self.drop(next(iter(mine))))
            mine = self._by_host.get(host)
        while len(self._waiting) >= self.max_total:
            out.append(self.drop(next(iter(self._waiting))))
        entry = Pending(conn, door, addr, host, time.monotonic() + self.timeout_s)
        self._waiting[conn] = entry
        self._by_host.setdefault(host, OrderedDict())[conn] = None
        return entry, out

    def _count(self, host: str) -> int:
        with self._lock:
            checking = self._checking.get(host, 0)
        return len(self._by_host.get(host) or ()) + checking

    def drop(self, conn: socket.socket) -> Pending:
        """Forget a waiting connection (the caller closes it)."""
        entry = self._waiting.pop(conn)
        mine = self._by_host.get(entry.host)
        if mine is not None:
            mine.pop(conn, None)
            if not mine:
                del self._by_host[entry.host]
        return entry

    def read(self, conn: socket.socket) -> tuple[str, Pending]:
        """Read what arrived: ("wait" | "whole" | "eof" | "gone" | "too large", entry).

        "whole" and "eof" leave the entry in the buffer for the worker (and
        count it as being checked until ``checked``); every outcome but
        "wait" has already forgotten the connection.
        """
        entry = self._waiting[conn]
        try:
            chunk = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return "wait", entry
        except OSError:
            return "gone", self.drop(conn)
        if chunk:
            entry.buf += chunk
            if entry.buf.count(b"\n") >= getattr(entry.door, "lines", 2):
                return self._handed(conn), entry
            if len(entry.buf) > self.max_request_bytes:
                return "too large", self.drop(conn)
            return "wait", entry
        if not entry.buf.strip():
            return "gone", self.drop(conn)  # a probe: connected and left
        return self._handed(conn, "eof"), entry

    def _handed(self, conn: socket.socket, how: str = "whole") -> str:
        entry = self.drop(conn)
        with self._lock:
            self._checking[entry.host] = self._checking.get(entry.host, 0) + 1
        return how

    def checked(self, host: str) -> None:
        """A handed-over connection's credential is decided (any thread)."""
        with self._lock:
            n = self._checking.get(host, 0) - 1
            if n > 0:
                self._checking[host] = n
            else:
                self._checking.pop(host, None)

    def expired(self, now: float) -> list[Pending]:
        """The waiting connections past their deadline, forgotten (oldest first: deadlines keep arrival order)."""
        out = []
        while self._waiting:
            conn, entry = next(iter(self._waiting.items()))
            if entry.deadline > now:
                break
            out.append(self.drop(conn))
        return out

    def next_deadline(self) -> float | None:
        return next(iter(self._waiting.values())).deadline if self._waiting else None

    def everyone(self) -> list[Pending]:
        """Forget every waiting connection (shutdown)."""
        return [self.drop(conn) for conn in list(self._waiting)]
