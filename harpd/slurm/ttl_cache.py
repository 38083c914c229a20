"""One answer from the controller shared by every reader for a while, and a failure remembered too.

Partition limits and billing weights are read on a user's request path,
where scontrol's tens of milliseconds (seconds, on a busy controller) are
too slow to pay per sbatch.  So one fetch serves every reader for ``ttl_s``.

A failed fetch is remembered as well, for ``retry_s``: without that, while
slurmctld is down, every submission would run scontrol again under the
cache's lock, waiting its whole ``command_timeout_s``, one after the other,
and every submission would log the same warning.  While the fetch fails,
readers get the last good answer (limits change far less often than a
controller restarts) or, if there never was one, a ``SlurmError`` with the
remembered failure's line.  The failure is logged once per ``retry_s``, and
its end once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from harpd.slurm.base import SlurmError

__all__ = ["ttl_cached"]

log = logging.getLogger("harpd.slurm")

T = TypeVar("T")


class _Cached(Generic[T]):
    """``fetch()``'s value, fresh within ``ttl_s``; see the module docstring for failures."""

    def __init__(
        self, fetch: Callable[[], T], what: str, ttl_s: float, retry_s: float, clock: Callable[[], float]
    ) -> None:
        self._fetch = fetch
        self._what = what
        self._ttl_s = ttl_s
        self._retry_s = retry_s
        self._clock = clock
        self._lock = threading.Lock()
        self._value: T | None = None
        self._fetched_at: float | None = None  # of the last good answer
        self._error: str | None = None  # the failure's one line: an exception object kept and raised
        # again would pile up a traceback per raise and tie every caller's frame into a cycle
        self._failed_at = 0.0

    def __call__(self) -> T:
        with self._lock:
            now = self._clock()
            if self._fetched_at is not None and now - self._fetched_at <= self._ttl_s:
                return self._value  # type: ignore[return-value]
            if self._error is not None and now - self._failed_at < self._retry_s:
                return self._stale_or_raise()
            try:
                value = self._fetch()
            except Exception as exc:  # the backend's SlurmError, or anything a backend raises
                self._error, self._failed_at = str(exc) or type(exc).__name__, now
                age = "" if self._fetched_at is None else f"; using the answer of {now - self._fetched_at:.0f} s ago"
                log.warning("%s unavailable: %s (next try in %g s%s)", self._what, exc, self._retry_s, age)
            else:
                if self._error is not None:
                    log.warning("%s available again", self._what)
                self._value, self._fetched_at, self._error = value, self._clock(), None
                return value
            return self._stale_or_raise()

    def _stale_or_raise(self) -> T:
        """The last good answer, or SlurmError with the failure's line (a new one each time)."""
        if self._fetched_at is None:
            raise SlurmError(str(self._error))
        return self._value  # type: ignore[return-value]


def ttl_cached(
    fetch: Callable[[], T],
    what: str,
    ttl_s: float,
    retry_s: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[], T]:
    """``fetch`` called at most once per ``ttl_s`` while it works, once per ``retry_s`` while it fails.

    ``what`` names the answer in the log ("partition limits").  ``clock``
    (seconds, monotonic) is a parameter so a test can move time.
    """
    return _Cached(fetch, what, ttl_s, min(retry_s, ttl_s), clock)
