"""The cluster's way in: TCP, every request and answer sealed with MUNGE.

Login and compute nodes reach the one harpd here (``[server] listen``).  The
caller's uid and gid come from the MUNGE credential on the request's first
line, decoded by this host's munged, exactly as Slurm's own daemons learn
who sent an RPC; the credential must vouch for the JSON line that follows
(``harp_submit.sealed``), so a body changed on the way is refused, and
munged refuses an expired, replayed, malformed or foreign-key credential.
Each refusal is one answer line, and one log line with the peer's address.
The answer carries harpd's own credential, bound to the request's nonce.
"""

from __future__ import annotations

import logging
import socket

from harp_submit.munge import Munge, MungeError, socket_path
from harp_submit.route import parse_address
from harp_submit.sealed import Refused as Unsealed
from harp_submit.sealed import open_request, seal_answer
from harpd.daemon.door import Admission, Refused, ServerError, peer_address

log = logging.getLogger("harpd.server")


def check_munge(munge: Munge) -> None:
    """ServerError (one line, what to do) unless this host's munged makes and reads credentials."""
    try:
        munge.check()
    except MungeError as exc:
        raise ServerError(
            f"server.listen is set but MUNGE does not work here: {exc.message}; "
            "or remove server.listen to serve the Unix socket only"
        ) from None


class TcpDoor:
    lines = 2
    known_on_connect = False

    def __init__(self, address: str, munge: Munge) -> None:
        try:
            self.host, self.port = parse_address(address, any_port=True)
        except ValueError as exc:
            raise ServerError(f"server.listen: {exc}") from None
        self.address = address
        self.munge = munge

    def __str__(self) -> str:
        return f"tcp {self.address}"

    def bind(self) -> socket.socket:
        try:
            infos = socket.getaddrinfo(self.host, self.port, 0, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
        except socket.gaierror as exc:
            raise ServerError(f"cannot listen on {self.address} ({exc.strerror}); fix server.listen") from None
        family, kind, proto, _, addr = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restart at once, TIME_WAIT or not
            sock.bind(addr)
            sock.listen(min(socket.SOMAXCONN, 4096))
            sock.setblocking(False)
            self.port = sock.getsockname()[1]  # the real one when listen asked for port 0 (tests)
        except OSError as exc:
            sock.close()
            hint = "another harpd (or something else) holds the port" if exc.errno == 98 else "check server.listen"
            raise ServerError(f"cannot listen on {self.address} ({exc.strerror}); {hint}") from None
        log.info(
            "listening on %s (requests sealed with MUNGE via %s, munged at %s)",
            self.address,
            self.munge.via,
            self.munge.socket,
        )
        return sock

    def admit(self, conn: socket.socket, addr: object, lines: list[bytes]) -> Admission:
        if len(lines) != 2:
            raise Refused("send a MUNGE credential line, then the JSON request line")
        try:
            uid, gid, nonce = open_request(self.munge, lines[0], lines[1])
        except Unsealed as exc:
            if exc.munged:
                log.error("cannot check credentials: %s", exc.reason)
                raise Refused(f"harpd cannot check credentials now ({exc.reason}); retry") from None
            raise Refused(f"credential refused: {exc.reason}") from None
        munge = self.munge

        def seal(line: bytes) -> bytes:
            return seal_answer(munge, nonce, line.rstrip(b"\n"))

        return Admission(pid=0, uid=uid, gid=gid, host=peer_address(addr), seal=seal)

    def close(self) -> None:
        pass


def doors_for(listen: list[str], munge_socket: str | None) -> list[TcpDoor]:
    """A door per ``server.listen`` address, sharing one munged; none without addresses.

    MUNGE is checked here, at start: a harpd that cannot check credentials
    must not listen on TCP at all (ServerError, one line).
    """
    if not listen:
        return []
    munge = Munge(socket_path(munge_socket))
    check_munge(munge)
    return [TcpDoor(address, munge) for address in listen]
