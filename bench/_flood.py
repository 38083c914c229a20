"""A bounded flood of idle TCP connections, for the flood benchmark and its real-cluster test.

What anyone who reaches harpd's port can do without a credential: open
connections and send nothing, reopening each one harpd closes.  Bounded on
every side, so a test cannot leave it behind: loopback only, at most
``count`` sockets at once, at most ``seconds`` long, in one daemon thread
that stops by itself.  The sockets come from ``sources`` (addresses in
127.0.0.0/8, one per simulated host), round robin.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time

__all__ = ["IdleFlood", "loopback_sources"]

MAX_COUNT = 2000
MAX_SECONDS = 600.0


def loopback_sources(n: int, first: int = 2) -> list[str]:
    """``n`` loopback addresses, 127.0.1.<first>...: each a "host" of its own (Linux answers the whole /8)."""
    return [f"127.0.{1 + (first + i) // 250}.{(first + i) % 250 + 1}" for i in range(n)]


class IdleFlood:
    """``with IdleFlood(port, 500, sources, 60) as flood:`` holds up to 500 idle sockets on 127.0.0.1:port."""

    def __init__(self, port: int, count: int, sources: list[str], seconds: float) -> None:
        if not 0 < count <= MAX_COUNT or not 0 < seconds <= MAX_SECONDS or not sources:
            raise ValueError(f"a flood is 1..{MAX_COUNT} sockets for at most {MAX_SECONDS:g}s from >= 1 source")
        if not all(s.startswith("127.") for s in sources):
            raise ValueError("the flood stays on loopback")
        self.port, self.count, self.sources, self.seconds = port, count, sources, seconds
        self.opened = 0  # connections made in all
        self.closed_by_harpd = 0
        self.peak = 0  # most held at once
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="idle-flood", daemon=True)
        self.held = 0

    def __enter__(self) -> IdleFlood:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def wait_held(self, n: int, timeout: float = 60.0) -> int:
        """Wait until ``n`` sockets have been open at once (or the timeout); the peak."""
        end = time.monotonic() + timeout
        while self.peak < n and time.monotonic() < end and self._thread.is_alive():
            time.sleep(0.05)
        return self.peak

    def _open(self, sel: selectors.BaseSelector) -> bool:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((self.sources[self.opened % len(self.sources)], 0))
            s.settimeout(5)
            s.connect(("127.0.0.1", self.port))
            s.setblocking(False)
        except OSError:
            s.close()
            return False
        self.opened += 1
        sel.register(s, selectors.EVENT_READ)
        return True

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        end = time.monotonic() + self.seconds
        try:
            while not self._stop.is_set() and time.monotonic() < end:
                held = len(sel.get_map())
                while held < self.count and not self._stop.is_set():
                    if not self._open(sel):
                        break
                    held += 1
                    if held % 50 == 0:  # look at what harpd closed meanwhile
                        break
                self.held = len(sel.get_map())
                self.peak = max(self.peak, self.held)
                for key, _ in sel.select(timeout=0.05):
                    s = key.fileobj
                    try:
                        data = s.recv(4096)  # type: ignore[union-attr]
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data or data.endswith(b"\n"):
                        sel.unregister(s)
                        s.close()  # type: ignore[union-attr]
                        self.closed_by_harpd += 1
        finally:
            for key in list(sel.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]
            sel.close()
            self.held = 0
