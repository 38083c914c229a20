"""harpd's WAL checkpoints, taken by a thread of their own instead of by whichever request commits.

Every ``predict`` commits a decision row.  Left to SQLite, the commit that
takes the WAL past 1000 pages also copies the WAL into the database file and
fsyncs it: measured here, 20-25 ms once every ~200 decisions on an empty
store and up to half a second on a store with a site's history, paid by one
user's sbatch.  harpd therefore turns that off (``Store.defer_checkpoints``)
and checkpoints once a second from this thread.  PASSIVE checkpoints never
wait for, nor block, the requests' readers and writers; SQLite releases the
GIL while it copies, so the requests' threads run meanwhile.

A checkpoint that fails (the store replaced or unwritable) is logged once,
and its recovery once; the requests' own writes report the same problem to
the admin through ``health``.
"""

from __future__ import annotations

import logging
import sqlite3
import threading

from harpd.store.base import StoreBase, StoreError

__all__ = ["Checkpointer"]

log = logging.getLogger("harpd.store")


class Checkpointer:
    """One thread checkpointing ``store`` every ``interval_s``; ``shutdown()`` stops it."""

    def __init__(self, store: StoreBase, interval_s: float = 1.0) -> None:
        self._store = store
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._failing = False
        self._thread: threading.Thread | None = None
        self.copied = 0  # WAL frames copied into the database (for tests and the stop log)

    @classmethod
    def start(cls, store: StoreBase, interval_s: float = 1.0) -> Checkpointer:
        """Take checkpoints off the store's commits and start the thread."""
        self = cls(store, interval_s)
        store.defer_checkpoints()
        self._thread = threading.Thread(target=self._run, name="harpd-checkpoint", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.run_once()

    def run_once(self) -> bool:
        """One PASSIVE checkpoint; False (logged once per failing spell) when it failed."""
        try:
            _frames, copied = self._store.checkpoint()
        except (StoreError, sqlite3.Error) as exc:
            if not self._failing:
                log.warning("WAL checkpoint failed: %s (retrying every %g s)", exc, self.interval_s)
            self._failing = True
            return False
        if self._failing:
            log.warning("WAL checkpoints work again")
        self._failing = False
        self.copied += max(0, copied)
        return True

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Stop the thread (the store's close then checkpoints what is left)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
