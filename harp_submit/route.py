"""Where harpd is: this host's Unix socket, then ``[client] servers`` over TCP.

A site runs one harpd for the cluster; login and compute nodes reach it over
TCP (``[client] servers`` in /etc/harp/harpd.toml, or HARP_SERVERS), the
harpd host itself over its Unix socket.  The socket is tried first when it
exists here (or when no servers are configured, so the user hears "harpd is
not running"), then each server in order, all within the one HARP_TIMEOUT.

A bad entry is said in one line and skipped, never fatal: harp-submit fails
open.  ``harpd --check-config`` refuses the same entries at the harpd host.
"""

from __future__ import annotations

import os

from . import config_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_SOCKET = "/run/harp/harpd.sock"
DEFAULT_CONFIG = "/etc/harp/harpd.toml"
DEFAULT_PORT = 6820

_KEYS = (("server", "socket"), ("client", "servers"), ("client", "harpd_uid"), ("munge", "socket"))


def parse_address(text: str, any_port: bool = False) -> tuple[str, int]:
    """(host, port) of ``HOST:PORT`` or ``[IPv6]:PORT``; ValueError saying what is wrong.

    ``any_port``: port 0 (the kernel picks one) is allowed, for tests' listeners.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. harp1:{DEFAULT_PORT})")
    text = text.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
    else:
        host, sep, port = text.rpartition(":")
        if ":" in host:
            raise ValueError(f"{text!r}: write an IPv6 address in brackets, e.g. [::1]:{DEFAULT_PORT}")
    if not sep or not host:
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. harp1:{DEFAULT_PORT})")
    if not (port.isdigit() and port.isascii() and (0 if any_port else 1) <= int(port) <= 65535):
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    return host, int(port)


class Route:
    """How to reach harpd from this host."""

    __slots__ = ("socket", "servers", "munge_socket", "harpd_uids")

    def __init__(
        self,
        socket: str,
        servers: tuple[tuple[str, int], ...] = (),
        munge_socket: str | None = None,
        harpd_uids: tuple[int, ...] = (0,),
    ):
        self.socket = socket
        self.servers = servers
        self.munge_socket = munge_socket
        self.harpd_uids = harpd_uids

    def targets(self) -> list[str | tuple[str, int]]:
        """What to try, in order: the socket path (a str), then (host, port) pairs."""
        local = not self.servers or os.path.exists(self.socket)
        return ([self.socket] if local else []) + list(self.servers)


def choose(environ: Mapping[str, str] = os.environ) -> tuple[Route, list[str]]:
    """The route, and one line per problem for the user (a bad HARP_CONFIG, a bad server entry).

    A HARP_CONFIG that names a missing, unreadable or malformed file is
    someone's mistake (a typo, a config not copied to this host): harp still
    falls back to the defaults, but says so instead of failing silently.  The
    default config being absent is normal and not mentioned.
    """
    problems: list[str] = []
    found = _config(environ, problems)
    socket = environ.get("HARP_SOCKET") or found.get(("server", "socket"))
    if not isinstance(socket, str) or not socket:
        socket = DEFAULT_SOCKET
    if problems and not environ.get("HARP_SOCKET"):
        problems[0] += f"; using the default socket {DEFAULT_SOCKET}"
    elif environ.get("HARP_SOCKET"):
        problems.clear()  # the socket was named outright: the config's state does not matter for it
    raw = environ.get("HARP_SERVERS")
    origin = "HARP_SERVERS"
    if raw is not None:
        entries: object = raw.replace(",", " ").split()
    else:
        entries, origin = found.get(("client", "servers"), []), "[client] servers"
    servers: list[tuple[str, int]] = []
    if not isinstance(entries, list):
        problems.append(f"{origin} must be a list of \"HOST:PORT\" strings; ignored")
        entries = []
    for entry in entries:
        try:
            servers.append(parse_address(entry))
        except ValueError as exc:
            problems.append(f"{origin}: {exc}; skipped")
    munge_socket = environ.get("HARP_MUNGE_SOCKET") or found.get(("munge", "socket"))
    uid = found.get(("client", "harpd_uid"), 0)
    if not isinstance(uid, int) or isinstance(uid, bool):
        problems.append("[client] harpd_uid must be a uid number; using 0 (root)")
        uid = 0
    return Route(socket, tuple(servers), munge_socket if isinstance(munge_socket, str) else None, (uid,)), problems


def _config(environ: Mapping[str, str], problems: list[str]) -> dict:
    explicit = environ.get("HARP_CONFIG")
    path = explicit or DEFAULT_CONFIG
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        return config_file.values(raw.decode("utf-8"), _KEYS)
    except FileNotFoundError:
        problem = "no such file"
    except OSError as exc:
        problem = f"cannot read it ({exc.strerror or exc})"
    except UnicodeDecodeError:
        problem = "not UTF-8 text"
    except ValueError as exc:
        problem = str(exc)
    if explicit:
        problems.append(f"HARP_CONFIG={path}: {problem}")
    return {}
