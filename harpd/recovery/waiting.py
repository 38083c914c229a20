"""Waiting on Slurm: when to ask again, and one log line per change of state, not per try.

A slurmctld or slurmdbd that is slow, stopped or restarting answers nothing
(``SlurmUnavailable``), and accounting lags slurmctld by minutes under load
(``NotRecordedYet``).  Neither says the job is gone, so recovery keeps the
attempt and asks again, backing off from the poll interval to
``MAX_PAUSE_S``, for as long as the job can still be recovered
(``recovery.slurm_wait_h``, measured by the machine from the first
"no record" answer).  ``Waits`` is that bookkeeping, in memory: what must
survive a restart (since when, the last error) is in the attempt's row.

One line when a wait begins, one when its kind changes (no answer <-> no
record), one when Slurm answers again: a log that says what happened, not
a line every two seconds for an hour of outage.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from harpd.slurm.base import NotRecordedYet

__all__ = ["Wait", "Waits", "MAX_PAUSE_S", "kind_of"]

#: the longest pause between two questions to a Slurm that does not answer
MAX_PAUSE_S = 300.0


def kind_of(exc: BaseException) -> str:
    """The wait's kind in words: what the log and ``harp health`` say harp waits for."""
    return "accounting has no record yet" if isinstance(exc, NotRecordedYet) else "Slurm does not answer"


@dataclass
class Wait:
    """One thing (a chain's attempt) waiting on Slurm."""

    kind: str
    since: float  # clock time of the first failure of this wait
    error: str  # the last failure, one line
    pause_s: float  # the pause before the next question
    next_at: float  # clock time of the next question
    tries: int = 1


class Waits:
    """Waits by key (a chain id).

    Changed under recovery's lock; ``all`` is read without it (``harp
    health`` must answer while a tick waits 30 s on a stopped Slurm), so the
    table itself is guarded by a lock of its own.
    """

    def __init__(self, clock: Callable[[], float], first_pause_s: float, log: logging.Logger) -> None:
        self.clock = clock
        self.first_pause_s = max(0.5, float(first_pause_s))
        self.log = log
        self._waits: dict[str, Wait] = {}
        self._guard = threading.Lock()

    def due(self, key: str) -> bool:
        """May ``key`` ask Slurm now (no wait, or its pause is over)?"""
        w = self._waits.get(key)
        return w is None or self.clock() >= w.next_at

    def get(self, key: str) -> Wait | None:
        return self._waits.get(key)

    def failed(self, key: str, exc: BaseException, what: str, since: float | None = None) -> tuple[Wait, bool]:
        """Slurm did not answer (or had no record) for ``key``: the next question after a longer pause.

        ``what`` names the thing in the log (``job 7: attempt 2``); ``since``
        the start of a wait a previous harpd began (from the store).  Returns
        the wait and whether its state changed (it began, or changed kind).
        """
        now = self.clock()
        kind = kind_of(exc)
        w = self._waits.get(key)
        changed = w is None or w.kind != kind
        if w is None:
            w = Wait(kind, now if since is None else float(since), str(exc), self.first_pause_s, now)
            with self._guard:
                self._waits[key] = w
            self.log.warning("%s waits on Slurm (%s): %s; asked again with back-off", what, kind, exc)
        else:
            w.tries += 1
            w.pause_s = min(MAX_PAUSE_S, w.pause_s * 2)
            if w.kind != kind:
                self.log.warning(
                    "%s still waits on Slurm, now %s (%d tries, %.0f s): %s", what, kind, w.tries, now - w.since, exc
                )
            w.kind = kind
            w.error = str(exc)
        w.next_at = now + w.pause_s
        return w, changed

    def answered(self, key: str, what: str) -> None:
        """Slurm answered for ``key``: its wait (if any) ends, said once."""
        with self._guard:
            w = self._waits.pop(key, None)
        if w is not None:
            self.log.info(
                "%s: Slurm answered again after %.0f s (%d tries); carrying on", what, self.clock() - w.since, w.tries
            )

    def forget(self, key: str) -> None:
        """The wait ended otherwise (the chain stopped): nothing more to say."""
        with self._guard:
            self._waits.pop(key, None)

    def all(self) -> list[Wait]:
        """A snapshot of the waits (copies: safe to read while the machine goes on)."""
        with self._guard:
            return [dataclasses.replace(w) for w in self._waits.values()]
