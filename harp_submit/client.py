"""Talk to harpd over its Unix socket: one JSON line out, one JSON line back.

Everything here has a hard deadline, because harp-submit sits in front of
every submission and must never hold one up: a daemon that is absent, slow,
or talks nonsense makes ``call`` raise ``HarpdUnavailable`` within the time
given, and the caller submits the user's job unchanged.
"""

from __future__ import annotations

import json
import os
import socket
import time
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
    path = environ.get("HARP_SOCKET")
    if path:
        return path
    config = environ.get("HARP_CONFIG") or DEFAULT_CONFIG
    try:
        with open(config, "rb") as fh:
            raw = fh.read()
    except OSError:
        return DEFAULT_SOCKET
    try:
        import tomllib  # only paid for when a config file exists

        value = tomllib.loads(raw.decode("utf-8")).get("server", {}).get("socket")
    except (ValueError, AttributeError):  # TOMLDecodeError and UnicodeDecodeError are ValueErrors
        return DEFAULT_SOCKET
    return value if isinstance(value, str) and value else DEFAULT_SOCKET


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


def call(path: str, message: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send one request and return the ``ok`` answer; raise HarpdUnavailable otherwise."""
    deadline = time.monotonic() + timeout
    data = json.dumps({"v": PROTOCOL_VERSION, **message}, separators=(",", ":")).encode() + b"\n"
    reachable = False
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
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
            if len(buf) > MAX_ANSWER:
                raise HarpdUnavailable("harpd's answer is too large", reachable)
    except HarpdUnavailable:
        raise
    except (socket.timeout, TimeoutError):
        raise HarpdUnavailable(f"harpd did not answer within {timeout:g} s", reachable) from None
    except OSError as exc:
        raise HarpdUnavailable(f"cannot talk to harpd at {path}: {exc.strerror or exc}", reachable) from None
    finally:
        sock.close()
    line = bytes(buf).split(b"\n", 1)[0]
    if not line.strip():
        raise HarpdUnavailable("harpd closed the connection without an answer", reachable)
    try:
        answer = json.loads(line)
    except ValueError:
        raise HarpdUnavailable("harpd's answer is not JSON", reachable) from None
    if not isinstance(answer, dict):
        raise HarpdUnavailable("harpd's answer is not a JSON object", reachable)
    if answer.get("ok") is not True:
        err = answer.get("error")
        err = err if isinstance(err, str) and err else "no reason given"
        raise HarpdUnavailable(f"harpd refused: {_one_line(err)}", reachable)
    return answer


def _settimeout(sock: socket.socket, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout()
    sock.settimeout(left)


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
