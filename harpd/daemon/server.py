"""harpd's server: the Unix socket and any TCP addresses, bounded everything.

Every user's sbatch goes through here, so one bad client must never hold up
the others or take the daemon down:

* the caller's uid/gid come from SO_PEERCRED on the Unix socket and from a
  MUNGE credential over TCP (a ``Door`` each: ``unix_door``, ``tcp_door``),
  never from the message; both ways in share this one loop;
* a connection is served by a worker thread (daemon threads, so a slow admin
  import never blocks shutdown) and at most ``max_clients`` run at once; the
  next one gets an immediate "busy" answer instead of queueing behind stalled
  clients;
* a TCP connection takes a worker only once its credential and request have
  arrived whole: until then the accept loop holds it (``preauth``: a short
  deadline, per-peer and total bounds), so idle sockets from anyone who
  reaches the port hold no slot; and ``unix_reserved_clients`` of the slots
  are the Unix socket's alone, which TCP callers can never take;
* refusals (busy, limits, credentials) are logged with the peer's address,
  the first of an interval at once and the rest summed up (``refusals``);
* a request must arrive whole within ``request_timeout_s`` (a total deadline,
  not per read, so a client trickling one byte a second is cut off too) and
  within ``max_request_bytes``; either failure gets an error answer;
* anything that goes wrong inside a connection is logged and answered, the
  accept loop never sees it.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from harpd import protocol as p
from harpd.config import ServerSettings
from harpd.daemon.door import Admission, Door, Refused, ServerError, as_is, peer_address
from harpd.daemon.handlers import Handlers, Peer
from harpd.daemon.preauth import Pending, PreAuth
from harpd.daemon.refusals import RefusalLog
from harpd.daemon.unix_door import UnixDoor, peer_ids

__all__ = ["Server", "ServerError", "ServerLimits", "peer_ids"]

log = logging.getLogger("harpd.server")

_PEER_CACHE_S = 60.0  # pwd/grp lookups can hit LDAP: reuse them for a minute
#: a registration's op in its JSON line (harp-submit writes it plainly; in a string it would be escaped)
_REGISTER = re.compile(rb'"op"\s*:\s*"register"')


def _count(counts: dict[int, int], uid: int, step: int) -> None:
    """Add ``step`` to a uid's count of requests being served; a count back at 0 leaves the dict."""
    n = counts.get(uid, 0) + step
    if n > 0:
        counts[uid] = n
    else:
        counts.pop(uid, None)


_MAX_REJECTED = 256  # busy-answered sockets kept open to read their request


#: ``[server]``'s defaults, written once in harpd.config: a server built without settings takes them
_DEFAULTS = ServerSettings()


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """How much the server takes at once and how long it waits: ``[server]``'s limits.

    harpd's come from its settings (``from_settings``); a server built
    without them (tests, benches) takes ``[server]``'s defaults, written once
    in harpd.config, but one: ``unix_reserved_clients`` None is a quarter of
    ``max_clients`` (the setting's default is 16, a quarter of its 64).

    ``unix_reserved_clients``: slots TCP callers never take; at least one
    slot is always left to TCP.  On the Unix socket the kernel names the
    caller's uid at once, and a connection waits in the accept loop, holding
    no worker, until its request is whole, as over TCP: at most
    ``max_waiting_per_user`` of one uid's wait (a newer one pushes out its
    oldest), at most ``max_clients_per_user`` of its requests are served at
    once, and the last ``root_reserved_clients`` slots are root's and harpd's
    own user's, so one user holding hundreds of idle or slow connections never
    makes harpd busy for the others or for the admin's ``health``.
    """

    request_timeout_s: float = _DEFAULTS.request_timeout_s
    max_request_bytes: int = _DEFAULTS.max_request_bytes
    max_clients: int = _DEFAULTS.max_clients
    auth_timeout_s: float = _DEFAULTS.auth_timeout_s
    max_unauthenticated: int = _DEFAULTS.max_unauthenticated
    max_unauthenticated_per_peer: int = _DEFAULTS.max_unauthenticated_per_peer
    unix_reserved_clients: int | None = None
    refusal_log_interval_s: float = _DEFAULTS.refusal_log_interval_s
    max_clients_per_user: int = _DEFAULTS.max_clients_per_user
    max_waiting_per_user: int = _DEFAULTS.max_waiting_per_user
    root_reserved_clients: int = _DEFAULTS.root_reserved_clients

    @classmethod
    def from_settings(cls, server: ServerSettings) -> ServerLimits:
        """``[server]``'s limits, as validated."""
        return cls(
            request_timeout_s=server.request_timeout_s,
            max_request_bytes=server.max_request_bytes,
            max_clients=server.max_clients,
            auth_timeout_s=server.auth_timeout_s,
            max_unauthenticated=server.max_unauthenticated,
            max_unauthenticated_per_peer=server.max_unauthenticated_per_peer,
            unix_reserved_clients=server.unix_reserved_clients,
            refusal_log_interval_s=server.refusal_log_interval_s,
            max_clients_per_user=server.max_clients_per_user,
            max_waiting_per_user=server.max_waiting_per_user,
            root_reserved_clients=server.root_reserved_clients,
        )


class Server:
    def __init__(
        self,
        path: str | os.PathLike[str],
        handlers: Handlers | None,
        *,
        mode: int = 0o666,
        doors: Sequence[Door] = (),
        limits: ServerLimits | None = None,
    ) -> None:
        """``doors``: further ways in beside the Unix socket at ``path`` (TCP); ``limits``: see ``ServerLimits``."""
        lim = limits or ServerLimits()
        self.limits = lim
        self.unix = UnixDoor(path, mode)
        self.path = self.unix.path
        self.doors: list[Door] = [self.unix, *doors]
        self.handlers = handlers
        self.mode = mode
        self.request_timeout_s = lim.request_timeout_s
        self.max_request_bytes = lim.max_request_bytes
        self.max_clients = max_clients = lim.max_clients
        reserved = max_clients // 4 if lim.unix_reserved_clients is None else lim.unix_reserved_clients
        self.max_tcp_clients = max(1, max_clients - reserved)
        self.preauth = PreAuth(
            lim.auth_timeout_s, lim.max_unauthenticated, lim.max_unauthenticated_per_peer, lim.max_request_bytes
        )
        # the Unix socket's waiting room: the same rules, counted per uid, with the request's own deadline
        self.unix_waiting = PreAuth(
            lim.request_timeout_s, lim.max_unauthenticated, lim.max_waiting_per_user, lim.max_request_bytes
        )
        self.max_clients_per_user = lim.max_clients_per_user
        self.root_reserved_clients = min(lim.root_reserved_clients, max(0, max_clients - 1))
        self._by_uid: dict[int, int] = {}  # Unix requests being served, per uid
        # registrations wait on slurmctld (seconds on a loaded host) and come in bursts from detached children
        # that retry: they take at most half of the slots, a user's at most half of theirs, so a burst of
        # submissions never leaves the next one's prediction without a worker ("busy": the job unchanged)
        self.max_registering = max(1, max_clients // 2)
        self.max_registering_per_user = max(1, lim.max_clients_per_user // 2)
        self._registering = 0
        self._reg_by_uid: dict[int, int] = {}
        # one log of refusals for the doors and the handlers (a user's quota), flushed by the accept loop
        self.refusals = getattr(handlers, "refusals", None) or RefusalLog(log, lim.refusal_log_interval_s)
        self._active_tcp = 0
        self._socks: dict[socket.socket, Door] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._active = 0
        self._idle = threading.Condition(self._lock)
        self._peers: dict[tuple[int, int], tuple[float, Peer]] = {}
        self._sel: selectors.BaseSelector | None = None
        self._rejected: dict[socket.socket, float] = {}  # busy-answered sockets → drain deadline
        self._work: queue.SimpleQueue[tuple[socket.socket, Door, object, Pending] | None] = queue.SimpleQueue()
        self._idle_workers = 0
        self.served = 0  # requests answered (for tests and the stop log line)

    # -------------------------------------------------------------- binding

    def bind(self) -> None:
        """Listen at every door (the Unix socket first); ServerError and nothing left open if one fails."""
        try:
            for door in self.doors:
                self._socks[door.bind()] = door
        except ServerError:
            self._close_listener()
            raise
        log.info(
            "serving at most %d clients at once (%d of them over TCP)",
            self.max_clients,
            min(self.max_clients, self.max_tcp_clients),
        )

    # -------------------------------------------------------------- serving

    def serve_forever(self) -> None:
        """Accept until shutdown(); then stop accepting and wait briefly for running requests."""
        if not self._socks:
            self.bind()
        sel = selectors.DefaultSelector()
        self._sel = sel
        for listener in self._socks:
            sel.register(listener, selectors.EVENT_READ, "accept")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while not self._stop.is_set():
                timeout = 1.0
                if self._rejected:
                    timeout = max(0.0, min(timeout, min(self._rejected.values()) - time.monotonic()))
                for waiting in (self.preauth.next_deadline(), self.unix_waiting.next_deadline()):
                    if waiting is not None:
                        timeout = max(0.0, min(timeout, waiting - time.monotonic()))
                for key, _ in sel.select(timeout=timeout):
                    if key.data == "wake":
                        try:
                            os.read(self._wake_r, 4096)
                        except BlockingIOError:
                            pass
                    elif key.data == "accept":
                        self._accept(key.fileobj)  # type: ignore[arg-type]
                    elif key.data == "preauth":
                        self._read_preauth(key.fileobj)  # type: ignore[arg-type]
                    elif key.data == "unix":
                        self._read_preauth(key.fileobj, self.unix_waiting)  # type: ignore[arg-type]
                    else:
                        self._drain_rejected(key.fileobj)  # type: ignore[arg-type]
                self._expire_rejected()
                self._expire_preauth()
                self.refusals.flush()
        finally:
            for conn in list(self._rejected):
                self._forget_rejected(conn)
            for entry in [*self.preauth.everyone(), *self.unix_waiting.everyone()]:
                self._unwatch(entry.conn)
                entry.conn.close()
            self.refusals.flush()
            sel.close()
            self._sel = None
            self._close_listener()
            self._wait_idle(self.request_timeout_s + 1.0)
            self._release_workers()

    def _accept(self, listener: socket.socket) -> None:
        door = self._socks.get(listener)
        if door is None:
            return
        try:
            conn, addr = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # EMFILE and friends: back off instead of spinning
            log.error("accept failed: %s", exc)
            time.sleep(0.1)
            return
        if not door.known_on_connect:
            self._wait_for_request(conn, door, addr)
            return
        try:
            _, uid, _ = peer_ids(conn)
        except OSError:
            conn.close()
            return
        self._wait_for_request(conn, door, addr, uid)

    def _room(self, pending: Pending) -> PreAuth:
        return self.preauth if pending.uid is None else self.unix_waiting

    def _busy(self, uid: int | None, tcp: bool, register: bool = False) -> str | None:
        """Why a whole request gets no worker now (None: it does); called under the lock."""
        if self._active >= self.max_clients:
            return f"{self.max_clients} clients already connected"
        if register and self._registering >= self.max_registering:
            return f"{self.max_registering} registrations in progress"
        if (
            register
            and uid is not None
            and uid not in (0, os.geteuid())
            and self._reg_by_uid.get(uid, 0) >= self.max_registering_per_user
        ):
            return f"you already have {self.max_registering_per_user} registrations in progress"
        if tcp and self._active_tcp >= self.max_tcp_clients:
            return f"{self.max_tcp_clients} clients already connected over TCP"
        if uid is None or uid in (0, os.geteuid()):
            return None  # root and harpd's own user: every slot, the reserved ones too
        if self._by_uid.get(uid, 0) >= self.max_clients_per_user:
            return f"you already have {self.max_clients_per_user} requests in progress"
        if self._active >= self.max_clients - self.root_reserved_clients:
            return f"{self.max_clients - self.root_reserved_clients} clients already connected"
        return None

    def _start(self, conn: socket.socket, door: Door, addr: object, pending: Pending) -> None:
        """Give a whole request a worker slot, or answer "busy" (TCP takes only its share, a user only theirs)."""
        tcp = pending.uid is None
        pending.register = _REGISTER.search(pending.buf) is not None
        with self._lock:
            why = self._busy(pending.uid, tcp, pending.register)
            if why is None:
                self._active += 1
                self._active_tcp += tcp
                if pending.uid is not None:
                    _count(self._by_uid, pending.uid, 1)
                if pending.register:
                    self._registering += 1
                    if pending.uid is not None:
                        _count(self._reg_by_uid, pending.uid, 1)
        if why is not None:
            self._room(pending).checked(pending.host)
            who = peer_address(addr) or f"uid {pending.uid}"
            self.refusals.refused("busy", who, why)
            self._reject(conn, f"harpd busy: {why}; retry")
            return
        try:
            self._dispatch(conn, door, addr, pending)
        except RuntimeError as exc:  # cannot start a thread: answer here, cheaply
            self._room(pending).checked(pending.host)
            self._done(tcp, pending.uid, pending.register)
            self._reject(conn, f"harpd overloaded ({exc}); retry")

    # ------------------------------------------------- TCP before its credential

    def _wait_for_request(self, conn: socket.socket, door: Door, addr: object, uid: int | None = None) -> None:
        """Hold a new connection in the accept loop until its request is whole (no worker, no slot).

        TCP connections are counted per peer address; Unix ones per uid (the
        kernel's SO_PEERCRED), so one user's idle connections crowd out only
        that user's own.
        """
        if uid is None:
            room, host = self.preauth, str(addr[0] if isinstance(addr, tuple) and addr else addr)
        else:
            room, host = self.unix_waiting, f"uid {uid}"
        entry, pushed_out = room.arrive(conn, door, addr, host)
        if entry is not None:
            entry.uid = uid
        for old in pushed_out:
            self._unwatch(old.conn)
            self._refuse_waiting(
                old,
                "unauthenticated limit" if uid is None else "waiting limit",
                "pushed out by newer connections from the same peer or too many unauthenticated connections"
                if uid is None
                else "pushed out by newer connections of the same user or too many waiting connections",
            )
        if entry is None:
            self.refusals.refused(
                "unauthenticated limit" if uid is None else "waiting limit",
                peer_address(addr) or host,
                f"{room.max_per_peer} connections from this {'peer' if uid is None else 'user'} already being checked",
            )
            self._reject(conn, f"harpd: too many connections from your {'host' if uid is None else 'user'}; retry")
            return
        try:
            conn.setblocking(False)
            assert self._sel is not None
            self._sel.register(conn, selectors.EVENT_READ, "preauth" if uid is None else "unix")
        except (OSError, ValueError, AssertionError):
            room.drop(conn)
            conn.close()

    def _read_preauth(self, conn: socket.socket, room: PreAuth | None = None) -> None:
        room = room or self.preauth
        try:
            how, entry = room.read(conn)
        except KeyError:
            self._unwatch(conn)
            return
        if how == "wait":
            return
        self._unwatch(conn)
        if how == "gone":
            conn.close()
        elif how == "too large":
            limit = self.max_request_bytes
            self.refusals.refused("request too large", peer_address(entry.addr), f"over {limit} bytes")
            self._reject(conn, f"request over {limit} bytes; harpd accepts at most {limit}")
        else:
            self._start(conn, entry.door, entry.addr, entry)  # type: ignore[arg-type]

    def _expire_preauth(self) -> None:
        now = time.monotonic()
        for entry in self.preauth.expired(now):
            self._unwatch(entry.conn)
            self._refuse_waiting(
                entry, "no request in time", f"no credential and request within {self.preauth.timeout_s:g}s"
            )
        for entry in self.unix_waiting.expired(now):
            self._unwatch(entry.conn)
            self._refuse_waiting(
                entry, "no request in time", f"request not complete within {self.unix_waiting.timeout_s:g}s"
            )

    def _refuse_waiting(self, entry: Pending, kind: str, why: str) -> None:
        """Answer a waiting connection in one non-blocking send and close it."""
        self.refusals.refused(kind, peer_address(entry.addr) or entry.host, why)
        send = "the request" if entry.uid is not None else "the MUNGE credential line and the request"
        try:
            entry.conn.send(p.encode(p.error(f"harpd: {why}; send {send} at once")))
        except OSError:
            pass
        entry.conn.close()

    def _unwatch(self, conn: socket.socket) -> None:
        if self._sel is not None:
            try:
                self._sel.unregister(conn)
            except (KeyError, ValueError):
                pass

    # ------------------------------------------------------------- workers

    def _dispatch(self, conn: socket.socket, door: Door, addr: object, pending: Pending) -> None:
        """Hand the connection to an idle worker thread, or start one.

        Workers outlive their connection and wait for the next: starting a
        thread costs a fifth of a millisecond, a quarter of a whole request's
        work at the rates a cluster-wide harpd sees.  At most ``max_clients``
        connections are ever served at once (``_accept``), so at most that
        many workers exist; they are daemon threads, as the old per-connection
        ones were, so a stuck request never blocks shutdown.
        """
        with self._lock:
            spawn = self._idle_workers == 0
            if not spawn:
                self._idle_workers -= 1
        self._work.put((conn, door, addr, pending))
        if spawn:
            threading.Thread(target=self._worker, name="harpd-conn", daemon=True).start()

    def _release_workers(self) -> None:
        """Idle workers end (busy ones end with their request: they are daemon threads)."""
        with self._lock:
            idle, self._idle_workers = self._idle_workers, 0
        for _ in range(idle):
            self._work.put(None)

    def _worker(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            self._serve_conn(*item)
            with self._lock:
                self._idle_workers += 1

    def _reject(self, conn: socket.socket, message: str) -> None:
        """Answer an error without a thread, then keep the socket briefly in the
        accept loop's selector to swallow the request: closing with the client's
        request unread would reset the connection before it reads the answer."""
        try:
            conn.setblocking(False)
            conn.send(p.encode(p.error(message)))
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            conn.close()
            return
        if self._sel is None or len(self._rejected) >= _MAX_REJECTED:
            conn.close()
            return
        self._rejected[conn] = time.monotonic() + min(self.request_timeout_s, 2.0)
        try:
            self._sel.register(conn, selectors.EVENT_READ, "rejected")
        except (KeyError, ValueError, OSError):
            self._rejected.pop(conn, None)
            conn.close()

    def _drain_rejected(self, conn: socket.socket) -> None:
        try:
            while conn.recv(1 << 16):
                pass
        except BlockingIOError:
            return  # more may come: wait for EOF or the deadline
        except OSError:
            pass
        self._forget_rejected(conn)

    def _expire_rejected(self) -> None:
        now = time.monotonic()
        for conn, until in list(self._rejected.items()):
            if until <= now:
                self._forget_rejected(conn)

    def _forget_rejected(self, conn: socket.socket) -> None:
        self._rejected.pop(conn, None)
        if self._sel is not None:
            try:
                self._sel.unregister(conn)
            except (KeyError, ValueError):
                pass
        conn.close()

    def _done(self, tcp: bool = False, uid: int | None = None, register: bool = False) -> None:
        with self._lock:
            self._active -= 1
            self._active_tcp -= tcp
            if register:
                self._registering -= 1
                if uid is not None:
                    _count(self._reg_by_uid, uid, -1)
            if uid is not None:
                _count(self._by_uid, uid, -1)
            if self._active == 0:
                self._idle.notify_all()

    def _peer(self, who: Admission) -> Peer:
        pid, uid, gid, host = who.pid, who.uid, who.gid, who.host
        now = time.monotonic()
        hit = self._peers.get((uid, gid))
        if hit is not None and now - hit[0] < _PEER_CACHE_S:
            cached = hit[1]
            return Peer(pid=pid, uid=uid, gid=gid, user=cached.user, groups=cached.groups, host=host)
        peer = Peer.from_ids(pid, uid, gid, host)
        if len(self._peers) > 10000:
            self._peers.clear()
        self._peers[(uid, gid)] = (now, peer)
        return peer

    def _serve_conn(self, conn: socket.socket, door: Door, addr: object, pending: Pending) -> None:
        start = time.monotonic()
        op = "?"
        peer: Peer | None = None
        seal: Callable[[bytes], bytes] = as_is
        unchecked = True  # the waiting room's bookkeeping still counts it against its peer
        room = self._room(pending)
        try:
            conn.setblocking(True)
            lines, problem = self._whole(pending.buf, door.lines)
            if problem is None and not any(lines):
                log.debug("%s: a connection closed without a request", door)
                return
            answer: BaseModel
            if problem is not None:
                answer = p.error(problem)
            else:
                try:
                    who = door.admit(conn, addr, lines)
                    peer, seal = self._peer(who), who.seal
                except Refused as exc:
                    self.refusals.refused("credential refused", peer_address(addr), f"{door}: {exc}")
                    self._send(conn, p.encode(p.error(str(exc))))
                    return
                finally:
                    unchecked = False
                    room.checked(pending.host)
                try:
                    req = p.parse_request(lines[-1])
                    op = req.op
                    if self.handlers is None:
                        answer = p.error("harpd is starting; retry")
                    else:
                        answer = self.handlers.handle(peer, req)
                except p.ProtocolError as exc:
                    answer = p.error(str(exc))
            try:
                line = p.encode(answer)
            except Exception as exc:  # an answer that does not serialise is a bug: say so, do not hang up
                log.exception("cannot encode the answer to %s", op)
                line = p.encode(p.error(f"internal error encoding the answer: {type(exc).__name__}"))
            self._send(conn, seal(line))
            if problem is not None and problem.startswith("request over"):
                # let a client that is still sending finish, so it can read the error
                self._drain(conn, time.monotonic() + self.request_timeout_s)
            self.served += 1
            level = logging.INFO if op in p.ADMIN_OPS or op == "register" else logging.DEBUG
            ok = not isinstance(answer, p.ErrorAnswer)
            log.log(
                level if ok else logging.INFO,
                "%s %s %s %.1fms%s",
                op,
                peer.describe() if peer else f"{door} {peer_address(addr) or ''}".strip(),
                "ok" if ok else "error",
                (time.monotonic() - start) * 1000,
                "" if ok else f": {answer.error}",  # type: ignore[attr-defined]
            )
        except Exception:
            log.exception("connection from %s failed", peer.describe() if peer else "unknown peer")
        finally:
            if unchecked:
                room.checked(pending.host)
            try:
                conn.close()
            finally:
                self._done(pending.uid is None, pending.uid, pending.register)

    def _whole(self, buf: bytearray, lines: int) -> tuple[list[bytes], str | None]:
        """The request's lines from what the accept loop read, or a problem to answer."""
        got = bytes(buf).split(b"\n")[:lines]
        limit = self.max_request_bytes
        if sum(map(len, got)) + lines - 1 > limit:
            return [], f"request over {limit} bytes; harpd accepts at most {limit}"
        return got, None

    def _send(self, conn: socket.socket, data: bytes) -> None:
        conn.settimeout(self.request_timeout_s)
        try:
            conn.sendall(data)
        except OSError as exc:  # client gone or not reading: nothing more to do
            log.debug("cannot send answer: %s", exc)

    @staticmethod
    def _drain(conn: socket.socket, deadline: float) -> None:
        try:
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            return
        while (remaining := deadline - time.monotonic()) > 0:
            conn.settimeout(remaining)
            try:
                if not conn.recv(1 << 16):
                    return
            except OSError:
                return

    # ------------------------------------------------------------- stopping

    def shutdown(self) -> None:
        """Ask serve_forever to return.  Safe from a signal handler or any thread."""
        self._stop.set()
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _close_listener(self) -> None:
        socks, self._socks = self._socks, {}
        for sock in socks:
            sock.close()
        for door in self.doors:
            door.close()

    def _wait_idle(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        with self._lock:
            while self._active > 0:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    log.warning("stopping with %d request(s) still running", self._active)
                    return False
                self._idle.wait(remaining)
        return True

    @property
    def active(self) -> int:
        with self._lock:
            return self._active

    def close(self) -> None:
        self.shutdown()
        self._close_listener()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1
