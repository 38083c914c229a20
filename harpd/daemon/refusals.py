"""Refusal log lines, bounded: a flood of refused connections must not flood the log.

Every refusal (busy, too many unauthenticated connections from one peer, no
credential in time, a credential munged refuses) names its peer.  The first
``burst`` refusals of an interval are logged at once, whole (a handful of
forged credentials stays visible one by one; while a flood goes on, only the
first of each interval); the rest of that interval are counted and summed up
in one line when it ends: how many, of which kind, and the peers that sent
most.  A flood of 70,000 connections is then a line
every ``interval_s``, not 70,000 lines, and still says who sent it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from harpd.metrics import record as metrics

__all__ = ["RefusalLog"]

TOP_PEERS = 5


class RefusalLog:
    """Counts refusals by kind and peer; logs the first at once and a summary per interval.  Thread-safe."""

    def __init__(
        self, log: logging.Logger, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic, burst: int = 5
    ) -> None:
        self.log = log
        self.interval_s = interval_s
        self.burst = burst
        self._whole = 0  # refusals logged whole in this interval
        self.clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None  # start of the interval whose refusals are being counted
        self._kinds: Counter[str] = Counter()
        self._peers: Counter[str] = Counter()
        self.total = 0  # every refusal counted since start (tests, the stop line)

    def refused(self, kind: str, peer: str | None, detail: str) -> None:
        """One refusal of ``kind`` (a few words) from ``peer`` (address or None), ``detail`` its answer."""
        who = peer or "a local peer"
        metrics.refused(kind)
        now = self.clock()
        with self._lock:
            self.total += 1
            summary = None
            if self._since is None or now - self._since >= self.interval_s:
                summary = self._summary_locked(now)
                # a flood that goes on (the last interval needed a summary) gets one whole line, not a burst
                self._since, self._whole = now, 0 if summary is None else self.burst - 1
            elif self._whole >= self.burst:
                self._kinds[kind] += 1
                self._peers[_host(who)] += 1
                return
            self._whole += 1
        if summary:
            self.log.warning("%s", summary)
        self.log.warning("refused %s (%s): %s", who, kind, detail)

    def flush(self) -> None:
        """Log the summary of an interval that has ended (the accept loop calls this every tick)."""
        now = self.clock()
        with self._lock:
            if self._since is None or now - self._since < self.interval_s:
                return
            summary = self._summary_locked(now)
            self._since = None
        if summary:
            self.log.warning("%s", summary)

    def _summary_locked(self, now: float) -> str | None:
        if not self._kinds:
            return None
        n = sum(self._kinds.values())
        kinds = ", ".join(f"{k}: {c}" for k, c in self._kinds.most_common())
        peers = ", ".join(f"{p} ({c})" for p, c in self._peers.most_common(TOP_PEERS))
        more = len(self._peers) - TOP_PEERS
        span = now - (self._since or now)
        self._kinds.clear()
        self._peers.clear()
        return (
            f"refused {n} more connection(s) in the last {span:.0f}s ({kinds}); "
            f"top peers: {peers}{f' and {more} more' if more > 0 else ''}"
        )


def _host(peer: str) -> str:
    """The address without the port: a flood comes from one host on many ports."""
    if peer.startswith("["):
        return peer.split("]", 1)[0] + "]"
    head, sep, tail = peer.rpartition(":")
    return head if sep and tail.isdigit() else peer
