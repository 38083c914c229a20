"""A way into harpd: how a connection's caller is known and how its answer is sent.

The server's loop (bounded clients, deadlines, busy answers) is the same for
every way in; only two things differ, and a ``Door`` is exactly those two:

* who is calling: the kernel's SO_PEERCRED on the Unix socket
  (``unix_door``), a MUNGE credential bound to the request over TCP
  (``tcp_door``);
* how the answer goes back: as it is on the Unix socket, sealed with
  harpd's own MUNGE credential over TCP, so a port squatter cannot pass for
  harpd.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class ServerError(Exception):
    """Cannot serve (socket path unusable, port taken, another harpd running, no MUNGE): one line."""


class Refused(Exception):
    """The caller cannot be believed; the text is the one-line answer (and log line)."""


@dataclass(frozen=True)
class Admission:
    """Who a request comes from, and how to send its answer."""

    pid: int  # 0 over TCP: the caller's process is on another host
    uid: int
    gid: int
    host: str | None  # the peer's address over TCP; None on the Unix socket
    seal: Callable[[bytes], bytes]  # the answer line (with its newline) → the bytes to send


def as_is(line: bytes) -> bytes:
    return line


def peer_address(addr: object) -> str | None:
    """``HOST:PORT`` of a TCP peer (accept()'s address); None for a Unix-socket peer."""
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"[{addr[0]}]:{addr[1]}" if ":" in str(addr[0]) else f"{addr[0]}:{addr[1]}"
    return None


class Door(Protocol):
    #: lines in one request: the JSON line, or the credential line and the JSON line
    lines: int
    #: True when the caller is known as it connects (the kernel's SO_PEERCRED): it
    #: takes a worker at once; False (TCP) when only its first line can say who it
    #: is: the accept loop holds it until its request is whole (``preauth``)
    known_on_connect: bool

    def bind(self) -> socket.socket:
        """The listening socket, non-blocking; ServerError (one line) when it cannot be had."""

    def close(self) -> None:
        """Stop listening (the server closes the socket itself)."""

    def admit(self, conn: socket.socket, addr: object, lines: list[bytes]) -> Admission:
        """The caller of a whole request; Refused when it cannot be believed."""
