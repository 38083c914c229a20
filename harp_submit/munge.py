"""MUNGE credentials, as Slurm uses them: who made this, on which cluster.

Both ends of harp's TCP path use this module: harp-submit and harp-filter
make a credential for each request and check the one on each answer; harpd
checks each request's and makes one for each answer.  It lives in
harp_submit because harp_submit may not import harpd, and harpd may import
harp_submit's standard-library modules.

munged is asked the way libmunge asks it: one message over its Unix
socket (``_wire``, munge's message format version 4, unchanged since MUNGE
0.5), written here in a few lines of standard Python because loading ctypes
and libmunge costs a harp-submit over TCP 3 ms of its 30 ms budget, more
than the two round trips themselves (0.2-0.4 ms each).  A munged that
answers in another format (a future MUNGE) is asked through libmunge via
ctypes from then on, as the library that comes with it knows its format;
where libmunge.so.2 is missing the ``munge``/``unmunge`` commands do the
same work, slower.  Nothing here is imported unless TCP is used.

A credential carries the uid and gid of the process that made it, as
munged saw them over its own Unix socket, and is decodable only by a munged
holding the same key, once (munged refuses a replay) and within its TTL.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_SOCKET = "/run/munge/munge.socket.2"

# munge.h: enum munge_opt
_OPT_TTL = 4
_OPT_SOCKET = 8

# munge.h: enum munge_err (the ones harp names; others get munge's own text)
SNAFU = 1
SOCKET = 6
TIMEOUT = 7
BAD_CRED = 8
BAD_VERSION = 9
CRED_INVALID = 14
CRED_EXPIRED = 15
CRED_REWOUND = 16
CRED_REPLAYED = 17
CRED_UNAUTHORIZED = 18

#: what a refused credential means, in the words of the one-line refusal
REASONS = {
    BAD_CRED: "malformed credential",
    BAD_VERSION: "malformed credential (unknown version)",
    CRED_INVALID: "credential not made with this cluster's MUNGE key",
    CRED_EXPIRED: "credential expired",
    CRED_REWOUND: "credential from the future (clocks disagree)",
    CRED_REPLAYED: "credential replayed",
    CRED_UNAUTHORIZED: "credential not meant for this host's munged",
}


class MungeError(Exception):
    """munged refused or could not be asked; ``code`` is munge's error number (0: no munged at all)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def socket_path(configured: str | None = None, environ: Any = os.environ) -> str:
    """HARP_MUNGE_SOCKET, else the configured path, else munged's default socket."""
    return environ.get("HARP_MUNGE_SOCKET") or configured or DEFAULT_SOCKET


class Munge:
    """One munged, reached through its socket.  Thread-safe: a connection (or a context) per call."""

    def __init__(self, socket: str | None = None):
        self.socket = socket or DEFAULT_SOCKET
        self._lib: Any = None
        self.via = WIRE
        forced = os.environ.get("HARP_MUNGE_VIA")
        if os.environ.get("HARP_MUNGE_COMMANDS") == "1" or forced in ("libmunge", "commands"):
            self._use_library(forced != "libmunge")

    def _use_library(self, commands: bool = False) -> None:
        """From now on libmunge (ctypes), or the commands where it is missing or ``commands``."""
        self._lib = None if commands else _libmunge()
        self.via = "libmunge" if self._lib is not None else "munge/unmunge commands"

    def check(self) -> None:
        """Raise MungeError (one line, what to do) unless munged here makes and reads credentials."""
        if self.via not in (WIRE, "libmunge") and not _commands():
            raise MungeError(
                0,
                "MUNGE is not installed here (no libmunge.so.2, no munge/unmunge commands); "
                "install munge and start munged",
            )
        try:
            cred = self.encode(b"harp check")
            self.decode(cred)
        except MungeError as exc:
            raise MungeError(
                exc.code,
                f"munged at {self.socket} does not work ({exc.message}); "
                "start munged (systemctl start munge) or set the munge socket",
            ) from None

    def encode(self, payload: bytes, ttl: int = 0) -> bytes:
        """A credential for ``payload`` (ttl 0: munged's default)."""
        if self.via == WIRE:
            try:
                return _wire_encode(self.socket, payload, ttl)
            except _OtherFormat:
                self._use_library()
        if self._lib is None:
            return _command_encode(self.socket, payload, ttl)
        lib = self._lib
        ctx = self._context(ttl)
        try:
            cred = _ctypes().c_char_p()
            err = lib.munge_encode(_ctypes().byref(cred), ctx, payload, len(payload))
            if err:
                raise MungeError(err, _error_text(lib, ctx, err))
            try:
                return bytes(cred.value or b"")
            finally:
                lib.free(cred)
        finally:
            lib.munge_ctx_destroy(ctx)

    def decode(self, cred: bytes) -> tuple[bytes, int, int]:
        """(payload, uid, gid) of a valid credential; MungeError for any other."""
        if self.via == WIRE:
            try:
                return _wire_decode(self.socket, cred)
            except _OtherFormat:
                self._use_library()
        if self._lib is None:
            return _command_decode(self.socket, cred)
        lib, c = self._lib, _ctypes()
        ctx = self._context(0)
        try:
            buf, length, uid, gid = c.c_void_p(), c.c_int(), c.c_uint32(), c.c_uint32()
            err = lib.munge_decode(cred, ctx, c.byref(buf), c.byref(length), c.byref(uid), c.byref(gid))
            try:
                payload = c.string_at(buf, length.value) if buf.value else b""
            finally:
                if buf.value:
                    lib.free(buf)
            if err:
                raise MungeError(err, _error_text(lib, ctx, err))
            return payload, uid.value, gid.value
        finally:
            lib.munge_ctx_destroy(ctx)

    def _context(self, ttl: int) -> Any:
        lib, c = self._lib, _ctypes()
        ctx = c.c_void_p(lib.munge_ctx_create())  # typed: munge_ctx_set is variadic
        if not ctx.value:
            raise MungeError(5, "out of memory creating a MUNGE context")
        lib.munge_ctx_set(ctx, _OPT_SOCKET, c.c_char_p(os.fsencode(self.socket)))
        if ttl:
            lib.munge_ctx_set(ctx, _OPT_TTL, c.c_int(ttl))
        return ctx


# --- munged's own message format (libmunge's m_msg.c, version 4) ---------------

WIRE = "munged protocol"
_MAGIC = (0x00606D4B).to_bytes(4, "big")
_VERSION = 4
_ENC_REQ, _ENC_RSP, _DEC_REQ, _DEC_RSP = 2, 3, 4, 5
_ANY = (0xFFFFFFFF).to_bytes(4, "big")  # MUNGE_UID_ANY, MUNGE_GID_ANY: anyone may decode
_DEFAULTS = bytes((1, 1, 1, 0))  # cipher, mac, zip: munged's defaults; no realm
_WIRE_TIMEOUT_S = 5.0  # libmunge's own bound on a munged that does not answer
_MAX_MESSAGE = 1 << 20


class _OtherFormat(Exception):
    """munged answered in a format this module does not speak: libmunge will."""


def _u32(value: int) -> bytes:
    return int(value).to_bytes(4, "big")


def _xfer(socket: str, kind: int, body: bytes, answer: int) -> bytes:
    """One request to munged and the body of its answer of type ``answer``."""
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(_WIRE_TIMEOUT_S)
        try:
            sock.connect(socket)
        except OSError as exc:
            raise MungeError(SOCKET, f"Failed to access \"{socket}\": {exc.strerror or exc}") from None
        try:
            sock.sendall(_MAGIC + bytes((_VERSION, kind, 0)) + _u32(len(body)) + body)
            got = b""
            need = 11
            while len(got) < need:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                got += chunk
                if need == 11 and len(got) >= 11:
                    if got[:4] != _MAGIC or got[4] != _VERSION or got[5] != answer:
                        raise _OtherFormat()
                    need = 11 + int.from_bytes(got[7:11], "big")
                    if need > _MAX_MESSAGE:
                        raise _OtherFormat()
        except OSError as exc:
            raise MungeError(SOCKET, f"munged at {socket} did not answer ({exc.strerror or exc})") from None
        if len(got) < need:
            raise _OtherFormat()  # closed on us: a munged that did not understand the request
        return got[11:need]
    finally:
        sock.close()


def _refused(body: bytes) -> int:
    """Where the rest of munged's answer starts; MungeError when munged refused."""
    err, n = body[0], body[1]
    if err:
        text = body[2 : 2 + n].rstrip(b"\0").decode(errors="replace") or "munge failed"
        raise MungeError(err, f"{REASONS.get(err, text)} (munge error {err})")
    return 2 + n


def _wire_encode(socket: str, payload: bytes, ttl: int) -> bytes:
    body = _xfer(socket, _ENC_REQ, _DEFAULTS + _u32(ttl) + _ANY + _ANY + _u32(len(payload)) + payload, _ENC_RSP)
    try:
        p = _refused(body)
        n = int.from_bytes(body[p : p + 4], "big")
        cred = body[p + 4 : p + 4 + n].rstrip(b"\0")
    except IndexError:
        raise _OtherFormat() from None
    if not cred.startswith(b"MUNGE:"):
        raise _OtherFormat()
    return cred


def _wire_decode(socket: str, cred: bytes) -> tuple[bytes, int, int]:
    body = _xfer(socket, _DEC_REQ, _u32(len(cred) + 1) + cred + b"\0", _DEC_RSP)
    try:
        p = _refused(body)
        p += 4 + body[p + 3]  # cipher, mac, zip, realm
        p += 4  # ttl
        p += 1 + body[p]  # the encoding host's address
        p += 8  # encoded, decoded
        uid, gid = int.from_bytes(body[p : p + 4], "big"), int.from_bytes(body[p + 4 : p + 8], "big")
        p += 16  # and the uid/gid allowed to decode
        n = int.from_bytes(body[p : p + 4], "big")
        payload = body[p + 4 : p + 4 + n]
    except IndexError:
        raise _OtherFormat() from None
    if len(payload) != n:
        raise _OtherFormat()
    return payload, uid, gid


def _error_text(lib: Any, ctx: Any, err: int) -> str:
    text = lib.munge_ctx_strerror(ctx) or lib.munge_strerror(err) or b"unknown error"
    return f"{REASONS.get(err, text.decode(errors='replace'))} (munge error {err})"


# --- libmunge through ctypes ------------------------------------------------

_LIB: list[Any] = []  # [library or None], once per process


def _ctypes() -> Any:
    import ctypes

    return ctypes


def _libmunge() -> Any:
    """libmunge.so.2 with its prototypes, or None; HARP_MUNGE_COMMANDS=1 forces the commands."""
    if _LIB:
        return _LIB[0]
    lib = None
    if os.environ.get("HARP_MUNGE_COMMANDS") != "1":
        c = _ctypes()
        try:
            lib = c.CDLL("libmunge.so.2")
            libc = c.CDLL(None)
        except OSError:
            lib = None
        if lib is not None:
            lib.munge_ctx_create.restype = c.c_void_p
            lib.munge_ctx_destroy.argtypes = [c.c_void_p]
            lib.munge_ctx_strerror.restype = c.c_char_p
            lib.munge_ctx_strerror.argtypes = [c.c_void_p]
            lib.munge_strerror.restype = c.c_char_p
            lib.munge_strerror.argtypes = [c.c_int]
            # munge_ctx_set is variadic: no argtypes, every argument passed typed
            lib.munge_ctx_set.restype = c.c_int
            lib.munge_encode.restype = c.c_int
            lib.munge_encode.argtypes = [c.POINTER(c.c_char_p), c.c_void_p, c.c_char_p, c.c_int]
            lib.munge_decode.restype = c.c_int
            lib.munge_decode.argtypes = [
                c.c_char_p,
                c.c_void_p,
                c.POINTER(c.c_void_p),
                c.POINTER(c.c_int),
                c.POINTER(c.c_uint32),
                c.POINTER(c.c_uint32),
            ]
            libc.free.argtypes = [c.c_void_p]
            lib.free = libc.free
    _LIB.append(lib)
    return lib


# --- the munge/unmunge commands, where libmunge is missing ---------------------


def _commands() -> bool:
    import shutil

    return shutil.which("munge") is not None and shutil.which("unmunge") is not None


def _run(argv: list[str], data: bytes) -> tuple[int, bytes]:
    import subprocess

    try:
        done = subprocess.run(argv, input=data, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        raise MungeError(0, f"cannot run {argv[0]} ({exc})") from None
    return done.returncode, done.stdout


def _command_encode(socket: str, payload: bytes, ttl: int) -> bytes:
    rc, out = _run(["munge", "-S", socket, "-t", str(ttl), "-i", "/dev/stdin"], payload)
    if rc:
        raise MungeError(rc, f"{REASONS.get(rc, 'munge failed')} (munge error {rc})")
    return out.strip()


def _command_decode(socket: str, cred: bytes) -> tuple[bytes, int, int]:
    rc, out = _run(["unmunge", "-S", socket, "-N", "-k", "UID,GID,LENGTH"], cred)
    if rc:
        raise MungeError(rc, f"{REASONS.get(rc, 'unmunge failed')} (munge error {rc})")
    head, _, payload = out.partition(b"\n\n")
    meta = dict(line.split(b":", 1) for line in head.splitlines() if b":" in line)
    try:
        return payload, int(meta[b"UID"]), int(meta[b"GID"])
    except (KeyError, ValueError):
        raise MungeError(SNAFU, "unmunge printed no uid/gid") from None
