"""This host's way in: the Unix socket, the caller's identity from the kernel.

Only harpd can own the socket path and the kernel vouches for the peer
(SO_PEERCRED), so the answer goes back as it is.  Binding replaces a stale
socket a crashed harpd left behind and refuses a live one, so a second harpd
on the same host stops at start instead of serving beside the first.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
import struct
from pathlib import Path

from harpd.daemon.door import Admission, ServerError, as_is

log = logging.getLogger("harpd.server")

_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
MAX_SUN_PATH = 107  # sockaddr_un.sun_path minus the terminating NUL


def peer_ids(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end, from the kernel."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
    return _CRED.unpack(raw)


class UnixDoor:
    lines = 1
    known_on_connect = True

    def __init__(self, path: str | os.PathLike[str], mode: int = 0o666) -> None:
        self.path = Path(path)
        self.mode = mode
        self._inode: tuple[int, int] | None = None

    def __str__(self) -> str:
        return str(self.path)

    def bind(self) -> socket.socket:
        """Create the socket: parent dir made, stale socket replaced, live one refused."""
        path = self.path
        if len(os.fsencode(str(path))) > MAX_SUN_PATH:
            raise ServerError(f"socket path {path} is longer than {MAX_SUN_PATH} bytes; set a shorter server.socket")
        try:
            path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        except OSError as exc:
            raise ServerError(
                f"cannot create socket directory {path.parent} ({exc.strerror}); set server.socket"
            ) from None
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None:
            if not stat.S_ISSOCK(st.st_mode):
                raise ServerError(f"{path} exists and is not a socket; remove it or set server.socket")
            if self._alive(path):
                raise ServerError(f"another harpd is already serving on {path}; stop it first (systemctl stop harpd)")
            log.info("replacing stale socket %s", path)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise ServerError(f"cannot remove stale socket {path} ({exc.strerror})") from None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            # chmod before listen(): nobody can connect while the mode is wrong
            os.chmod(path, self.mode)
            sock.listen(min(socket.SOMAXCONN, 4096))
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise ServerError(f"cannot listen on {path} ({exc.strerror}); check server.socket") from None
        st = os.stat(path)
        self._inode = (st.st_dev, st.st_ino)
        log.info("listening on %s (mode %o)", path, self.mode)
        return sock

    @staticmethod
    def _alive(path: Path) -> bool:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
            return True
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError as exc:
            # EAGAIN: backlog full, i.e. very much alive; anything else: treat as alive, refuse to clobber
            return exc.errno != errno.ECONNREFUSED
        finally:
            probe.close()

    def admit(self, conn: socket.socket, addr: object, lines: list[bytes]) -> Admission:
        pid, uid, gid = peer_ids(conn)
        return Admission(pid=pid, uid=uid, gid=gid, host=None, seal=as_is)

    def close(self) -> None:
        # unlink only our own socket: a newer harpd may have replaced it
        if self._inode is not None:
            try:
                st = os.stat(self.path)
                if (st.st_dev, st.st_ino) == self._inode:
                    os.unlink(self.path)
            except OSError:
                pass
            self._inode = None
