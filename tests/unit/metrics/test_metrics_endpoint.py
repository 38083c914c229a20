"""``/metrics`` answers loopback and the peers metrics.allow names; every other peer gets 403, counted."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from harpd.metrics import endpoint
from harpd.metrics.registry import REGISTRY


def refused_scrapes() -> float:
    return REGISTRY.get_sample_value("harp_refusals_total", {"reason": "metrics_peer"}) or 0.0


def call(app, addr: str, path: str = "/metrics") -> tuple[str, bytes]:
    """One WSGI request to ``app`` as if from ``addr``."""
    got: dict[str, str] = {}

    def start_response(status: str, headers: list, exc_info=None) -> None:
        got["status"] = status

    environ = {"REMOTE_ADDR": addr, "PATH_INFO": path, "REQUEST_METHOD": "GET", "QUERY_STRING": ""}
    body = b"".join(app(environ, start_response))
    return got["status"], body


def exposition(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"harp_decisions_total 1.0\n"]


@pytest.mark.parametrize(
    ("addr", "allow", "ok"),
    [
        ("127.0.0.1", [], True),
        ("127.8.9.10", [], True),
        ("::1", [], True),
        ("::ffff:127.0.0.1", [], True),  # a dual-stack listener's view of an IPv4 loopback peer
        ("10.1.2.3", [], False),
        ("192.168.0.7", [], False),
        ("2001:db8::5", [], False),
        ("::ffff:10.1.2.3", [], False),
        ("10.1.2.3", ["10.1.0.0/16"], True),
        ("10.2.0.1", ["10.1.0.0/16"], False),
        ("10.1.2.3", ["10.1.2.3"], True),
        ("::ffff:10.1.2.3", ["10.1.2.3"], True),
        ("2001:db8::5", ["2001:db8::/64"], True),
        ("", [], False),
        ("not-an-address", ["0.0.0.0/0"], False),
    ],
)
def test_only_loopback_and_the_allowed_may_scrape(addr, allow, ok):
    before = refused_scrapes()
    status, body = call(endpoint.guarded(exposition, endpoint.Allowed(allow)), addr)
    if ok:
        assert status.startswith("200") and b"harp_decisions_total" in body
        assert refused_scrapes() == before
    else:
        assert status.startswith("403"), status
        assert body.decode().strip() == endpoint.REFUSED_LINE
        assert b"harp_" not in body
        assert refused_scrapes() == before + 1


def test_other_paths_are_not_found():
    status, body = call(endpoint.guarded(exposition, endpoint.Allowed()), "127.0.0.1", "/")
    assert status.startswith("404") and b"/metrics" in body


@pytest.fixture
def served() -> Iterator[endpoint.MetricsServer]:
    server = endpoint.start("127.0.0.1:0")
    try:
        yield server
    finally:
        server.shutdown()


def test_loopback_scrape_is_prometheus_text(served):
    with urllib.request.urlopen(served.url, timeout=30) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    assert "# TYPE harp_decisions_total counter" in text
    assert "# TYPE harp_predict_latency_seconds histogram" in text


def _non_loopback_address() -> str | None:
    """An IPv4 address of this host that is not loopback (None: the host has none)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: the kernel only picks the source address
            addr = s.getsockname()[0]
    except OSError:
        return None
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


def test_a_real_non_loopback_peer_is_refused_unless_allowed():
    addr = _non_loopback_address()
    if addr is None:
        pytest.skip("this host has no non-loopback IPv4 address to scrape from")
    for allow, status in (([], 403), ([f"{addr}/32"], 200)):
        server = endpoint.start(f"{addr}:0", allow)
        try:
            try:
                with urllib.request.urlopen(server.url, timeout=30) as answer:
                    got = answer.status
            except urllib.error.HTTPError as exc:
                got = exc.code
                assert endpoint.REFUSED_LINE in exc.read().decode()
        finally:
            server.shutdown()
        assert got == status, (allow, got)


def test_an_address_in_use_is_an_oserror():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError):
            endpoint.start(f"127.0.0.1:{port}")
