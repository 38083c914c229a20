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
import os
import time
TYPE_CHECKING = False  # typing costs milliseconds to import; checkers still see these
if TYPE_CHECKING:
    from typing import Any, Mapping

DEFAULT_SOCKET = "/run/harp/harpd.sock"
DEFAULT_CONFIG = "/etc/harp/harpd.toml"
DEFAULT_TIMEOUT_S = 2.0
MAX_ANSWER = 1 << 20  # same bound as the server's request limit
PROTOCOL_VERSION = 1


class HarpdUnavailable(Exception):
    """No usable answer from harpd; ``reason`` is one line for the user.

    ``reachable`` tells whether something answered at all (so a later
    ``register`` is worth trying).
    """

    def __init__(self, reason: str, reachable: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.reachable = reachable


def socket_path(environ: Mapping[str, str] = os.environ) -> str:
    """HARP_SOCKET, else ``[server] socket`` of the harpd config, else the default."""
    return socket_choice(environ)[0]


def socket_choice(environ: Mapping[str, str] = os.environ) -> tuple[str, str | None]:
    """``socket_path``'s answer, and one line for the user when HARP_CONFIG was set but unusable.

    A HARP_CONFIG that names a missing, unreadable or malformed file is
    someone's mistake (a typo, a config not copied to this host): harp still
    falls back to the default socket, but says so instead of failing
    silently.  The default config being absent is normal and not mentioned.
    """
    path = environ.get("HARP_SOCKET")
    if path:
        return path, None
    explicit = environ.get("HARP_CONFIG")
    config = explicit or DEFAULT_CONFIG

    def fallback(problem: str) -> tuple[str, str | None]:
        if not explicit:
            return DEFAULT_SOCKET, None
        return DEFAULT_SOCKET, f"HARP_CONFIG={config}: {problem}; using the default socket {DEFAULT_SOCKET}"

    try:
        with open(config, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return fallback("no such file")
    except OSError as exc:
        return fallback(f"cannot read it ({exc.strerror or exc})")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return fallback("not UTF-8 text")
    value = _simple_server_socket(text)
    if value is _UNSURE:
        try:
            import tomllib  # exact, but its import costs more than a whole round trip

            value = tomllib.loads(text).get("server", {}).get("socket")
        except ValueError:  # TOMLDecodeError
            return fallback("not valid TOML")
        except AttributeError:
            return fallback("its [server] is not a table")
    return (value, None) if isinstance(value, str) and value else (DEFAULT_SOCKET, None)


_UNSURE = object()


def _simple_server_socket(text: str) -> object:
    """``[server] socket`` from a plainly written TOML file, or _UNSURE.

    Handles what harpd.toml looks like (tables, ``key = value`` lines, comments,
    plain quoted strings); anything else that could bear on the answer
    (dotted keys, inline tables, multi-line or escaped strings) is left to
    tomllib.  Returns None when the file plainly has no such key.
    """
    table = ""
    found: object = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if '"""' in line or "\'\'\'" in line:
            return _UNSURE
        if line.startswith("["):
            if line.startswith("[["):
                return _UNSURE
            end = line.find("]")
            rest = line[end + 1 :].strip()
            if end < 0 or (rest and not rest.startswith("#")):
                return _UNSURE
            table = line[1:end].strip()
            if table.startswith("server.") or "\"" in table or "'" in table:
                return _UNSURE
            continue
        key, eq, value = line.partition("=")
        key = key.strip()
        if not eq:
            return _UNSURE
        if "." in key or key.startswith(('"', "'")) or (table == "" and key == "server"):
            return _UNSURE  # dotted, quoted or inline-table keys: tomllib knows best
        if table != "server" or key != "socket":
            continue
        value = value.strip()
        if len(value) < 2 or value[0] not in "\"'":
            return _UNSURE
        q = value[0]
        close = value.find(q, 1)
        if close < 0:
            return _UNSURE
        inner, tail = value[1:close], value[close + 1 :].strip()
        if (q == '"' and "\\" in inner) or (tail and not tail.startswith("#")):
            return _UNSURE
        if found is not None:
            return _UNSURE  # a duplicate key: invalid TOML, let tomllib say so
        found = inner
    return found


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
        return DEFAULT_TIMEOUT_S, f"HARP_TIMEOUT={raw!r} is not a number of seconds in (0, 3600]; using {DEFAULT_TIMEOUT_S:g}"
    return value, None


def call(path: str, message: dict[str, Any], timeout: float, max_answer: int | None = None) -> dict[str, Any]:
    """Send one request and return the ``ok`` answer; raise HarpdUnavailable otherwise.

    ``max_answer`` (bytes, default MAX_ANSWER) guards against a runaway peer;
    only the admin CLI's reports raise it.
    """
    limit = MAX_ANSWER if max_answer is None else max_answer
    deadline = time.monotonic() + timeout
    data = dumps({"v": PROTOCOL_VERSION, **message}).encode() + b"\n"
    reachable = False
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            raise HarpdUnavailable(f"harpd is not running (no socket at {path})") from None
        except PermissionError:
            raise HarpdUnavailable(f"no permission to use harpd's socket {path}") from None
        reachable = True
        _settimeout(sock, deadline)
        sock.sendall(data)
        buf = bytearray()
        while True:
            _settimeout(sock, deadline)
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
            if b"\n" in chunk:
                break
            if len(buf) > limit:
                raise HarpdUnavailable(f"harpd's answer is too large (over {limit} bytes)", reachable)
    except HarpdUnavailable:
        raise
    except TimeoutError:
        raise HarpdUnavailable(f"harpd did not answer within {timeout:g} s", reachable) from None
    except OSError as exc:
        raise HarpdUnavailable(f"cannot talk to harpd at {path}: {exc.strerror or exc}", reachable) from None
    finally:
        sock.close()
    line = bytes(buf).split(b"\n", 1)[0]
    if not line.strip():
        raise HarpdUnavailable("harpd closed the connection without an answer", reachable)
    try:
        answer = loads(line.decode("utf-8"))
    except ValueError:
        raise HarpdUnavailable("harpd's answer is not JSON", reachable) from None
    if not isinstance(answer, dict):
        raise HarpdUnavailable("harpd's answer is not a JSON object", reachable)
    if answer.get("ok") is not True:
        err = answer.get("error")
        err = err if isinstance(err, str) and err else "no reason given"
        raise HarpdUnavailable(f"harpd refused: {_one_line(err)}", reachable)
    return answer


def _settimeout(sock: Any, deadline: float) -> None:
    left = deadline - time.monotonic()
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
        if obj != obj or obj in (float("inf"), float("-inf")):
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
    memo: dict = {}


_scan = _json.make_scanner(_ScanContext())
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
