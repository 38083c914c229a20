"""Talk to harpd over its Unix socket: one JSON line out, one JSON line back.

Everything here has a hard deadline, because harp-submit sits in front of
every submission and must never hold one up: a daemon that is absent, slow,
or talks nonsense makes ``call`` raise ``HarpdUnavailable`` within the time
given, and the caller submits the user's job unchanged.

It uses the C modules ``_socket`` and ``_json`` directly: ``socket`` and
``json`` pull in ``enum`` and ``re``, which cost more start-up time than the
whole round trip to harpd.
"""

from __future__ import annotations

import _json
import _socket
import math
import os
import time

from . import route

TYPE_CHECKING = False  # typing costs milliseconds to import; checkers still see these
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, ClassVar

DEFAULT_SOCKET = route.DEFAULT_SOCKET
DEFAULT_CONFIG = route.DEFAULT_CONFIG
DEFAULT_TIMEOUT_S = 2.0
MAX_ANSWER = 1 << 20  # same bound as the server's request limit
PROTOCOL_VERSION = 1
CONNECT_TIMEOUT_S = 0.5  # per server while another is left to try: a dead host must not eat the budget


class HarpdUnavailable(Exception):
    """No usable answer from harpd; ``reason`` is one line for the user.

    ``reachable`` tells whether something answered at all (so a later
    ``register`` is worth trying); ``final`` that harpd itself refused (no
    other server is asked).
    """

    def __init__(self, reason: str, reachable: bool = False, final: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.reachable = reachable
        self.final = final


def socket_path(environ: Mapping[str, str] = os.environ) -> str:
    """HARP_SOCKET, else ``[server] socket`` of the harpd config, else the default."""
    return socket_choice(environ)[0]


def socket_choice(environ: Mapping[str, str] = os.environ) -> tuple[str, str | None]:
    """``socket_path``'s answer, and one line for the user when HARP_CONFIG was set but unusable."""
    found, problems = route.choose(environ)
    return found.socket, (problems[0] if problems and problems[0].startswith("HARP_CONFIG=") else None)


def timeout_s(environ: Mapping[str, str] = os.environ) -> tuple[float, str | None]:
    """The total time allowed for a prediction (HARP_TIMEOUT), and a warning if unusable."""
    raw = environ.get("HARP_TIMEOUT")
    if raw is None or raw == "":
        return DEFAULT_TIMEOUT_S, None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (0 < value <= 3600):  # also rejects nan
        return (
            DEFAULT_TIMEOUT_S,
            f"HARP_TIMEOUT={raw!r} is not a number of seconds in (0, 3600]; using {DEFAULT_TIMEOUT_S:g}",
        )
    return value, None


def call(
    path: str,
    message: Mapping[str, object],
    timeout: float,
    max_answer: int | None = None,
    deadline: float | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Send one request over the Unix socket and return the ``ok`` answer; raise HarpdUnavailable otherwise.

    ``max_answer`` (bytes, default MAX_ANSWER) guards against a runaway peer;
    only the admin CLI's reports raise it.  ``deadline`` (on ``clock``):
    when earlier servers already used part of ``timeout`` (``ask``).
    ``clock`` (seconds, like time.monotonic, which it is but in tests) is what
    every deadline is measured on, so a test can drive the deadline itself.
    """
    deadline = clock() + timeout if deadline is None else deadline
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    to = _Endpoint(
        path,
        path,
        sealed=False,
        absent=f"harpd is not running (no socket at {path})",
        denied=f"no permission to use harpd's socket {path}",
        # the file is there but nobody listens: a harpd that was killed left it behind
        refused=f"harpd is not answering at {path} (connection refused; stale socket?)",
    )
    lines = _exchange(sock, to, _body(message) + b"\n", deadline, timeout, None, max_answer, clock=clock)
    return _answer(lines[0], "harpd")


def call_tcp(
    server: tuple[str, int],
    message: Mapping[str, object],
    timeout: float,
    munge: Any,
    harpd_uids: tuple[int, ...] = (0,),
    connect_timeout: float | None = None,
    max_answer: int | None = None,
    deadline: float | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """``call`` over TCP: the request sealed with a MUNGE credential, the answer believed only if sealed by harpd.

    ``munge`` is a ``harp_submit.munge.Munge``; ``connect_timeout`` bounds the
    connection alone, so a host that drops packets leaves time for the next.
    An answer harpd did not seal raises HarpdUnavailable: the job goes in unchanged.
    """
    from .munge import MungeError
    from .sealed import Refused, open_answer, seal_request

    deadline = clock() + timeout if deadline is None else deadline
    where = f"{server[0]}:{server[1]}"
    try:
        data, nonce = seal_request(munge, _body(message))
    except MungeError as exc:
        raise HarpdUnavailable(f"cannot make a MUNGE credential for harpd at {where}: {exc.message}") from None
    try:
        family, kind, proto, _, addr = _socket.getaddrinfo(_host(server[0]), server[1], 0, _socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError) as exc:
        raise HarpdUnavailable(
            f"cannot resolve harpd's host {server[0]}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    to = _Endpoint(
        addr,
        where,
        sealed=True,
        absent=f"harpd is not running at {where} (connection refused)",
        denied=f"no permission to reach harpd at {where}",
    )
    lines = _exchange(
        _socket.socket(family, kind, proto), to, data, deadline, timeout, connect_timeout, max_answer, clock=clock
    )
    if len(lines) < 2:  # unsealed: harpd refusing our credential, or not harpd at all; either way not final
        try:
            _answer(lines[0], f"harpd at {where}")
        except HarpdUnavailable as exc:
            raise HarpdUnavailable(exc.reason, True) from None
        raise HarpdUnavailable(f"unsealed answer from {where} ignored", True)
    try:
        open_answer(munge, nonce, lines[0], lines[1], harpd_uids)
    except Refused as exc:
        raise HarpdUnavailable(f"answer from {where} not believed: {exc.reason}", True) from None
    return _answer(lines[1], f"harpd at {where}")


def ask(
    where: route.Route,
    message: Mapping[str, object],
    timeout: float,
    max_answer: int | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """harpd's ``ok`` answer from the first of ``where``'s targets that gives one, all within ``timeout``.

    Only a refusal harpd itself vouches for (the Unix socket, or a sealed
    answer) ends the search; anything else moves on to the next server.
    """
    deadline = clock() + timeout
    targets = where.targets()
    failures: list[HarpdUnavailable] = []
    munge = None
    for i, target in enumerate(targets):
        left = deadline - clock()
        if left <= 0:
            break
        try:
            if isinstance(target, str):
                return call(target, message, timeout, max_answer, deadline, clock=clock)
            if munge is None:
                from .munge import Munge
                from .munge import socket_path as munge_socket

                munge = Munge(munge_socket(where.munge_socket))
            more = i < len(targets) - 1
            return call_tcp(
                target,
                message,
                timeout,
                munge,
                where.harpd_uids,
                min(left, CONNECT_TIMEOUT_S) if more else None,
                max_answer,
                deadline,
                clock=clock,
            )
        except HarpdUnavailable as exc:
            if exc.final:
                raise
            failures.append(exc)
    if not failures:
        raise HarpdUnavailable(f"no time left to ask harpd (HARP_TIMEOUT {timeout:g} s)")
    if len(failures) == 1:
        raise failures[0]
    raise HarpdUnavailable("; ".join(f.reason for f in failures), any(f.reachable for f in failures))


def _host(name: str) -> bytes | str:
    """``name`` as getaddrinfo should get it: ASCII bytes, the same bytes the ``idna`` codec makes of it.

    Given a str, getaddrinfo encodes it with the ``idna`` codec, which
    imports ``re`` and ``stringprep``: more start-up time than all of
    harp-submit's own modules, paid on every submission over TCP.  A
    name outside ASCII (rare) still goes through ``idna``.
    """
    try:
        return name.encode("ascii")
    except UnicodeEncodeError:
        return name


def _body(message: Mapping[str, object]) -> bytes:
    return dumps({"v": PROTOCOL_VERSION, **message}).encode()


class _Endpoint:
    """A harpd to reach: its address, its name in messages, whether it seals its answers (TCP), and why
    it could not be reached in words: ``absent`` (nothing there), ``denied`` (no permission), ``refused``
    (default ``absent``: something there but nothing listening).  A plain class: harp-submit's start-up
    imports no dataclasses."""

    __slots__ = ("absent", "addr", "denied", "refused", "sealed", "where")

    def __init__(
        self, addr: Any, where: str, *, sealed: bool, absent: str, denied: str, refused: str | None = None
    ) -> None:
        self.addr, self.where, self.sealed = addr, where, sealed
        self.absent, self.denied, self.refused = absent, denied, refused


def _exchange(
    sock: Any,
    to: _Endpoint,
    data: bytes,
    deadline: float,
    timeout: float,
    connect_timeout: float | None,
    max_answer: int | None,
    *,
    clock: Callable[[], float],
) -> list[bytes]:
    """Connect ``sock`` (closed afterwards) to ``to``, send ``data``, read the answer's lines: one, or two
    when it starts with a MUNGE credential (``to.sealed``); ``connect_timeout`` bounds the connection alone."""
    addr, where, sealed = to.addr, to.where, to.sealed
    absent, denied, refused = to.absent, to.denied, to.refused
    limit = MAX_ANSWER if max_answer is None else max_answer
    buf = bytearray()
    try:
        sock.settimeout(max(0.001, min(connect_timeout or timeout, deadline - clock())))
        try:
            sock.connect(addr)
        except FileNotFoundError:
            raise HarpdUnavailable(absent) from None
        except ConnectionRefusedError:
            raise HarpdUnavailable(refused or absent) from None
        except PermissionError:
            raise HarpdUnavailable(denied) from None
        except TimeoutError:
            raise HarpdUnavailable(
                f"harpd at {where} did not accept a connection in time"
                if connect_timeout
                else f"harpd did not answer within {timeout:g} s"
            ) from None
        except OSError as exc:
            raise HarpdUnavailable(f"cannot reach harpd at {where}: {exc.strerror or exc}") from None
        _settimeout(sock, deadline, clock)
        sock.sendall(data)
        while True:
            _settimeout(sock, deadline, clock)
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
            if b"\n" in chunk:
                need = 2 if sealed and buf.startswith(b"MUNGE:") else 1
                if buf.count(b"\n") >= need:
                    break
            if len(buf) > limit:
                raise HarpdUnavailable(f"harpd's answer is too large (over {limit} bytes)", True)
    except TimeoutError:
        raise HarpdUnavailable(f"harpd did not answer within {timeout:g} s", True) from None
    except OSError as exc:
        raise HarpdUnavailable(f"cannot talk to harpd at {where}: {exc.strerror or exc}", True) from None
    finally:
        sock.close()
    lines = bytes(buf).split(b"\n")
    if not lines[0].strip():
        raise HarpdUnavailable("harpd closed the connection without an answer", True)
    if sealed and lines[0].startswith(b"MUNGE:"):
        return lines[:2]
    return lines[:1]


def _answer(line: bytes, who: str) -> dict[str, Any]:
    """The ``ok`` answer in ``line``; HarpdUnavailable (final: harpd said no) otherwise."""
    try:
        answer = loads(line.decode("utf-8"))
    except ValueError:
        raise HarpdUnavailable(f"{who}'s answer is not JSON", True) from None
    if not isinstance(answer, dict):
        raise HarpdUnavailable(f"{who}'s answer is not a JSON object", True)
    if answer.get("ok") is not True:
        err = answer.get("error")
        err = err if isinstance(err, str) and err else "no reason given"
        raise HarpdUnavailable(f"{who} refused: {_one_line(err)}", True, final=True)
    return answer


def _settimeout(sock: Any, deadline: float, clock: Callable[[], float]) -> None:
    left = deadline - clock()
    if left <= 0:
        raise TimeoutError()
    sock.settimeout(left)


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- JSON without importing json (see the module docstring) ---------------------


def dumps(obj: Any) -> str:
    """Compact JSON for the protocol's plain data (dict, list, str, int, float, bool, None)."""
    out: list[str] = []
    _encode(obj, out, 0)
    return "".join(out)


def _encode(obj: Any, out: list[str], depth: int) -> None:
    if depth > 64:
        raise ValueError("nesting too deep")
    if obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, str):
        out.append(_json.encode_basestring_ascii(obj))
    elif isinstance(obj, int):
        out.append(int.__repr__(obj))
    elif isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError("NaN and infinity are not JSON")
        out.append(float.__repr__(obj))
    elif isinstance(obj, dict):
        out.append("{")
        first = True
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"JSON object keys must be strings, not {type(k).__name__}")
            if not first:
                out.append(",")
            first = False
            out.append(_json.encode_basestring_ascii(k))
            out.append(":")
            _encode(v, out, depth + 1)
        out.append("}")
    elif isinstance(obj, (list, tuple)):
        out.append("[")
        for i, v in enumerate(obj):
            if i:
                out.append(",")
            _encode(v, out, depth + 1)
        out.append("]")
    else:
        raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


class _ScanContext:
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_no_constant)
    memo: ClassVar[dict] = {}


_scan = _json.make_scanner(_ScanContext())  # type: ignore[arg-type]  # a decoder's attributes, not a decoder
_WS = " \t\n\r"


def loads(text: str) -> Any:
    """Parse one JSON document; ValueError if it is not exactly one."""
    start = len(text) - len(text.lstrip(_WS))
    try:
        obj, end = _scan(text, start)
    except StopIteration:
        raise ValueError("not JSON") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if text[end:].strip(_WS):
        raise ValueError("extra data after JSON")
    return obj
