"""harp's TCP messages: a JSON line sealed by a MUNGE credential bound to it.

On the Unix socket the kernel tells harpd who is calling (SO_PEERCRED), and
only harpd can own that socket.  Over TCP neither holds, so each message is
two lines, ``<MUNGE credential>\\n<JSON>\\n``, and the credential's payload is

    harp1 request <nonce> <sha256 of the JSON line>      (client to harpd)
    harp1 answer  <nonce> <sha256 of the JSON line>      (harpd to client)

with a fresh random nonce per request, echoed in the answer's credential.
So a request's uid/gid are munged's word, not the message's; a body changed
after its credential was made no longer matches; a credential replayed is
refused by munged (and by harpd's own record of nonces); and an answer made
by anyone but harpd's uid, or for another request, is not believed — a
process squatting harpd's port cannot push limits into users' jobs.

Both ends use this one module, so they cannot disagree about the format.
"""

from __future__ import annotations

import os

try:  # the C module itself: hashlib would load OpenSSL, milliseconds at every submission
    from _sha256 import sha256  # Python 3.11
except ImportError:  # pragma: no cover - 3.12+ renamed it
    try:
        from _sha2 import sha256
    except ImportError:
        from hashlib import sha256

from .munge import REASONS, Munge, MungeError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection

PREFIX = b"MUNGE:"
_REQUEST = b"harp1 request"
_ANSWER = b"harp1 answer"


class Refused(Exception):
    """A sealed message that must not be believed; ``reason`` is one line.

    ``munged`` is true when the fault is this host's munged (down, wrong
    socket), not the message.
    """

    def __init__(self, reason: str, munged: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.munged = munged


def _payload(kind: bytes, nonce: bytes, body: bytes) -> bytes:
    return b"%s %s %s" % (kind, nonce, sha256(body).hexdigest().encode())


def seal_request(munge: Munge, body: bytes, ttl: int = 0) -> tuple[bytes, bytes]:
    """(the two lines to send, the nonce the answer must carry); MungeError if munged cannot make one."""
    nonce = os.urandom(16).hex().encode()
    cred = munge.encode(_payload(_REQUEST, nonce, body), ttl)
    return cred + b"\n" + body + b"\n", nonce


def seal_answer(munge: Munge, nonce: bytes, body: bytes) -> bytes:
    """The two lines answering the request that carried ``nonce``."""
    return munge.encode(_payload(_ANSWER, nonce, body)) + b"\n" + body + b"\n"


def open_request(munge: Munge, cred: bytes, body: bytes) -> tuple[int, int, bytes]:
    """(uid, gid, nonce) of a request whose credential vouches for ``body``; Refused otherwise."""
    payload, uid, gid = _decode(munge, cred)
    nonce = _bound(payload, _REQUEST, body, "request")
    return uid, gid, nonce


def open_answer(munge: Munge, nonce: bytes, cred: bytes, body: bytes, harpd_uids: Collection[int]) -> None:
    """Return if ``body`` is harpd's answer to the request with ``nonce``; Refused otherwise."""
    payload, uid, _gid = _decode(munge, cred)
    if uid not in harpd_uids:
        raise Refused(f"answer signed by uid {uid}, not by harpd (uid {', '.join(map(str, harpd_uids))})")
    if _bound(payload, _ANSWER, body, "answer") != nonce:
        raise Refused("answer made for another request")


def _decode(munge: Munge, cred: bytes) -> tuple[bytes, int, int]:
    if not cred.startswith(PREFIX):
        raise Refused("no MUNGE credential (send the credential line, then the JSON line)")
    try:
        return munge.decode(cred)
    except MungeError as exc:
        ours = exc.code not in REASONS  # not about the credential: munged down, wrong socket ...
        raise Refused(exc.message, munged=ours) from None


def _bound(payload: bytes, kind: bytes, body: bytes, what: str) -> bytes:
    parts = payload.split(b" ")
    if len(parts) != 4 or b" ".join(parts[:2]) != kind or len(parts[2]) != 32:
        raise Refused(f"credential is not for a harp {what}")
    if parts[3] != sha256(body).hexdigest().encode():
        raise Refused(f"credential does not match the {what} (changed after the credential was made)")
    return parts[2]
