"""``/metrics`` over HTTP, to the peers the config allows: loopback, and ``metrics.allow``.

prometheus_client writes the exposition (``make_wsgi_app``); this module
only decides who may read it.  harpd runs as root and the numbers say how
busy the cluster's users are, so a scrape from any other address is answered
403 with one line naming the setting to change, and counted
(``harp_refusals_total{reason="metrics_peer"}``).  Served from a thread of
its own (prometheus_client's threading WSGI server), beside the socket.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from harp_submit.route import parse_address
from harpd.metrics import record
from harpd.metrics.registry import REGISTRY

log = logging.getLogger("harpd.metrics")

__all__ = ["Allowed", "MetricsServer", "start", "PATH"]

PATH = "/metrics"
REFUSED_LINE = "harpd: this address may not scrape /metrics; add it to metrics.allow in harpd.toml"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
StartResponse = Callable[..., Any]


class Allowed:
    """Whether a peer address may scrape: loopback always, else one of ``networks`` (addresses or CIDR)."""

    def __init__(self, networks: Iterable[str] = ()) -> None:
        self.networks: list[Network] = [ipaddress.ip_network(n.strip(), strict=False) for n in networks]

    def __call__(self, host: str | None) -> bool:
        try:
            addr = ipaddress.ip_address((host or "").split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped  # a dual-stack listener sees IPv4 peers as ::ffff:a.b.c.d
        return addr.is_loopback or any(addr in n for n in self.networks)


def guarded(app: Callable[..., Iterable[bytes]], allowed: Allowed) -> Callable[..., Iterable[bytes]]:
    """``app`` behind the peer check, at ``/metrics`` only."""

    def guard(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if not allowed(environ.get("REMOTE_ADDR")):
            record.refused("metrics peer")
            log.debug("metrics: refused a scrape from a peer metrics.allow does not name")
            return _answer(start_response, "403 Forbidden", REFUSED_LINE)
        if environ.get("PATH_INFO", "/") != PATH:
            return _answer(start_response, "404 Not Found", f"harpd serves metrics at {PATH} only")
        return app(environ, start_response)

    return guard


def _answer(start_response: StartResponse, status: str, line: str) -> list[bytes]:
    body = (line + "\n").encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
    return [body]


class _Quiet(WSGIRequestHandler):
    """No access log line per scrape (one a second would fill the journal)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class MetricsServer:
    """The running endpoint: its address (the port the kernel gave, when asked for 0) and ``shutdown``."""

    def __init__(self, httpd: Any, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread
        host, port = httpd.server_address[:2]
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.url = f"http://{self.address}{PATH}"

    def shutdown(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


def start(listen: str, allow: Sequence[str] = ()) -> MetricsServer:
    """Serve ``/metrics`` on ``listen`` (``HOST:PORT``, validated by the config); OSError if it cannot bind."""
    host, port = parse_address(listen, any_port=True)
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class Server(ThreadingWSGIServer):
        address_family = family

    httpd = make_server(host, port, guarded(make_wsgi_app(REGISTRY), Allowed(allow)), Server, handler_class=_Quiet)
    thread = threading.Thread(target=httpd.serve_forever, name="harpd-metrics", daemon=True)
    thread.start()
    server = MetricsServer(httpd, thread)
    log.info("metrics: serving %s (loopback%s may scrape)", server.url, f" and {', '.join(allow)}" if allow else "")
    return server
