"""When to retrain: on a timer and after enough new outcomes.

Kept apart from ``training`` so the daemon can wire the trigger at start
without loading scikit-learn (``harpd --check-config`` stays fast); the fit
itself is the ``retrain`` callable the daemon passes in.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("harpd.training")


def should_retrain(last_trained_at: float | None, now: float, new_outcomes: int, retrain_settings) -> bool:
    """Due when never trained, when ``interval_s`` passed, or after ``after_n_outcomes`` outcomes."""
    if last_trained_at is None:
        return True
    if now - last_trained_at >= retrain_settings.interval_s:
        return True
    return new_outcomes >= retrain_settings.after_n_outcomes


class RetrainSchedule:
    """Counts outcomes since the last training; the daemon asks ``due()`` after each ingest."""

    def __init__(self, retrain_settings, last_trained_at: float | None = None) -> None:
        self.settings = retrain_settings
        self.last_trained_at = last_trained_at
        self.new_outcomes = 0

    def note_outcomes(self, k: int) -> None:
        self.new_outcomes += max(int(k), 0)

    def due(self, now: float | None = None) -> bool:
        return should_retrain(self.last_trained_at, time.time() if now is None else now,
                              self.new_outcomes, self.settings)

    def trained(self, now: float | None = None) -> None:
        self.last_trained_at = time.time() if now is None else now
        self.new_outcomes = 0


def attach_retrain(scheduler: Any, retrain: Callable[[], Any], retrain_settings,
                   check_every_s: float = 60.0) -> Callable[[Any], None]:
    """Retrain on the daemon's scheduler: every ``interval_s`` and after ``after_n_outcomes``.

    Returns the outcome listener to register on the ingestor (it only counts);
    the training itself runs in a scheduler job, never on the poll's thread,
    so a long fit cannot delay the recording of outcomes.
    """
    schedule = RetrainSchedule(retrain_settings, last_trained_at=time.time())
    lock = threading.Lock()

    def listener(_record: Any) -> None:
        with lock:
            schedule.note_outcomes(1)

    def check() -> None:
        with lock:
            due = schedule.due()
        if not due:
            return
        try:
            retrain()
        except Exception:  # noqa: BLE001 - a failed fit keeps the old models serving
            log.exception("scheduled retrain failed; keeping the current models")
        with lock:
            schedule.trained()

    scheduler.add_job(check, "interval", seconds=check_every_s, id="harp-retrain",
                      max_instances=1, coalesce=True)
    return listener
